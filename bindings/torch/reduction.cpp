#include "reduction.hpp"

#include <c10/util/Exception.h>

#include <optional>

namespace holmes::torch_backend {
namespace {

std::optional<hm_dtype_t> holmes_dtype(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return HM_FLOAT32;
    case at::kDouble:
      return HM_FLOAT64;
    case at::kHalf:
      return HM_FLOAT16;
    case at::kBFloat16:
      return HM_BFLOAT16;
    case at::kChar:
      return HM_INT8;
    case at::kByte:
    case at::kBool:  // one byte, 0 or 1
      return HM_UINT8;
    case at::kInt:
      return HM_INT32;
    case at::kLong:
      return HM_INT64;
    default:
      return std::nullopt;
  }
}

bool is_integral(at::ScalarType type) {
  return type == at::kChar || type == at::kByte || type == at::kInt || type == at::kLong;
}

[[noreturn]] void refuse(const char* collective, c10d::ReduceOp::RedOpType op, at::ScalarType type,
                         const char* why) {
  TORCH_CHECK(false, "holmes backend: ", collective, " with op ", op_name(op), " on dtype ",
              c10::toString(type), " is not supported (", why, ")");
}

}  // namespace

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
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
      return "UNKNOWN";
  }
}

Carrier carrier_of(const at::Tensor& tensor) {
  const auto numel = static_cast<std::size_t>(tensor.numel());
  if (const auto dtype = holmes_dtype(tensor.scalar_type())) return {*dtype, numel};
  return {HM_UINT8, numel * tensor.element_size()};
}

Reduction reduction_of(const char* collective, const at::Tensor& tensor,
                       const c10d::ReduceOp& reduce_op) {
  const auto op = static_cast<c10d::ReduceOp::RedOpType>(reduce_op.op_);
  const auto type = tensor.scalar_type();
  Reduction r;
  r.torch_op = op;
  r.count = static_cast<std::size_t>(tensor.numel());
  if (op == c10d::ReduceOp::PREMUL_SUM) refuse(collective, op, type, "it is NCCL's alone");
  const bool bitwise =
      op == c10d::ReduceOp::BAND || op == c10d::ReduceOp::BOR || op == c10d::ReduceOp::BXOR;
  // Complex numbers add as pairs of reals.
  if (type == at::kComplexFloat || type == at::kComplexDouble) {
    if (op != c10d::ReduceOp::SUM && op != c10d::ReduceOp::AVG) {
      refuse(collective, op, type, "complex tensors reduce with SUM or AVG only");
    }
    r.dtype = type == at::kComplexFloat ? HM_FLOAT32 : HM_FLOAT64;
    r.op = op == c10d::ReduceOp::SUM ? HM_SUM : HM_AVG;
    r.count *= 2;
    return r;
  }
  const auto dtype = holmes_dtype(type);
  if (!dtype) {
    refuse(collective, op, type,
           "Holmes reduces float32/64, float16, bfloat16, int8, uint8, int32, int64, bool and "
           "complex");
  }
  r.dtype = *dtype;
  if (type == at::kBool) {
    // Logical: SUM, MAX and BOR are "any", PRODUCT, MIN and BAND "all" (0/1 bytes).
    switch (op) {
      case c10d::ReduceOp::SUM:
      case c10d::ReduceOp::MAX:
      case c10d::ReduceOp::BOR:
        r.op = HM_MAX;
        return r;
      case c10d::ReduceOp::PRODUCT:
      case c10d::ReduceOp::MIN:
      case c10d::ReduceOp::BAND:
        r.op = HM_MIN;
        return r;
      case c10d::ReduceOp::BXOR:
        r.kind = Reduction::Kind::kBitwise;
        return r;
      default:
        refuse(collective, op, type, "a mean of booleans is not a boolean");
    }
  }
  if (bitwise) {
    if (!is_integral(type)) refuse(collective, op, type, "bitwise ops take integer tensors");
    r.kind = Reduction::Kind::kBitwise;
    return r;
  }
  switch (op) {
    case c10d::ReduceOp::SUM:
      r.op = HM_SUM;
      break;
    case c10d::ReduceOp::AVG:
      r.op = HM_AVG;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = HM_PROD;
      break;
    case c10d::ReduceOp::MIN:
      r.op = HM_MIN;
      break;
    case c10d::ReduceOp::MAX:
      r.op = HM_MAX;
      break;
    default:
      refuse(collective, op, type, "unknown op");
  }
  return r;
}

at::Tensor fold_bitwise(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op) {
  at::Tensor out = gathered[0].clone();
  for (int64_t i = 1; i < gathered.size(0); ++i) {
    const at::Tensor row = gathered[i];
    if (op == c10d::ReduceOp::BAND) {
      out.bitwise_and_(row);
    } else if (op == c10d::ReduceOp::BOR) {
      out.bitwise_or_(row);
    } else {
      out.bitwise_xor_(row);
    }
  }
  return out;
}

}  // namespace holmes::torch_backend
