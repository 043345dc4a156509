#include "ddpd/common/shared_buffer_fallback.h"

#include <stdexcept>
#include <system_error>

namespace ddpd {

const char* to_string(SharedBufferStep step) {
  return step == SharedBufferStep::kCreate ? "create" : "map";
}

SharedBufferStep shared_buffer_step_from_string(const std::string& name) {
  if (name == "create") return SharedBufferStep::kCreate;
  if (name == "map") return SharedBufferStep::kMap;
  throw std::invalid_argument("unknown shared-buffer step '" + name + "' (create, map)");
}

std::string describe(const SharedBufferFallback& fallback) {
  const std::string what =
      fallback.step == SharedBufferStep::kCreate
          ? "could not create its buffer in /dev/shm"
          : "could not map rank " + std::to_string(fallback.peer) + "'s buffer";
  return "shared buffers fell back to private memory: rank " + std::to_string(fallback.rank) + " " +
         what + " (" + std::generic_category().message(fallback.error_number) + ", errno " +
         std::to_string(fallback.error_number) + ")";
}

}  // namespace ddpd
