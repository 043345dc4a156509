// The only file that includes c10d's ProcessGroupGloo.hpp. It compiles against
// gloo_declarations/ (why: gloo_declarations/gloo/declarations.h), so it only calls what the
// wheel exports and passes gloo's objects along as pointers.
#include "comm/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <cctype>

namespace ddpd {

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_address) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(bind_address.empty()
                                 ? c10d::ProcessGroupGloo::createDefaultDevice()
                                 : c10d::ProcessGroupGloo::createDeviceForHostname(bind_address));
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
}

CollectiveFailure gloo_failure_cause(const std::string& message) {
  std::string lower = message;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* text) { return lower.find(text) != std::string::npos; };
  if (has("timed out") || has("timeout")) return CollectiveFailure::kTimedOut;
  if (has("closed by peer") || has("connection reset") || has("broken pipe") ||
      has("connection refused") || has("end of file")) {
    return CollectiveFailure::kPeerExited;
  }
  return CollectiveFailure::kBackend;
}

}  // namespace ddpd
