#include "core/dtype.hpp"

namespace holmes {

const char* dtype_name(hm_dtype_t dtype) noexcept {
  switch (dtype) {
    case HM_INT8:
      return "int8";
    case HM_UINT8:
      return "uint8";
    case HM_INT32:
      return "int32";
    case HM_UINT32:
      return "uint32";
    case HM_INT64:
      return "int64";
    case HM_UINT64:
      return "uint64";
    case HM_FLOAT16:
      return "float16";
    case HM_BFLOAT16:
      return "bfloat16";
    case HM_FLOAT32:
      return "float32";
    case HM_FLOAT64:
      return "float64";
    default:
      return "invalid-dtype";
  }
}

const char* op_name(hm_op_t op) noexcept {
  switch (op) {
    case HM_SUM:
      return "sum";
    case HM_PROD:
      return "prod";
    case HM_MIN:
      return "min";
    case HM_MAX:
      return "max";
    case HM_AVG:
      return "avg";
    default:
      return "invalid-op";
  }
}

}  // namespace holmes
