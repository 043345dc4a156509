// The "ddpd" backend's transfers on its Gloo companion: send, recv and all_to_all_single. DDP and
// FSDP2 do not call them; a script that does needs them correct, with the group's timeout and a
// clear error when the peer dies, more than fast. Gloo moves them as bytes (staging.h:
// bytes_of), so every dtype goes, int16 and bool included, which Gloo's typed paths refuse.

#include "chained_work.h"
#include "ddpd_backend.h"
#include "shm/served.h"
#include "staging.h"

namespace ddpd_torch {
namespace {

using ddpd::shm::check_data_move;
using ddpd::shm::check_same_dtype;
using ddpd::shm::kNoOp;
using ddpd::shm::not_served;

void check_one(const char* name, const std::vector<at::Tensor>& tensors) {
  if (tensors.size() != 1) {
    not_served(name, kNoOp, first(tensors),
               "ddpd moves one tensor per call, got " + std::to_string(tensors.size()));
  }
  check_data_move(name, tensors[0]);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> DdpdBackend::p2p_work(c10::intrusive_ptr<c10d::Work> gloo,
                                                     std::vector<at::Tensor> targets,
                                                     std::vector<at::Tensor> staged,
                                                     std::string what, c10d::OpType type) {
  std::function<void()> then;
  if (!all_same(staged, targets)) then = copy_back(targets, staged);
  return p2p_->add(std::move(gloo), std::move(targets), std::move(then), std::move(what), rank_,
                   type);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                 int tag) {
  check_one("send", tensors);
  at::Tensor staged = tensors[0].contiguous();  // kept alive by the work until Gloo has sent it
  std::vector<at::Tensor> bytes{bytes_of(staged)};
  auto gloo = companion().send(bytes, dst, tag);
  return p2p_work(std::move(gloo), {staged}, {staged}, "send to rank " + std::to_string(dst),
                  c10d::OpType::SEND);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                 int tag) {
  check_one("recv", tensors);
  at::Tensor staged = staged_for(tensors[0]);
  std::vector<at::Tensor> bytes{bytes_of(staged)};
  auto gloo = companion().recv(bytes, src, tag);
  return p2p_work(std::move(gloo), {tensors[0]}, {staged}, "recv from rank " + std::to_string(src),
                  c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                          int tag) {
  check_one("recv (any source)", tensors);
  at::Tensor staged = staged_for(tensors[0]);
  std::vector<at::Tensor> bytes{bytes_of(staged)};
  auto gloo = companion().recvAnysource(bytes, tag);
  return p2p_work(std::move(gloo), {tensors[0]}, {staged}, "recv from any rank",
                  c10d::OpType::RECVANYSOURCE);
}

c10::intrusive_ptr<c10d::Work> DdpdBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions& options) {
  const char* name = "all_to_all_single";
  check_data_move(name, input);
  check_data_move(name, output);
  check_same_dtype(name, input, output);
  at::Tensor in = input.contiguous();
  at::Tensor staged = staged_for(output);
  at::Tensor in_bytes = bytes_of(in);
  at::Tensor out_bytes = bytes_of(staged);
  auto inner = companion().alltoall_base(out_bytes, in_bytes, output_splits, input_splits, options);
  // Always chained: Gloo's future carries the byte views, and the caller's is `output`.
  return then_run(inner, {output}, copy_back({output}, {staged}), rank_,
                  c10d::OpType::ALLTOALL_BASE);
}

}  // namespace ddpd_torch
