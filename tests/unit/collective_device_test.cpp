// Every collective takes only tensors on its communicator's device, at every world size. The
// class of defect this guards: a host tensor handed to a CUDA communicator, which
// ProcessGroupNCCL refuses on the first GPU run (the comm benchmark's ceilings all-reduced a
// CPU double tensor until 2026-11-26). No GPU is needed to show it: a world-1 communicator on
// the meta device runs the same code paths, and any host tensor they hand it is refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "ddpd/core/comm_bench.h"
#include "ddpd/core/communicator.h"

namespace ddpd {
namespace {

std::shared_ptr<Communicator> single_on(at::Device device) {
  CommunicatorOptions options;
  options.device = device;
  return std::make_shared<Communicator>(c10::intrusive_ptr<c10d::Backend>(), 0, 1, options);
}

// The message of the std::invalid_argument `call` throws ("" when it throws none).
template <typename Call>
std::string refusal(Call call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CollectiveDevice, EveryCollectiveRefusesAHostTensorOnAnotherDevice) {
  auto comm = single_on(at::Device(at::kMeta));
  at::Tensor host = torch::zeros({4});
  at::Tensor gathered = torch::zeros({4});
  const std::string all_reduce = refusal([&] { comm->all_reduce_sum(host, "grads"); });
  EXPECT_NE(all_reduce.find("collective 'grads': tensor on cpu"), std::string::npos) << all_reduce;
  EXPECT_NE(all_reduce.find("device is meta"), std::string::npos) << all_reduce;
  EXPECT_NE(refusal([&] { comm->all_reduce(host, c10d::ReduceOp::MIN, "min"); }), "");
  EXPECT_NE(refusal([&] { comm->all_reduce(host, c10d::ReduceOp::MAX, "max"); }), "");
  EXPECT_NE(refusal([&] { comm->broadcast(host, 0, "state"); }), "");
  EXPECT_NE(refusal([&] { comm->all_gather(gathered, host, "shards"); }), "");
  EXPECT_NE(refusal([&] { comm->reduce_scatter_sum_async(gathered, host, "shards"); }), "");
}

TEST(CollectiveDevice, TensorsOnTheDeviceAreTaken) {
  auto comm = single_on(at::Device(at::kMeta));
  at::Tensor t = torch::zeros({4}, torch::TensorOptions().device(at::kMeta));
  at::Tensor out = torch::zeros({4}, torch::TensorOptions().device(at::kMeta));
  EXPECT_EQ(refusal([&] { comm->all_reduce_sum(t, "grads").wait(); }), "");
  EXPECT_EQ(refusal([&] { comm->all_gather(out, t, "shards").wait(); }), "");
  auto cpu = single_on(at::Device(at::kCPU));
  at::Tensor h = torch::ones({4});
  EXPECT_EQ(refusal([&] { cpu->all_reduce_sum(h, "grads").wait(); }), "");
}

// The comm benchmark's ceilings reduce their per-trial rates across ranks: on the
// communicator's device, not the host (it failed here before the fix).
TEST(CollectiveDevice, CommBenchmarkCeilingsReduceOnTheCommunicatorsDevice) {
  auto comm = single_on(at::Device(at::kMeta));
  Ceiling loopback;
  EXPECT_EQ(refusal([&] { loopback = measure_loopback_ceiling(*comm, 1); }), "");
  EXPECT_GT(loopback.median, 0.0);
  MemoryCeilings memory;
  EXPECT_EQ(refusal([&] { memory = measure_memory_ceilings(*comm, 4096, 1); }), "");
  EXPECT_GT(memory.memcpy.median, 0.0);
  EXPECT_GT(memory.in_place.median, 0.0);
}

}  // namespace
}  // namespace ddpd
