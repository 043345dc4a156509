// Whether a CUDA test may skip. A host without a GPU skips; a host with one must run: a broken
// driver, a runtime newer than the driver or a hidden device there is a failure, never a skip
// (cudaGetDeviceCount's error alone cannot tell "no GPU" from "broken": without a driver it
// says cudaErrorInsufficientDriver, as a too-old driver does). A GPU is present when the
// kernel exposes one: a /dev/nvidiaN device node.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

namespace ddpd::testing {

inline bool gpu_device_node_present() {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev", error)) {
    if (std::regex_match(entry.path().filename().string(), std::regex("nvidia[0-9]+"))) {
      return true;
    }
  }
  return false;
}

// The CUDA devices this process sees; "" in `problem` unless a GPU is present and CUDA fails.
inline int visible_gpus(std::string& problem) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  problem.clear();
  if (status != cudaSuccess) count = 0;
  if (count == 0 && gpu_device_node_present()) {
    problem = std::string("a GPU is present (/dev/nvidiaN) but CUDA sees none: ") +
              (status == cudaSuccess
                   ? "0 devices (CUDA_VISIBLE_DEVICES?)"
                   : cudaGetErrorName(status) + std::string(": ") + cudaGetErrorString(status));
  }
  return count;
}

}  // namespace ddpd::testing

// Skips without a GPU; fails where one is present but unusable; skips a test that needs more
// GPUs than the host has, saying how many it needs.
#define REQUIRE_GPUS(n)                                                             \
  do {                                                                              \
    std::string gpu_problem;                                                        \
    const int gpus = ::ddpd::testing::visible_gpus(gpu_problem);                    \
    if (!gpu_problem.empty()) FAIL() << gpu_problem;                                \
    if (gpus < (n)) {                                                               \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s); this host has " << gpus; \
    }                                                                               \
  } while (0)
