// oneCCL's all-reduce (float32, SUM, in place) for bench_torch_backend.sh, timed by the loop
// allreduce_busbw.py uses (allreduce_bench_loop.h), through oneCCL's own C++ API: PyPI's
// PyTorch bindings (oneccl_bind_pt) stop at torch 2.8, and this measures the same library.
// Ranks come from RANK/WORLD_SIZE; rank 0 publishes its KVS address in the file named by
// --kvs-file (renamed into place whole, so a reader never sees half of it).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <oneapi/ccl.hpp>
#include <string>
#include <thread>

#include "allreduce_bench_loop.h"

namespace {

ccl::shared_ptr_class<ccl::kvs> join_kvs(int rank, const std::string& path) {
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    auto address = kvs->get_address();
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(address.data(), address.size());
    std::rename(tmp.c_str(), path.c_str());
    return kvs;
  }
  ccl::kvs::address_type address;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    std::ifstream file(path, std::ios::binary);
    if (file && file.read(address.data(), address.size())) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "oneCCL: rank %d found no KVS address in %s after 60 s\n", rank,
                   path.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return ccl::create_kvs(address);
}

struct CclComm {
  ccl::communicator comm;
  int rank() const { return comm.rank(); }
  int world() const { return comm.size(); }
  void allreduce(float* data, size_t count) {
    ccl::allreduce(data, data, count, ccl::reduction::sum, comm).wait();
  }
  void barrier() { ccl::barrier(comm); }
};

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (!value) {
    std::fprintf(stderr, "oneCCL driver: %s is not set (bench_torch_backend.sh sets it)\n", name);
    std::exit(2);
  }
  return std::atoi(value);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) != "--kvs-file") {
    std::fprintf(stderr, "usage: %s --kvs-file PATH --sizes BYTES,... [--rounds N]\n", argv[0]);
    return 2;
  }
  std::string kvs_path = argv[2];
  argv[2] = argv[0];  // the loop's parser reads argv[3...]
  auto args = ddpd_bench::parse_loop_args(argc - 2, argv + 2);
  int rank = env_int("RANK"), world = env_int("WORLD_SIZE");
  ccl::init();
  auto kvs = join_kvs(rank, kvs_path);
  CclComm comm{ccl::create_communicator(world, rank, kvs)};
  ddpd_bench::run_loop(comm, "oneccl", args);
  return 0;
}
