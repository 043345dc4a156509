// ddpd's NCCL group on one GPU: world size 1 through the group itself (the Communicator
// short-circuits at world size 1, so only this reaches NCCL on a 1-GPU machine), and two ranks
// wrongly placed on one GPU, which must end in a clear error, not a hang.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cuda/gpu_presence.h"
#include "ddpd/core/comm_bench.h"
#include "ddpd/core/communicator.h"
#include "device/device.h"
#include "support/process.h"

namespace ddpd::testing {
namespace {

constexpr std::chrono::milliseconds kTimeout{60000};

at::Tensor on_gpu(std::vector<float> values) {
  return torch::tensor(values, torch::kFloat32).to(at::Device(at::kCUDA, 0));
}

// Every collective the strategies use, on ProcessGroupNCCL at world size 1, values checked.
TEST(CudaNcclGroup, WorldOneRunsEveryCollectiveThroughNccl) {
  REQUIRE_GPUS(1);
  detail::bind_cuda_device(0);
  auto group = detail::make_nccl_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, kTimeout);
  std::vector<at::Tensor> sum{on_gpu({1, 2, 3})};
  c10d::AllreduceOptions all_reduce;
  all_reduce.timeout = kTimeout;
  group->allreduce(sum, all_reduce)->wait();
  EXPECT_TRUE(sum[0].cpu().equal(torch::tensor({1.f, 2.f, 3.f})));
  std::vector<at::Tensor> broadcast{on_gpu({4, 5})};
  group->broadcast(broadcast)->wait();
  EXPECT_TRUE(broadcast[0].cpu().equal(torch::tensor({4.f, 5.f})));
  at::Tensor gathered = on_gpu({0, 0}), shard = on_gpu({6, 7});
  group->_allgather_base(gathered, shard)->wait();
  EXPECT_TRUE(gathered.cpu().equal(torch::tensor({6.f, 7.f})));
  at::Tensor scattered = on_gpu({0, 0}), input = on_gpu({8, 9});
  group->_reduce_scatter_base(scattered, input)->wait();
  EXPECT_TRUE(scattered.cpu().equal(torch::tensor({8.f, 9.f})));
  c10d::BarrierOptions barrier;
  barrier.device_ids = {0};
  group->barrier(barrier)->wait();
  group->shutdown();  // what destroy_process_group() does
}

// The comm benchmark's ceilings reduce their rates on the communicator's device (a host tensor
// here was refused by NCCL on every multi-rank comm job).
TEST(CudaNcclGroup, CommCeilingsRunOnACudaCommunicator) {
  REQUIRE_GPUS(1);
  CommunicatorOptions options;
  options.timeout = kTimeout;
  options.device = at::Device(at::kCUDA, 0);
  Communicator comm(c10::intrusive_ptr<c10d::Backend>(), 0, 1, options);
  EXPECT_GT(measure_loopback_ceiling(comm, 1).median, 0);
  EXPECT_GT(measure_memory_ceilings(comm, 1 << 20, 1).memcpy.median, 0);
}

// Two ranks told they are on two hosts (LOCAL_WORLD_SIZE 1), both on GPU 0 of this one: NCCL
// refuses a communicator with two ranks on one device. Each rank must exit with one line that
// says so, by the collective timeout (30 s) at the latest, not hang.
TEST(CudaNcclGroup, TwoRanksOnOneGpuEndInAClearError) {
  REQUIRE_GPUS(1);
  const std::vector<std::string> argv{binary_dir() + "/ddpd-train",
                                      "--model",
                                      "tiny",
                                      "--batch",
                                      "4",
                                      "--context",
                                      "64",
                                      "--steps",
                                      "2",
                                      "--device",
                                      "cuda",
                                      "--timeout",
                                      "30"};
  const int port = unused_port();
  std::vector<ProcessOutcome> outcomes(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      outcomes[r] = run_process(argv,
                                {{"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(port)},
                                 {"RANK", std::to_string(r)},
                                 {"WORLD_SIZE", "2"},
                                 {"LOCAL_RANK", "0"},
                                 {"LOCAL_WORLD_SIZE", "1"}},
                                std::chrono::seconds(90));
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + outcomes[r].err);
    EXPECT_FALSE(outcomes[r].timed_out);
    EXPECT_NE(outcomes[r].exit_code, 0);
    EXPECT_NE(outcomes[r].err.find("error"), std::string::npos);
    std::printf("rank %d exit %d: %s", r, outcomes[r].exit_code, outcomes[r].err.c_str());
  }
}

}  // namespace
}  // namespace ddpd::testing
