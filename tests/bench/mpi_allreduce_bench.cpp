// Open MPI's all-reduce (float32, SUM, in place) for bench_torch_backend.sh, timed by the loop
// allreduce_busbw.py uses (allreduce_bench_loop.h). Built there with mpicxx and run by mpirun
// with the MCA settings the bench prints (vader BTL, tuned collectives).
#include <mpi.h>

#include "allreduce_bench_loop.h"

namespace {

struct MpiComm {
  int rank() const {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
  }
  int world() const {
    int w = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    return w;
  }
  void allreduce(float* data, size_t count) {
    MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  auto args = ddpd_bench::parse_loop_args(argc, argv);
  MpiComm comm;
  ddpd_bench::run_loop(comm, "openmpi", args);
  MPI_Finalize();
  return 0;
}
