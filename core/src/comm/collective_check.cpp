#include "comm/collective_check.h"

#include <algorithm>
#include <map>
#include <vector>

#include "comm/failure_cause.h"
#include "ddpd/core/communicator.h"

namespace ddpd::detail {
namespace {

// Ops as the fingerprint encodes them.
constexpr const char* kFingerprintOps[] = {"all_reduce", "broadcast", "all_gather",
                                           "reduce_scatter", "barrier"};  // LaunchedCollective::op
constexpr int64_t kFields = 4;                                            // seq, op, numel, dtype

int64_t op_code(const std::string& op) {
  for (int64_t i = 0; i < static_cast<int64_t>(std::size(kFingerprintOps)); ++i) {
    if (op == kFingerprintOps[i]) return i;
  }
  return -1;
}

// "all_gather(4096 × float32)".
std::string fingerprint_text(const int64_t* f) {
  const std::string op = f[1] >= 0 && f[1] < static_cast<int64_t>(std::size(kFingerprintOps))
                             ? kFingerprintOps[f[1]]
                             : "op" + std::to_string(f[1]);
  return op + "(" + std::to_string(f[2]) + " × " + dtype_name(static_cast<at::ScalarType>(f[3])) +
         ")";
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  return text;
}

// Every rank's fingerprint, gathered.
std::vector<int64_t> gather(c10d::Backend& group, int world_size, const at::Device& device,
                            std::chrono::milliseconds timeout, const CollectiveFingerprint& mine) {
  at::Tensor own =
      at::tensor({mine.seq, op_code(mine.op), mine.numel, static_cast<int64_t>(mine.dtype)},
                 at::TensorOptions().dtype(at::kLong))
          .to(device);
  at::Tensor all = at::empty({kFields * world_size}, own.options());
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < world_size; ++r) outputs[0].push_back(all.narrow(0, r * kFields, kFields));
  std::vector<at::Tensor> inputs{own};
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  auto work = group.allgather(outputs, inputs, options);
  try {
    work->wait(timeout);
  } catch (const std::exception& e) {
    const TransportFailure failure = failure_of(e);
    throw CollectiveError(describe_collective_failure("all_gather/fingerprint of " + mine.op +
                                                          " #" + std::to_string(mine.seq),
                                                      failure.cause(), timeout, failure.what()),
                          failure.cause(), failure.peer_rank());
  }
  const at::Tensor host = all.cpu();
  return {host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + kFields * world_size};
}

}  // namespace

void check_fingerprint(c10d::Backend& group, int world_size, const at::Device& device,
                       std::chrono::milliseconds timeout, const CollectiveFingerprint& mine) {
  const std::vector<int64_t> f = gather(group, world_size, device, timeout, mine);
  // The majority's fingerprint is taken as the intended collective.
  std::map<std::vector<int64_t>, std::vector<int>> by_fingerprint;
  for (int r = 0; r < world_size; ++r) {
    by_fingerprint[std::vector<int64_t>(f.begin() + r * kFields, f.begin() + (r + 1) * kFields)]
        .push_back(r);
  }
  if (by_fingerprint.size() == 1) return;
  auto majority = std::max_element(
      by_fingerprint.begin(), by_fingerprint.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size() ||
               (a.second.size() == b.second.size() && a.second.front() > b.second.front());
      });
  std::string message;
  bool first = true;
  int named_rank = world_size;
  for (const auto& [fingerprint, ranks] : by_fingerprint) {
    if (&fingerprint == &majority->first) continue;
    named_rank = std::min(named_rank, ranks.front());
    message += std::string(first ? "" : "; ") + ranks_text(ranks) + " launched " +
               fingerprint_text(fingerprint.data()) + " as #" + std::to_string(fingerprint[0]);
    first = false;
  }
  message += " where " + ranks_text(majority->second) + " launched " +
             fingerprint_text(majority->first.data()) + " as #" +
             std::to_string(majority->first[0]);
  throw CollectiveDesync(message, named_rank);
}

DesyncCheckBackend::DesyncCheckBackend(c10::intrusive_ptr<c10d::Backend> inner, at::Device device,
                                       std::chrono::milliseconds timeout)
    : DecoratingBackend(std::move(inner)), device_(device), timeout_(timeout) {}

c10::intrusive_ptr<c10d::Work> DesyncCheckBackend::intercept(const LaunchedCollective& collective) {
  check_fingerprint(inner(), getSize(), device_, timeout_,
                    {++launched_, collective.op, collective.numel, collective.dtype});
  return {};
}

}  // namespace ddpd::detail
