// The one symbol core/src/comm/transport.cpp takes from common/src/job_options.cpp: the names of
// GroupTransport, whose "shm" rank 0 publishes as its decision. job_options.cpp would bring
// CLI11, the HF config reader and the rest of the job model into this module. The words must be
// common/src/job_options.cpp's: a ddpd-train rank and a Python rank never share a store, but a
// reader of the store should see one protocol.
// Remove this file once transport.cpp no longer calls enum_name (issue 63's core change).

#include "ddpd/common/job_options.h"

namespace ddpd {

const std::vector<std::string>& EnumInfo<GroupTransport>::names() {
  static const std::vector<std::string> names = {"none", "gloo", "shm", "nccl"};
  return names;
}

}  // namespace ddpd
