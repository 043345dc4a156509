#pragma once
// What the ddpd backend serves, checked on the launching thread before a collective is queued.
// Every rank launches the same collective with the same dtype and op (c10d's contract), so every
// rank fails the same check at launch and no peer is left waiting inside a collective. Until
// this check existed, an op the shm group lacks (PRODUCT, say) threw on the group's executor in
// the middle of the collective: only the reducing rank failed, the group was poisoned and its
// peers timed out (issue 63).

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>
#include <vector>

namespace ddpd_torch {

// "float32", "bfloat16", "int64", …: the names torch's Python users write.
std::string dtype_name(at::ScalarType dtype);
// "SUM", "AVG", "PREMUL_SUM", …
std::string op_name(const c10d::ReduceOp& op);

// Throws NotImplementedError (a RuntimeError in Python) naming the collective, the op, the dtype
// and the device, why ddpd does not serve it, and what to do instead.
[[noreturn]] void not_served(const std::string& collective, const std::string& op,
                             const at::Tensor& example, const std::string& why);

// A tensor a reduction may take with `op`: strided, on the CPU, a numeric dtype the shm group
// reduces (float32/64, bfloat16, float16, int8/16/32/64, uint8), and AVG only on floating ones.
void check_reduction(const std::string& collective, const at::Tensor& tensor,
                     const c10d::ReduceOp& op);
// A tensor a data-moving collective (broadcast, all-gather) may take: strided, on the CPU; any
// dtype, as the bytes are copied unchanged.
void check_data_move(const std::string& collective, const at::Tensor& tensor);
// `other` has `reference`'s dtype: the shm group moves bytes, so a mismatch would reinterpret
// them instead of failing.
void check_same_dtype(const std::string& collective, const at::Tensor& reference,
                      const at::Tensor& other);

// Whether `op` on this tensor is done as SUM followed by a division by the group's size.
inline bool is_average(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::AVG; }

}  // namespace ddpd_torch
