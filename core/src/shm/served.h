#pragma once
// What the shm process group serves, checked on the launching thread before a collective is
// queued (ShmProcessGroup's public collectives call these first). Every rank launches the same
// collective with the same dtype and op (c10d's contract), so every rank fails the same check at
// launch and no peer is left waiting inside a collective. Before these checks an op the group
// lacked (PRODUCT, say) threw on the executor in the middle of the collective: only the reducing
// rank failed, the group was poisoned and its peers timed out (issue 63).
//
// Each failure is a c10::NotImplementedError (NotImplementedError in Python) naming the
// collective, the op, the dtype and the device, why, and what to do. Header-only, as
// comm/collective_names.h.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

#include "comm/collective_names.h"

namespace ddpd::shm {

// The "op" of a collective that does not reduce.
inline constexpr char kNoOp[] = "none";

[[noreturn]] inline void not_served(const std::string& collective, const std::string& op,
                                    const at::Tensor& example, const std::string& why) {
  const std::string dtype = example.defined() ? detail::dtype_name(example.scalar_type()) : "no";
  const std::string device = example.defined() ? example.device().str() : "no device";
  TORCH_CHECK_NOT_IMPLEMENTED(false, "ddpd: ", collective, " with op ", op, " on ", dtype,
                              " tensors on ", device, " is not served (", why,
                              "); run it on a Gloo group instead (in PyTorch: "
                              "group = torch.distributed.new_group(backend=\"gloo\"))");
}

inline bool is_floating(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 ||
         dtype == at::kHalf;
}

inline bool is_integer(at::ScalarType dtype) {
  return dtype == at::kChar || dtype == at::kByte || dtype == at::kShort || dtype == at::kInt ||
         dtype == at::kLong;
}

inline bool is_bitwise(c10d::ReduceOp::RedOpType op) {
  return op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
}

// A strided CPU tensor: the group moves host bytes. A tensor elsewhere is an error, never a
// silent copy.
inline void check_placement(const std::string& collective, const std::string& op,
                            const at::Tensor& tensor) {
  if (!tensor.device().is_cpu()) {
    not_served(collective, op, tensor,
               "ddpd moves CPU tensors only; a tensor on another device is an error, never a "
               "silent copy");
  }
  if (tensor.layout() != at::kStrided) {
    not_served(collective, op, tensor, "ddpd serves dense (strided) tensors only, not sparse ones");
  }
}

// A tensor a reduction may take with `op`: SUM, PRODUCT, MIN, MAX on float32/64, bfloat16,
// float16 and the int8..int64/uint8 dtypes; AVG on the floating ones (an integer mean would
// truncate, and Gloo has no AVG to agree with); BAND, BOR, BXOR on the integer ones.
inline void check_reduction(const std::string& collective, const at::Tensor& tensor,
                            const c10d::ReduceOp& op) {
  const std::string name = detail::op_name(op);
  check_placement(collective, name, tensor);
  const c10d::ReduceOp::RedOpType type = op.op_;
  const at::ScalarType dtype = tensor.scalar_type();
  const bool arithmetic = type == c10d::ReduceOp::SUM || type == c10d::ReduceOp::PRODUCT ||
                          type == c10d::ReduceOp::MIN || type == c10d::ReduceOp::MAX;
  if (!arithmetic && type != c10d::ReduceOp::AVG && !is_bitwise(type)) {
    not_served(collective, name, tensor,
               "ddpd reduces with SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR and BXOR");
  }
  if (!is_floating(dtype) && !is_integer(dtype)) {
    not_served(collective, name, tensor,
               "ddpd reduces float32, float64, bfloat16, float16 and the int8 to int64 and "
               "uint8 dtypes");
  }
  if (type == c10d::ReduceOp::AVG && !is_floating(dtype)) {
    not_served(collective, name, tensor, "AVG needs a floating dtype");
  }
  if (is_bitwise(type) && !is_integer(dtype)) {
    not_served(collective, name, tensor, name + " needs an integer dtype");
  }
}

// A tensor a data-moving collective (broadcast, all-gather, all-to-all, send/recv) may take:
// strided, on the CPU, any dtype, as the bytes are copied unchanged.
inline void check_data_move(const std::string& collective, const at::Tensor& tensor) {
  check_placement(collective, kNoOp, tensor);
}

// `other` has `reference`'s dtype: the group moves bytes, so a mismatch would reinterpret them
// instead of failing.
inline void check_same_dtype(const std::string& collective, const at::Tensor& reference,
                             const at::Tensor& other) {
  if (other.scalar_type() != reference.scalar_type()) {
    not_served(collective, kNoOp, other,
               "its input is " + detail::dtype_name(reference.scalar_type()) +
                   "; inputs and outputs must have one dtype");
  }
}

}  // namespace ddpd::shm
