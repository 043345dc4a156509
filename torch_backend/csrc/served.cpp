#include "served.h"

#include <c10/util/Exception.h>

namespace ddpd_torch {
namespace {

// What to do instead, in every message: Gloo serves the rest on the same processes.
constexpr char kInstead[] =
    "; run it on a Gloo group instead (group = torch.distributed.new_group(backend=\"gloo\"))";

bool is_floating(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 ||
         dtype == at::kHalf;
}

// The dtypes the shm group's reductions handle: the fused float sums, and ATen's add/min/max for
// the rest. Bool and complex tensors only move (MIN/MAX mean nothing on complex numbers).
bool is_reducible(at::ScalarType dtype) {
  return is_floating(dtype) || dtype == at::kChar || dtype == at::kByte || dtype == at::kShort ||
         dtype == at::kInt || dtype == at::kLong;
}

void check_placement(const std::string& collective, const std::string& op,
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

}  // namespace

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kShort:
      return "int16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kBool:
      return "bool";
    case at::kComplexFloat:
      return "complex64";
    case at::kComplexDouble:
      return "complex128";
    default:
      return c10::toString(dtype);
  }
}

std::string op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "op " + std::to_string(static_cast<int>(op.op_));
  }
}

void not_served(const std::string& collective, const std::string& op, const at::Tensor& example,
                const std::string& why) {
  const std::string dtype = example.defined() ? dtype_name(example.scalar_type()) : "no";
  const std::string device = example.defined() ? example.device().str() : "no device";
  TORCH_CHECK_NOT_IMPLEMENTED(false, "ddpd: ", collective, " with op ", op, " on ", dtype,
                              " tensors on ", device, " is not served (", why, ")", kInstead);
}

void check_reduction(const std::string& collective, const at::Tensor& tensor,
                     const c10d::ReduceOp& op) {
  const std::string name = op_name(op);
  check_placement(collective, name, tensor);
  const c10d::ReduceOp::RedOpType type = op.op_;
  if (type != c10d::ReduceOp::SUM && type != c10d::ReduceOp::MIN && type != c10d::ReduceOp::MAX &&
      type != c10d::ReduceOp::AVG) {
    not_served(collective, name, tensor, "ddpd reduces with SUM, AVG, MIN and MAX");
  }
  if (!is_reducible(tensor.scalar_type())) {
    not_served(collective, name, tensor,
               "ddpd reduces float32, float64, bfloat16, float16 and the int8 to int64 and "
               "uint8 dtypes");
  }
  if (type == c10d::ReduceOp::AVG && !is_floating(tensor.scalar_type())) {
    not_served(collective, name, tensor, "AVG needs a floating dtype");
  }
}

void check_data_move(const std::string& collective, const at::Tensor& tensor) {
  check_placement(collective, "none", tensor);
}

void check_same_dtype(const std::string& collective, const at::Tensor& reference,
                      const at::Tensor& other) {
  if (other.scalar_type() != reference.scalar_type()) {
    not_served(collective, "none", other,
               "its input is " + dtype_name(reference.scalar_type()) +
                   "; inputs and outputs must have one dtype");
  }
}

}  // namespace ddpd_torch
