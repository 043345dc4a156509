// The only file that includes c10d's ProcessGroupGloo.hpp. It compiles against
// gloo_declarations/ (why: gloo_declarations/gloo/declarations.h), so it only calls what the
// wheel exports and passes gloo's objects along as pointers.
#include "comm/gloo_backend.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

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

}  // namespace ddpd
