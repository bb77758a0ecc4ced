// wsync_status_string: the C API's names for status codes.
#include "wsync/wsync_types.h"

extern "C" const char* wsync_status_string(wsync_status_t status) {
  switch (status) {
    case WSYNC_SUCCESS:
      return "WSYNC_SUCCESS";
    case WSYNC_IN_PROGRESS:
      return "WSYNC_IN_PROGRESS";
    case WSYNC_ERR_INVALID_ARGUMENT:
      return "WSYNC_ERR_INVALID_ARGUMENT";
    case WSYNC_ERR_INVALID_USAGE:
      return "WSYNC_ERR_INVALID_USAGE";
    case WSYNC_ERR_MISMATCH:
      return "WSYNC_ERR_MISMATCH";
    case WSYNC_ERR_TIMEOUT:
      return "WSYNC_ERR_TIMEOUT";
    case WSYNC_ERR_NOT_READY:
      return "WSYNC_ERR_NOT_READY";
    case WSYNC_ERR_SYSTEM:
      return "WSYNC_ERR_SYSTEM";
    case WSYNC_ERR_REMOTE:
      return "WSYNC_ERR_REMOTE";
    case WSYNC_ERR_PROTOCOL:
      return "WSYNC_ERR_PROTOCOL";
    case WSYNC_ERR_UNSUPPORTED:
      return "WSYNC_ERR_UNSUPPORTED";
    case WSYNC_ERR_ABORTED:
      return "WSYNC_ERR_ABORTED";
    case WSYNC_ERR_INTERNAL:
      return "WSYNC_ERR_INTERNAL";
    case WSYNC_ERR_TRAINERS_DONE:
      return "WSYNC_ERR_TRAINERS_DONE";
    case WSYNC_STATUS_FORCE_INT32_:
      break;
  }
  return "WSYNC_UNKNOWN_STATUS";
}
