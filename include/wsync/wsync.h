/* clang-format off */
/* wsync: weight synchronization from RL trainers to rollout (inference) engines. The public C API.
 *
 * Model. Trainer ranks hold shards of the policy's tensors; rollout ranks (grouped in replicas, one
 * replica per engine instance) want shards of the same tensors, possibly in another layout and
 * dtype. Every rank creates a context, registers its local buffers (each made of pieces: boxes of
 * global tensors), and commits; the coordinator then computes a static plan once. Each policy step
 * the trainers publish a version; wsync moves the bytes (broadcast where layouts match, one-sided
 * writes where they differ) into a free slot of every rollout rank, and a version becomes readable
 * on a replica only once it is complete on all of its ranks. Readers take a lease on a version for
 * one forward pass; a slot is never written while a lease holds it.
 *
 * Conventions. Every function returns wsync_status_t (except the few that return a string). Output
 * parameters come last and are written only on success. wsync_last_error(ctx) explains the last
 * failure on that context. No function throws or aborts the process on bad input. Handles are
 * opaque.
 *
 * Trainer call sequence:
 * @code
 *   wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
 *   cfg.role = WSYNC_ROLE_TRAINER;              // bootstrap from MPI_COMM_WORLD (mpirun)
 *   wsync_context_t ctx;
 *   wsync_context_create(&cfg, &ctx);
 *
 *   // This rank holds rows [r0, r1) of the [4096, 4096] tensor "layers.0.wq".
 *   int64_t shape[2] = {4096, 4096}, off[2] = {r0, 0}, ext[2] = {r1 - r0, 4096};
 *   wsync_piece_t piece = WSYNC_PIECE_INITIALIZER;
 *   piece.tensor = "layers.0.wq";
 *   piece.ndim = 2;
 *   piece.global_shape = shape;
 *   piece.box_offset = off;
 *   piece.box_extent = ext;
 *   wsync_register_buffer(ctx, "layers.0.wq", WSYNC_DTYPE_FLOAT32, WSYNC_MEMORY_HOST, data,
 *                         (r1 - r0) * 4096, 1, &piece, NULL);
 *   wsync_commit(ctx);                          // collective: all trainers and rollouts
 *
 *   for (uint64_t step = 1; step <= num_steps; ++step) {
 *     train_step();
 *     wsync_request_t req;
 *     wsync_publish(ctx, step, &req);           // returns at once
 *     ...
 *     if (wsync_request_wait(req, -1) != WSYNC_SUCCESS)
 *       fprintf(stderr, "publish %llu: %s\n", (unsigned long long)step, wsync_request_error(req));
 *     wsync_request_free(req);
 *   }
 *   wsync_context_destroy(ctx);                 // finalizes
 * @endcode
 *
 * Rollout call sequence:
 * @code
 *   wsync_config_t cfg = WSYNC_CONFIG_INITIALIZER;
 *   cfg.role = WSYNC_ROLE_ROLLOUT;
 *   cfg.replica = my_engine_index;
 *   wsync_context_t ctx;
 *   wsync_context_create(&cfg, &ctx);
 *
 *   // One fused buffer of three pieces (q, k, v); wsync allocates its slots (data = NULL).
 *   int qkv_index;
 *   wsync_register_buffer(ctx, "qkv", WSYNC_DTYPE_BFLOAT16, WSYNC_MEMORY_HOST, NULL, n, 3, qkv,
 *                         &qkv_index);
 *   wsync_commit(ctx);
 *
 *   while (serving) {                           // at the start of each decode step
 *     wsync_lease_t lease;
 *     if (wsync_acquire(ctx, WSYNC_VERSION_NEWEST, &lease) == WSYNC_SUCCESS) {
 *       void* qkv_ptr;
 *       wsync_lease_buffer(lease, qkv_index, &qkv_ptr);
 *       forward(qkv_ptr, ...);
 *       wsync_lease_release(lease);
 *     }
 *   }
 *   wsync_context_destroy(ctx);
 * @endcode
 */
/* clang-format on */
#ifndef WSYNC_WSYNC_H_
#define WSYNC_WSYNC_H_

#include <stddef.h>
#include <stdint.h>

#include "wsync/wsync_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WSYNC_API_VERSION 1u
#define WSYNC_CONFIG_MAGIC 0x7773796eu /* "wsyn" */
/** The "unset" value of an int config field backed by an option (checksums, checksum_retries):
 *  the option's environment variable when set, else its default (docs/options.md). */
#define WSYNC_UNSET_INT (-2147483647 - 1)
/** For wsync_acquire(): the newest version ready on this rank's replica. */
#define WSYNC_VERSION_NEWEST UINT64_MAX

typedef struct wsync_context_s* wsync_context_t; /**< a trainer's or a rollout rank's context */
typedef struct wsync_request_s* wsync_request_t; /**< an asynchronous publish */
typedef struct wsync_lease_s* wsync_lease_t;     /**< a reader's hold on one ready version */
/** A CUDA stream (the same type as cudaStream_t); NULL is the legacy default stream. */
typedef struct CUstream_st* wsync_cuda_stream_t;

typedef enum {
  WSYNC_ROLE_TRAINER = 0,
  WSYNC_ROLE_ROLLOUT = 1,
  WSYNC_ROLE_FORCE_INT32_ = 0x7fffffff
} wsync_role_t;

typedef enum {
  /** Under mpirun: MPI_COMM_WORLD holds every rank (world rank 0: a trainer, which hosts the
   *  coordinator, or a wsync-coordinator process). A dead rank ends the job; failures, dropping
   *  and joining: docs/membership.md. */
  WSYNC_BOOTSTRAP_MPI = 0,
  /** No MPI: rank, counts and coordinator address come from the config (a separately launched
   *  wsync-coordinator). Dead rollout ranks are dropped with their replica, replicas may join, and
   *  trainers may restart (--trainer-restart): docs/membership.md. */
  WSYNC_BOOTSTRAP_EXPLICIT = 1,
  WSYNC_BOOTSTRAP_FORCE_INT32_ = 0x7fffffff
} wsync_bootstrap_t;

/** Device transport: how device-memory (WSYNC_MEMORY_DEVICE) versions reach the rollouts. */
typedef enum {
  WSYNC_DEVICE_TRANSPORT_DEFAULT = 0,  /**< wsync's choice (today: CUDA IPC) */
  WSYNC_DEVICE_TRANSPORT_CUDA_IPC = 1, /**< CUDA IPC peer copies (one node) */
  WSYNC_DEVICE_TRANSPORT_STAGED = 2,   /**< any node: through pinned host memory and UCX */
  WSYNC_DEVICE_TRANSPORT_UCX_CUDA = 3, /**< any node: UCX device puts when the UCX loaded handles
                                            CUDA memory, else staged */
  WSYNC_DEVICE_TRANSPORT_FORCE_INT32_ = 0x7fffffff
} wsync_device_transport_t;

/** How the CUDA IPC transport shares rollout slots with the trainers' processes. */
typedef enum {
  WSYNC_CUDA_IPC_EXPORT_DEFAULT = 0, /**< wsync's choice (today VMM where the driver supports it) */
  WSYNC_CUDA_IPC_EXPORT_VMM = 1,     /**< VMM allocations shared by file descriptor */
  WSYNC_CUDA_IPC_EXPORT_LEGACY = 2,  /**< cudaIpcGetMemHandle handles */
  WSYNC_CUDA_IPC_EXPORT_FORCE_INT32_ = 0x7fffffff
} wsync_cuda_ipc_export_t;

/** Context configuration. Initialize with WSYNC_CONFIG_INITIALIZER, then set fields.
 *
 *  How the struct grows (the rule every change must follow): fields are only ever appended at the
 *  end, never reordered, resized or removed; an appended field's "unset" value (WSYNC_UNSET_INT
 *  for an int backed by an option, else zero) means its default;
 *  WSYNC_CONFIG_INITIALIZER lists every field in declaration order; and the library learns the new
 *  layout (src/capi/capi_config.h). `size` tells wsync which layout, so which fields, the caller
 *  compiled: wsync reads only those and gives every later field its default, so a program compiled
 *  against an older header keeps working unchanged. A `size` wsync does not know (a caller built
 *  against a newer header) is INVALID_ARGUMENT. `version` changes only with an incompatible break.
 */
typedef struct {
  size_t size;      /**< sizeof(wsync_config_t) as the caller compiled it */
  uint32_t magic;   /**< WSYNC_CONFIG_MAGIC */
  uint32_t version; /**< WSYNC_API_VERSION */
  wsync_role_t role;
  wsync_bootstrap_t bootstrap;
  int replica; /**< rollouts: the replica (engine instance) index, >= 0 */
  /** rollouts: version slots per rank, >= 2 (default 2). With 3 or more the coordinator drains
      the next version's slot as soon as a version is delivered (lower latency per version), while
      the version before the newest stays acquirable until the next one starts. */
  int num_slots;
  int timeout_ms;    /**< bound on every internal wait (default 60000); a wait past it -> TIMEOUT */
  int max_staleness; /**< versions a replica may lag before publish waits for it; -1: unbounded */
  int snapshot;      /**< trainers: 1 = publish copies the buffers into staging before returning, so
                          the caller may modify them at once; 0 = buffers must stay unchanged until
                          the request completes */
  /* WSYNC_BOOTSTRAP_EXPLICIT only: */
  int rank;                        /**< index among the ranks of this role */
  int num_trainers;                /**< trainer ranks in the job */
  int num_rollouts;                /**< fixed rollout ranks in the job; 0: an elastic job (every
                                        replica joins at run time with replica_size > 0) */
  const char* coordinator_address; /**< "host:port" of the wsync-coordinator */
  const char* secret;              /**< shared secret (MPI bootstrap: generated when NULL) */
  /* Device memory: */
  int cuda_device; /**< CUDA device of WSYNC_MEMORY_DEVICE buffers (default -1: none) */
  /* ---- the end of the first (0.1.0) layout; fields below were appended later ---- */
  /* Device data plane (WSYNC_DEVICE_TRANSPORT and WSYNC_CUDA_IPC_EXPORT override these; the
     precedence rule of every option-backed field: docs/options.md): */
  wsync_device_transport_t device_transport; /**< default: WSYNC_DEVICE_TRANSPORT_DEFAULT */
  wsync_cuda_ipc_export_t cuda_ipc_export;   /**< default: WSYNC_CUDA_IPC_EXPORT_DEFAULT */
  /* ---- the end of the data-plane layout; fields below were appended later ---- */
  /* A rollout replica joining a running job (WSYNC_BOOTSTRAP_EXPLICIT with coordinator_address
     and secret; rank and num_rollouts unused). Its first version is copied from a running replica
     when one holds it (peer cold start); details and fallbacks: docs/membership.md. */
  int replica_size; /**< ranks of the joining replica (> 0); 0 (default): fixed membership */
  int replica_rank; /**< this rank's index in the joining replica, in [0, replica_size) */
  /* ---- the end of the joining layout; fields below were appended later ---- */
  /** 1: versions are checksummed and verified before they become readable (docs/checksums.md);
      0: off; WSYNC_UNSET_INT (initializer): WSYNC_CHECKSUMS, else off. Job-wide: the coordinator's
      rank decides; a rank that sets it otherwise fails the job (docs/options.md). */
  int checksums;
  /** With checksums: re-sends of a version that failed verification on a replica; -1: none;
      WSYNC_UNSET_INT (initializer) or 0 (kept from older headers): WSYNC_CHECKSUM_RETRIES, else 3.
      Job-wide, like checksums. */
  int checksum_retries;
  /* ---- the end of the checksums layout; fields below were appended later ---- */
  /** 1: delta versions: over one-sided writes that cross a NIC (rollouts on UCX or the staged
      device path, host or device trainers; not CUDA IPC) only the elements that changed since the
      version a replica holds are sent, and the replica rebuilds and verifies the version
      (implies checksums; docs/delta.md); 0: off; WSYNC_UNSET_INT (initializer): WSYNC_DELTA,
      else off. Job-wide, like checksums. */
  int delta;
  /** With delta: a write whose patch is larger than this share of its dense bytes goes dense, in
      (0, 1]; 0 (initializer): WSYNC_DELTA_MAX_SHARE, else 0.25. Job-wide, like delta. */
  double delta_max_share;
} wsync_config_t;

/* clang-format off */
#define WSYNC_CONFIG_INITIALIZER {                                                                 \
    sizeof(wsync_config_t), WSYNC_CONFIG_MAGIC, WSYNC_API_VERSION,                                 \
    WSYNC_ROLE_TRAINER,                 /* role */                                                 \
    WSYNC_BOOTSTRAP_MPI,                /* bootstrap */                                            \
    -1,                                 /* replica */                                              \
    2,                                  /* num_slots */                                            \
    60000,                              /* timeout_ms */                                           \
    -1,                                 /* max_staleness */                                        \
    0,                                  /* snapshot */                                             \
    -1, 0, 0,                           /* rank, num_trainers, num_rollouts */                     \
    NULL, NULL,                         /* coordinator_address, secret */                          \
    -1,                                 /* cuda_device */                                          \
    WSYNC_DEVICE_TRANSPORT_DEFAULT,     /* device_transport */                                     \
    WSYNC_CUDA_IPC_EXPORT_DEFAULT,      /* cuda_ipc_export */                                      \
    0, 0,                               /* replica_size, replica_rank */                           \
    WSYNC_UNSET_INT, WSYNC_UNSET_INT,   /* checksums, checksum_retries */                          \
    WSYNC_UNSET_INT, 0.0                /* delta, delta_max_share */                               \
  }
/* clang-format on */

/** One piece of a local buffer: elements [box_offset, box_offset + box_extent) of the global
 *  tensor `tensor` (global shape `global_shape`) live in the buffer from element `local_offset` on,
 *  with `local_strides` (elements per dimension; NULL = row-major over box_extent; the innermost
 *  stride must be 1). A buffer of several pieces expresses fused tensors (qkv) and flat ranges. */
typedef struct {
  const char* tensor;
  int ndim; /**< 0..6 */
  const int64_t* global_shape;
  const int64_t* box_offset; /**< NULL: all zeros */
  const int64_t* box_extent; /**< NULL: the whole global shape */
  int64_t local_offset;
  const int64_t* local_strides;
} wsync_piece_t;

#define WSYNC_PIECE_INITIALIZER \
  { NULL, 0, NULL, NULL, NULL, 0, NULL }

/** @name Context */
/**@{*/
/** Creates a context and joins the job (collective under WSYNC_BOOTSTRAP_MPI).
 *  @param [in] config   settings (WSYNC_CONFIG_INITIALIZER, then fields set)
 *  @param [out] ctx     the new context, written only on success
 *  Reaching the coordinator is retried with backoff within timeout_ms while it is not listening
 *  yet or answers busy (too many unauthenticated connections in the handshake, from this host or
 *  in all: it drops idle ones within seconds). The secret never travels: a challenge-response
 *  proves it both ways.
 *  @return SUCCESS; INVALID_ARGUMENT (null, bad magic/size, bad field: the message names it;
 *          explicit bootstrap without a secret); TIMEOUT (the coordinator or a rank did not show
 *          up, or the coordinator stayed busy); SYSTEM (MPI, socket or UCX failure); PROTOCOL
 *          (at once, never retried: the coordinator refused the secret, or does not speak this
 *          protocol or version); REMOTE.
 *          On failure no context exists; wsync_last_error(NULL) explains it. */
wsync_status_t wsync_context_create(const wsync_config_t* config, wsync_context_t* ctx);

/** Finalizes (tells the coordinator goodbye, waits for in-flight publishes up to the timeout) and
 *  frees the context. Leases must be released first. NULL is accepted.
 *  A rollout leaves the job first: its replica is out of the job at once (later versions do not
 *  wait for it, and the replica's other ranks receive no later version), and its slots are freed
 *  only once the coordinator confirms that no trainer writes into them any more. */
wsync_status_t wsync_context_destroy(wsync_context_t ctx);

/** Marks the context failed: every blocked call returns ABORTED. Safe from any thread. */
wsync_status_t wsync_context_abort(wsync_context_t ctx);

/** The explanation of the last failure on `ctx` (or of the last failed create when NULL); "" when
 *  none. Valid until the next call on the context from the same thread. */
const char* wsync_last_error(wsync_context_t ctx);

/** The version of the wsync library loaded at run time (its package version, e.g. 0.1.0). Any
 *  pointer may be NULL. @return SUCCESS. */
wsync_status_t wsync_get_version(int* major, int* minor, int* patch);

/** What the plan means for this rank (valid after commit). */
typedef struct {
  uint64_t bytes_per_version; /**< bytes delivered to all rollout ranks per version (whole job) */
  int64_t broadcast_groups;   /**< broadcast groups this rank sends or receives */
  int64_t write_ops; /**< one-sided writes this rank sends (trainer) or receives (rollout) */
  int num_replicas;  /**< rollout replicas in the job */
} wsync_plan_info_t;

/** @return SUCCESS; INVALID_USAGE before commit. */
wsync_status_t wsync_plan_info(wsync_context_t ctx, wsync_plan_info_t* info);

/** This rank's index among the ranks of its role, and the job's counts (valid after create). */
wsync_status_t wsync_context_info(wsync_context_t ctx, int* rank, int* num_trainers,
                                  int* num_rollouts);

/** What a context knows about its versions (wsync_version_stats). Initialize with
 *  WSYNC_VERSION_STATS_INITIALIZER. Grows like wsync_config_t: fields are only appended, `size`
 *  says which layout the caller compiled, and wsync writes only the fields of that layout.
 *  Trainer contexts fill the fields marked trainer, rollout contexts those marked rollout; the
 *  others are 0. */
typedef struct {
  size_t size;      /**< sizeof(wsync_version_stats_t) as the caller compiled it */
  uint64_t version; /**< trainer: the last delivered version; rollout: the newest ready here */
  /* trainer: what the coordinator measured for `version` */
  uint64_t bytes;             /**< bytes delivered to the replicas that took it */
  double seconds;             /**< from its start to its delivery (coordinator clock) */
  int replicas_ready;         /**< replicas that took it */
  int replicas_skipped;       /**< replicas busy past the grace that skipped it */
  int replicas_lost;          /**< replicas that left while it was in flight */
  uint32_t retries;           /**< re-sends to replicas whose checksum failed (config.checksums) */
  uint32_t checksum_failures; /**< failed checksum verifications, one per replica and attempt */
  /* rollout: how stale this rank is */
  int64_t age_ms;          /**< milliseconds since `version` became ready here */
  uint64_t newest_started; /**< the newest version the coordinator started */
  uint64_t lag;            /**< newest_started - version (0: `version` is the newest) */
  /* ---- the end of the first layout; fields below were appended later ---- */
  /* rollout: this rank's time to its first readable version */
  uint64_t first_version;       /**< the first version that became readable here */
  double first_version_seconds; /**< from wsync_context_create to first_version readable here */
  int first_version_from_peer;  /**< 1: copied from a peer replica (peer cold start); 0: the
                                     trainers sent it */
  /* ---- the end of the first-version layout; fields below were appended later ---- */
  /* trainer: what every trainer sent of `version` (writes, writes to joined replicas, broadcasts
     once per group; re-sends included) */
  uint64_t wire_bytes; /**< bytes they put on the wire (patches with config.delta) */
  uint64_t full_bytes; /**< bytes they carry dense (wire_bytes == full_bytes without delta) */
} wsync_version_stats_t;

#define WSYNC_VERSION_STATS_INITIALIZER \
  { sizeof(wsync_version_stats_t), 0, 0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, 0, 0 }

/** Trainer: the last delivered version and its stats. Rollout: the newest version ready on this
 *  rank, its age and lag, and its time to first readable version (a replica that joined the
 *  running job: how long from wsync_context_create until it could acquire a version, and whether
 *  a peer replica filled it). `stats` is written only on success, and only the fields of the
 *  caller's layout (`size`: the first layout ends with `lag`).
 *  @code
 *  wsync_version_stats_t s = WSYNC_VERSION_STATS_INITIALIZER;
 *  if (wsync_version_stats(ctx, &s) == WSYNC_SUCCESS)
 *    printf("version %llu, %lld ms old\n", (unsigned long long)s.version, (long long)s.age_ms);
 *  @endcode
 *  @return SUCCESS; NOT_READY (no version delivered / ready yet); INVALID_USAGE (before commit);
 *          INVALID_ARGUMENT (NULL, or a `size` this library does not know). */
wsync_status_t wsync_version_stats(wsync_context_t ctx, wsync_version_stats_t* stats);
/**@}*/

/** @name Registration (before commit) */
/**@{*/
/** Registers one local buffer made of `num_pieces` pieces.
 *  Trainers: `data` is the caller's buffer of `num_elements` elements of `dtype`; it must stay
 *  valid until the context is destroyed. Rollouts: wsync allocates the slots; `data` is NULL, or
 *  the engine's live parameter memory for wsync_copy_flip() (same memory kind and size).
 *  Device memory (WSYNC_MEMORY_DEVICE) lives on config.cuda_device; all buffers of a rank share
 *  one memory kind.
 *  @param [out] buffer_index  optional (may be NULL): the index for wsync_lease_buffer()
 *  @return SUCCESS; INVALID_ARGUMENT (a piece outside the buffer or the tensor, bad dtype,
 *          duplicate name; the message names the buffer and tensor); INVALID_USAGE (after
 *          commit); UNSUPPORTED (device memory in a build without CUDA). */
wsync_status_t wsync_register_buffer(wsync_context_t ctx, const char* name, wsync_dtype_t dtype,
                                     wsync_memory_kind_t memory, void* data, int64_t num_elements,
                                     int num_pieces, const wsync_piece_t* pieces,
                                     int* buffer_index);

/** Collective over all trainers and rollouts: sends the registrations, receives this rank's part of
 *  the plan, connects transports and registers memory (once). Returns when every rank is ready.
 *  The plan is checked before any rank starts a collective for it (broadcast communicators), so
 *  a rejected plan fails commit on every rank with the same error and no rank waits past its
 *  timeout.
 *  @return SUCCESS; MISMATCH (registrations disagree: the message names tensor, ranks and shapes,
 *          on every rank); UNSUPPORTED (on every rank: a conversion no trainer can do, e.g.
 *          float32 -> float8 from a host-memory trainer, since only device memory converts to
 *          float8; the message names the tensor, the trainer and the rollout ranks); TIMEOUT (a
 *          rank never committed; it is named); INVALID_USAGE (twice); SYSTEM; REMOTE. A trainer
 *          restarted against a `--trainer-restart` coordinator (WSYNC_BOOTSTRAP_EXPLICIT) commits
 *          alone with the other restarted trainers: MISMATCH when its registration differs from
 *          its predecessor's (the message names the rank and the first tensor that differs). */
wsync_status_t wsync_commit(wsync_context_t ctx);
/**@}*/

/** @name Trainer: publish */
/**@{*/
/** Sets the per-tensor scale of conversions of global tensor `tensor` into float8 (e4m3 / e5m2)
 *  on this trainer (block-scaled rollout weights ignore it: wsync_set_block_scaling): the rollout
 *  receives fp8(x * scale) (round to nearest even, saturating). Applies to
 *  versions published after this call; before or after commit; 1 until set. Conversions between
 *  wider types ignore it. Float8 conversion runs on the device (device-memory trainers).
 *  @return SUCCESS; INVALID_ARGUMENT (null name, `tensor` not declared on this rank, scale not
 *          finite and > 0); INVALID_USAGE (rollout context). */
wsync_status_t wsync_set_tensor_scale(wsync_context_t ctx, const char* tensor, float scale);

/** How a block-scaled float8 rollout weight stores its scales (wsync_block_scaling_t). The formulas
 *  are those of the engines' own quantizers, bit for bit (docs/block_fp8.md): amax is the maximum
 *  |x| of the block over the whole global tensor, whichever trainers hold its elements. */
typedef enum {
  /** float32 s = max(amax, 1e-4) / 448, q = e4m3(x * (1 / s)): vLLM's per_block_cast_to_fp8
      as torch runs it on the CPU (weight_scale_inv of DeepSeek-V3, Kimi-K2, Qwen3-FP8
      checkpoints). */
  WSYNC_SCALE_FLOAT32 = 1,
  /** the same with s rounded up to a power of two (per_block_cast_to_fp8 with use_ue8m0). */
  WSYNC_SCALE_POW2_FLOAT32 = 2,
  /** uint8 e8m0 e = clamp(ceil(log2(amax / 448)) + 127, 0, 254), q = e4m3(x / 2^(e - 127)):
      OCP MXFP8 (blocks of 1 x 32). */
  WSYNC_SCALE_E8M0 = 3,
  /** float32 s = max(amax, 1e-4) * fl(1 / 448), q as FLOAT32: per_block_cast_to_fp8 as torch runs
      it on CUDA devices, which multiplies by the reciprocal (the last bit of about half of the
      scales differs from FLOAT32's). */
  WSYNC_SCALE_FLOAT32_GPU = 4,
  WSYNC_SCALE_FORCE_INT32_ = 0x7fffffff
} wsync_scale_format_t;

/** A rollout's block-scaled float8 (e4m3) weight: blocks of block_rows x block_cols tile the last
 *  two dims of the global tensor (leading dims, e.g. experts, have block 1); the scales form a
 *  global tensor of their own, `scale_tensor`, of shape [..., ceil(rows / block_rows),
 *  ceil(cols / block_cols)] (float32, or uint8 for e8m0), which the rollout registers like any
 *  tensor (its TP shards take their rows of blocks). Grows like wsync_config_t (`size`). */
typedef struct {
  size_t size; /**< sizeof(wsync_block_scaling_t) as the caller compiled it */
  wsync_scale_format_t format;
  int64_t block_rows;       /**< along dim ndim-2 of the weight (1 for MXFP8) */
  int64_t block_cols;       /**< along dim ndim-1 (32 for MXFP8) */
  const char* scale_tensor; /**< the scale tensor's global name, e.g. "...weight_scale_inv" */
} wsync_block_scaling_t;

#define WSYNC_BLOCK_SCALING_INITIALIZER \
  { sizeof(wsync_block_scaling_t), WSYNC_SCALE_FLOAT32, 128, 128, NULL }

/** Rollouts, before commit: global tensor `tensor` is held as block-scaled float8 e4m3 with
 *  `scaling`. Trainers register their bfloat16 / float16 / float32 shards as usual; each trainer
 *  quantizes its own elements in flight (only float8 bytes and scales travel), and a block whose
 *  elements sit on several trainers gets its scale from the maximum of their partial maxima,
 *  relayed by the coordinator with the version (no gather). The rollout's pieces of `tensor` must
 *  be in WSYNC_DTYPE_FLOAT8_E4M3 buffers and cut the tensor only at block boundaries (as
 *  block-fp8 engines shard it); its pieces of the scale tensor in float32 (uint8 for e8m0)
 *  buffers. Every rank of a replica that holds `tensor` must declare the same scaling; replicas
 *  may differ. Checked at commit: MISMATCH (on every rank) names the tensor and rank for a piece
 *  that cuts a block, a scale tensor of the wrong shape or dtype, or ranks of one replica that
 *  disagree.
 *  @return SUCCESS; INVALID_ARGUMENT (null, unknown format, block extent < 1, MXFP8 with
 *          block_rows != 1, no scale_tensor, `tensor` already scaled with another scaling);
 *          INVALID_USAGE (trainer context, or after commit). */
wsync_status_t wsync_set_block_scaling(wsync_context_t ctx, const char* tensor,
                                       const wsync_block_scaling_t* scaling);

/** Starts publishing `version` (strictly greater than the last one) and returns at once: after
 *  sending the coordinator one control message (tens of microseconds; a peer that accepts no data
 *  for the context's timeout fails it), in snapshot mode also after copying the buffers into
 *  staging. Versions publish in order.
 *  @param [out] request  completes when the version is ready on every replica that takes it:
 *                        every rank of those replicas can then wsync_acquire it. A replica whose
 *                        readers hold its slot is skipped (within max_staleness) and takes a
 *                        later version; it never fails the job.
 *  @return SUCCESS; INVALID_USAGE (not committed, rollout context, version not increasing);
 *          ABORTED; plus what the snapshot copy can return. The request of a trainer restarted
 *          against a `--trainer-restart` coordinator fails with INVALID_USAGE when its version is
 *          not above the newest one started before the restart (the error names both). */
wsync_status_t wsync_publish(wsync_context_t ctx, uint64_t version, wsync_request_t* request);

/** wsync_publish for device memory produced on `stream`: the version is what `stream` has
 *  produced when this is called (no device-wide sync). In snapshot mode the parameters are copied
 *  on the device into staging, work enqueued on `stream` afterwards waits for that copy, and this
 *  returns without waiting for the device. Host memory: same as wsync_publish.
 *  @return as wsync_publish. */
wsync_status_t wsync_publish_on_stream(wsync_context_t ctx, uint64_t version,
                                       wsync_cuda_stream_t stream, wsync_request_t* request);

/** Non-blocking check. @return SUCCESS (done), IN_PROGRESS, or the publish's error; on an error,
 *  wsync_request_error(request) and wsync_last_error() of the publishing context explain it. */
wsync_status_t wsync_request_test(wsync_request_t request);

/** Waits up to timeout_ms (-1: the context's timeout). @return SUCCESS; TIMEOUT (still running:
 *  wait again; wsync_last_error() says so, the request has no error); or the publish's error
 *  (MISMATCH, REMOTE, SYSTEM, ABORTED ...), which wsync_request_error(request) and
 *  wsync_last_error() of the publishing context then explain. TIMEOUT only ever means "still in
 *  flight": a publish that failed returns its error at once, the same on every later call (a job
 *  that failed because a rank or the coordinator did not answer in time reports REMOTE, its
 *  message saying what timed out). */
wsync_status_t wsync_request_wait(wsync_request_t request, int timeout_ms);

/** Why the publish behind `request` failed; "" while it is in flight, once it succeeded, and for
 *  NULL. Does not wait. The string belongs to the request: it stays valid and unchanged until
 *  wsync_request_free(request) (a failed publish's error never changes). */
const char* wsync_request_error(wsync_request_t request);

/** Frees a request (completed or not; a running publish goes on). NULL is accepted. */
wsync_status_t wsync_request_free(wsync_request_t request);

/** Which replicas a delivered version reached (wsync_request_replicas). */
typedef enum {
  WSYNC_REPLICAS_READY = 0,   /**< took the version: it is ready on every rank of theirs */
  WSYNC_REPLICAS_SKIPPED = 1, /**< busy past the skip grace, or (config.checksums) their bytes
                                   still failed the checksum after the last re-send: they keep
                                   an older version; this one never becomes readable there */
  WSYNC_REPLICAS_LOST = 2,    /**< dropped (a rank died, or sent no heartbeat for
                                   WSYNC_HEARTBEAT_TIMEOUT_MS) or left while the version was in
                                   flight; it never becomes readable there */
  WSYNC_REPLICAS_FORCE_INT32_ = 0x7fffffff
} wsync_replicas_kind_t;

/** The replica ids (config.replica of the rollouts) of one kind for the delivered version behind
 *  `request`, in increasing order: up to `capacity` of them into `replicas` (may be NULL when
 *  `capacity` is 0), and how many there are into `count` (so a first call with capacity 0 sizes
 *  the array). A replica that joined or left between versions is in no list of a version it was
 *  not part of. Does not wait.
 *  @return SUCCESS; IN_PROGRESS (not delivered yet); INVALID_ARGUMENT (null request or count,
 *          bad kind, negative capacity, replicas NULL with capacity > 0); the publish's error
 *          when it failed. */
wsync_status_t wsync_request_replicas(wsync_request_t request, wsync_replicas_kind_t kind,
                                      int capacity, int* replicas, int* count);
/**@}*/

/** @name Rollout: versions and leases */
/**@{*/
/** The newest version ready on this rank's replica.
 *  @return SUCCESS; NOT_READY (none yet); INVALID_USAGE (trainer, or not committed). */
wsync_status_t wsync_newest_version(wsync_context_t ctx, uint64_t* version);

/** Blocks until a version newer than `version` is ready (or timeout_ms passes; -1: the context's
 *  timeout). @param [out] newest  the newest ready version
 *  @return SUCCESS; TIMEOUT (the job runs, no newer version yet, e.g. while trainers restart:
 *          wait again); ABORTED;
 *          INVALID_USAGE; or, once the job failed, its error (REMOTE, MISMATCH, PROTOCOL ...), at
 *          once and on every later call, explained by wsync_last_error(). */
wsync_status_t wsync_wait_version(wsync_context_t ctx, uint64_t version, int timeout_ms,
                                  uint64_t* newest);

/** Takes a lease on `version` (WSYNC_VERSION_NEWEST: the newest ready). WSYNC_VERSION_NEWEST never
 *  waits for a transfer: while version v+1 streams in, it returns v.
 *  Ready contract: once a trainer's request for v completed, every rank of every replica that took
 *  v acquires it (NEWEST returns v or newer). A version ready on the replica is acquirable on
 *  every rank of it: acquire(v) on a rank that is receiving v (its peer rank may have acquired v
 *  already) waits, up to the context's timeout, for this rank's Ready instead of failing.
 *  @return SUCCESS; NOT_READY (no ready version, or `version` is not resident any more, or was
 *          skipped by this replica). */
wsync_status_t wsync_acquire(wsync_context_t ctx, uint64_t version, wsync_lease_t* lease);

/** The version a lease holds. */
wsync_status_t wsync_lease_version(wsync_lease_t lease, uint64_t* version);

/** The address of registered buffer `buffer_index` in the leased version (valid until release).
 *  @return SUCCESS; INVALID_ARGUMENT (index out of range). */
wsync_status_t wsync_lease_buffer(wsync_lease_t lease, int buffer_index, void** data);

/** Releases and frees a lease. NULL is accepted. Releasing a handle a second time is harmless:
 *  it returns WSYNC_ERR_INVALID_USAGE (wsync_last_error(NULL) says so) and changes nothing, as
 *  long as no later wsync_acquire returned the same handle value (use each handle once).
 *  @return SUCCESS; INVALID_USAGE (already released). */
wsync_status_t wsync_lease_release(wsync_lease_t lease);

/** Copy flip, for engines whose CUDA graphs pin parameter addresses: copies `version`
 *  (WSYNC_VERSION_NEWEST: the newest ready) into the live memory given as `data` at registration,
 *  holding a lease while the copies read the slot. Device memory: the copies run on `stream` and
 *  are complete when this returns (bounded by HBM bandwidth; no network wait).
 *  @param [out] flipped  the version now in the live memory
 *  @return SUCCESS; NOT_READY; INVALID_USAGE (trainer, not committed, or no live memory was
 *          registered); SYSTEM; TIMEOUT. */
wsync_status_t wsync_copy_flip(wsync_context_t ctx, uint64_t version, wsync_cuda_stream_t stream,
                               uint64_t* flipped);
/**@}*/

/** @name Defaults and layout for bindings (Python's ctypes, other languages' FFI) */
/**@{*/
/** Fills `*config` with WSYNC_CONFIG_INITIALIZER as this library was compiled (its `size` is this
 *  library's sizeof(wsync_config_t)), so that bindings take every default from the library
 *  instead of repeating them.
 *  @return SUCCESS; INVALID_ARGUMENT (NULL). */
wsync_status_t wsync_config_init(wsync_config_t* config);

/** Fills `*stats` with WSYNC_VERSION_STATS_INITIALIZER as this library was compiled.
 *  @return SUCCESS; INVALID_ARGUMENT (NULL). */
wsync_status_t wsync_version_stats_init(wsync_version_stats_t* stats);

/** The layout of a public struct as this library was compiled: `type` is one of
 *  "wsync_config_t", "wsync_version_stats_t", "wsync_plan_info_t", "wsync_piece_t",
 *  "wsync_block_scaling_t"; `field` is a
 *  field's name, or NULL for the whole struct. Writes the field's offset (0 for the struct) and
 *  size (sizeof the struct for NULL); either pointer may be NULL. Bindings check their mirrors of
 *  the structs against it.
 *  @return SUCCESS; INVALID_ARGUMENT (unknown type or field: nothing is written). */
wsync_status_t wsync_struct_layout(const char* type, const char* field, size_t* offset,
                                   size_t* size);
/**@}*/

#ifdef __cplusplus
}
#endif

#endif /* WSYNC_WSYNC_H_ */
