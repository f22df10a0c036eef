#include "core/status.hpp"

namespace holmes {

const char* status_name(hm_status_t status) noexcept {
  switch (status) {
    case HM_SUCCESS:
      return "HM_SUCCESS";
    case HM_ERR_INVALID_ARGUMENT:
      return "HM_ERR_INVALID_ARGUMENT";
    case HM_ERR_MISMATCH:
      return "HM_ERR_MISMATCH";
    case HM_ERR_TIMEOUT:
      return "HM_ERR_TIMEOUT";
    case HM_ERR_PEER_FAILED:
      return "HM_ERR_PEER_FAILED";
    case HM_ERR_AUTH:
      return "HM_ERR_AUTH";
    case HM_ERR_TRANSPORT:
      return "HM_ERR_TRANSPORT";
    case HM_ERR_UNSUPPORTED:
      return "HM_ERR_UNSUPPORTED";
    case HM_ERR_OUT_OF_MEMORY:
      return "HM_ERR_OUT_OF_MEMORY";
    case HM_ERR_ABORTED:
      return "HM_ERR_ABORTED";
    case HM_ERR_INTERNAL:
      return "HM_ERR_INTERNAL";
  }
  return "HM_ERR_UNKNOWN_STATUS";
}

}  // namespace holmes
