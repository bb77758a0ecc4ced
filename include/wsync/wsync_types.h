/* wsync public types: status codes, dtypes, memory kinds. Part of the wsync.h header family. */
#ifndef WSYNC_WSYNC_TYPES_H_
#define WSYNC_WSYNC_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The one status type every wsync function returns. */
typedef enum {
  WSYNC_SUCCESS = 0,
  WSYNC_IN_PROGRESS = 1,          /**< test(): the operation has not finished yet (not an error) */
  WSYNC_ERR_INVALID_ARGUMENT = 2, /**< a parameter is malformed (null, negative, out of range) */
  WSYNC_ERR_INVALID_USAGE = 3,    /**< a call out of order (publish before commit, ...) */
  WSYNC_ERR_MISMATCH = 4,         /**< registrations disagree: shape, dtype, name, coverage */
  WSYNC_ERR_TIMEOUT = 5,          /**< a wait ran past its timeout; nothing was lost */
  WSYNC_ERR_NOT_READY = 6,        /**< no version is ready (yet), or the asked one is gone */
  WSYNC_ERR_SYSTEM = 7,           /**< an OS, MPI, UCX or CUDA call failed */
  WSYNC_ERR_REMOTE = 8,           /**< a peer or the coordinator failed or reported an error */
  WSYNC_ERR_PROTOCOL = 9,         /**< a malformed, truncated or unauthenticated message */
  WSYNC_ERR_UNSUPPORTED = 10,     /**< valid, but not supported by this build or machine */
  WSYNC_ERR_ABORTED = 11,         /**< the context was aborted */
  WSYNC_ERR_INTERNAL = 12,        /**< a bug in wsync; the message says where */
  WSYNC_ERR_TRAINERS_DONE = 13,   /**< rollouts: the trainers finished; no newer version comes */
  WSYNC_STATUS_FORCE_INT32_ = 0x7fffffff
} wsync_status_t;

/** Element types. Sizes: float32 4, bfloat16/float16 2, float8 1, intN N/8, uint8 1, bool 1. */
typedef enum {
  WSYNC_DTYPE_FLOAT32 = 0,
  WSYNC_DTYPE_BFLOAT16 = 1,
  WSYNC_DTYPE_FLOAT16 = 2,
  WSYNC_DTYPE_FLOAT8_E4M3 = 3,
  WSYNC_DTYPE_FLOAT8_E5M2 = 4,
  WSYNC_DTYPE_INT8 = 5,
  WSYNC_DTYPE_INT16 = 6,
  WSYNC_DTYPE_INT32 = 7,
  WSYNC_DTYPE_INT64 = 8,
  WSYNC_DTYPE_UINT8 = 9,
  WSYNC_DTYPE_BOOL = 10,
  WSYNC_DTYPE_COUNT_ = 11,              /**< number of dtypes; not a dtype */
  WSYNC_DTYPE_FORCE_INT32_ = 0x7fffffff /**< keeps the type 32-bit; any int a caller passes is
                                             then a value of it (and rejected when invalid) */
} wsync_dtype_t;

/** Where a buffer lives. */
typedef enum {
  WSYNC_MEMORY_HOST = 0,
  WSYNC_MEMORY_DEVICE = 1, /**< CUDA device memory */
  WSYNC_MEMORY_FORCE_INT32_ = 0x7fffffff
} wsync_memory_kind_t;

/** A short, static, human-readable name for a status ("WSYNC_ERR_TIMEOUT", ...). */
const char* wsync_status_string(wsync_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_WSYNC_TYPES_H_ */
