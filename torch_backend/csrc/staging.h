#pragma once
// Staging between the caller's tensors and the contiguous bytes the transports write, shared by
// the backend's files.

#include <ATen/ATen.h>
#include <c10/util/strides.h>

#include <functional>
#include <vector>

namespace ddpd_torch {

inline at::Tensor first(const std::vector<at::Tensor>& tensors) {
  return tensors.empty() ? at::Tensor() : tensors[0];
}
inline at::Tensor first(const std::vector<std::vector<at::Tensor>>& lists) {
  return lists.empty() ? at::Tensor() : first(lists[0]);
}

// A contiguous stand-in for `tensor` (itself when it is contiguous).
inline at::Tensor staged_for(const at::Tensor& tensor) {
  return tensor.is_contiguous() ? tensor : at::empty(tensor.sizes(), tensor.options());
}

// Whether every staged tensor is its target (all were contiguous): nothing to copy back.
inline bool all_same(const std::vector<at::Tensor>& staged,
                     const std::vector<at::Tensor>& targets) {
  for (size_t i = 0; i < targets.size(); ++i) {
    if (!staged[i].is_same(targets[i])) return false;
  }
  return true;
}

// After the transfer: copies each staged result into its target where they differ.
inline std::function<void()> copy_back(std::vector<at::Tensor> targets,
                                       std::vector<at::Tensor> staged) {
  return [targets = std::move(targets), staged = std::move(staged)] {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!targets[i].is_same(staged[i])) targets[i].copy_(staged[i]);
    }
  };
}

// `tensor` (contiguous) with its contiguous strides: a tensor of at most one element counts as
// contiguous whatever its strides (one row of a transposed tensor: stride 2 at world 2), and a
// dtype view needs a last stride of 1. With at most one element every stride addresses it.
inline at::Tensor with_contiguous_strides(const at::Tensor& tensor) {
  if (tensor.numel() > 1) return tensor;
  return tensor.as_strided(tensor.sizes(), c10::contiguous_strides(tensor.sizes()));
}

// A contiguous tensor's bytes as a (rows, row bytes) uint8 view, rows its first dimension (1 for
// a scalar): Gloo moves bytes of any dtype this way (its typed paths lack int16, for one), and
// all-to-all's row splits stay rows.
inline at::Tensor bytes_of(const at::Tensor& tensor) {
  const at::Tensor t = with_contiguous_strides(tensor.dim() == 0 ? tensor.reshape({1}) : tensor);
  const int64_t rows = t.size(0);
  const int64_t row_bytes = rows == 0 ? 0 : t.numel() / rows * t.element_size();
  return t.view(at::kByte).reshape({rows, row_bytes});
}

}  // namespace ddpd_torch
