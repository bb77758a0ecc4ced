// wsync's options, in one place: every option is declared once in WSYNC_OPTION_LIST below (scope,
// field, C++ type, default, environment variable, kind, wsync_config_t field, one-line doc), read
// once by readOptions() and merged with the config by resolve() into the typed struct Options, and
// listed by optionTable() and optionsMarkdownTable() (the README's "Environment variables" table is
// that function's output). docs/options.md explains the rules for users.
//
// Contract: nothing else in wsync calls getenv for a WSYNC_ variable. A context is created from
// one Options, resolved once at creation (the C API: src/capi/capi_config.cc); modules take it,
// or its JobSettings sub-struct, by const reference or as an embedded member, never field by
// field. Enum options stay enums from the parser on.
//
// The precedence rule (the only one; the same from C and from Python, which calls the C API):
//   a set (non-empty) environment variable  >  the wsync_config_t field  >  the option's default.
// A config field "sets" an option unless it holds its unset value (WSYNC_UNSET_INT for ints, the
// _DEFAULT enumerator for enums; wsync.h). resolve() implements the rule.
//
// Value syntax, by type (a variable set to the empty string counts as unset):
//   bool    1, true, yes, on  /  0, false, no, off   (case-insensitive)
//   int     a decimal whole number from 0 to 2147483647
//   string  any text, taken as is
//   enum    one of the names its choices list (case-insensitive)
// Anything else is INVALID_ARGUMENT naming the variable, the value and the accepted values.
#pragma once

#include <bitset>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace wsync {

// ---- The enum options' types and their accepted names (defaults are in WSYNC_OPTION_LIST).

// How rollouts whose slots are in device memory are written.
enum class DeviceTransport : uint8_t {
  kCudaIpc,  // CUDA IPC peer copies, trainers and rollouts on one node
  kStaged,   // any node: UCX writes through pinned host memory
  kUcxCuda,  // any node: UCX device puts when the UCX loaded handles CUDA, else as kStaged
};

// How rollout slots in device memory are shared with trainers of the node (CUDA IPC).
enum class CudaIpcExport : uint8_t {
  kVmm,     // CUDA VMM allocations shared as file descriptors over a unix socket
  kLegacy,  // cudaMalloc memory shared with cudaIpcGetMemHandle
};

// How host copies into mapped peer memory are done (src/common/fast_copy.h).
enum class HostCopy : uint8_t {
  kAuto,    // the widest streaming stores the CPU has
  kMemcpy,  // std::memcpy
  kAvx2,    // 32-byte streaming stores (or the widest the CPU has)
  kAvx512,  // 64-byte streaming stores (or the widest the CPU has)
};

// One accepted name of an enum option's value.
template <typename E>
struct OptionChoice {
  const char* name;
  E value;
};

inline constexpr OptionChoice<DeviceTransport> kDeviceTransportChoices[] = {
    {"cuda_ipc", DeviceTransport::kCudaIpc},
    {"staged", DeviceTransport::kStaged},
    {"ucx_cuda", DeviceTransport::kUcxCuda},
};
inline constexpr OptionChoice<CudaIpcExport> kCudaIpcExportChoices[] = {
    {"vmm", CudaIpcExport::kVmm},
    {"legacy", CudaIpcExport::kLegacy},
};
inline constexpr OptionChoice<HostCopy> kHostCopyChoices[] = {
    {"auto", HostCopy::kAuto},
    {"memcpy", HostCopy::kMemcpy},
    {"avx2", HostCopy::kAvx2},
    {"avx512", HostCopy::kAvx512},
};

// The choices of each enum type, found by overload (the argument only selects the type).
inline std::span<const OptionChoice<DeviceTransport>> optionChoices(DeviceTransport) {
  return kDeviceTransportChoices;
}
inline std::span<const OptionChoice<CudaIpcExport>> optionChoices(CudaIpcExport) {
  return kCudaIpcExportChoices;
}
inline std::span<const OptionChoice<HostCopy>> optionChoices(HostCopy) {
  return kHostCopyChoices;
}

// What an option is for.
enum class OptionKind : uint8_t {
  kSetting,     // a setting of normal operation
  kSecret,      // a setting whose value is never printed (describeOptions shows "(set)")
  kDebug,       // a debug switch: measurements and tests, never needed for correct operation; its
                // variable starts with WSYNC_DEBUG_
  kPythonSide,  // read by the Python package (python/wsync), not by the library: listed so that
                // the README documents it and `wsync-options` does not call it misspelled
};

// ---- The options, in four lists (rank settings, job-wide, Python-side, debug switches) and three
// scopes; the scope (a row's first column) decides where its field lives in Options:
//   rank    this rank's own setting: a field of Options itself
//   job     a job-wide setting, decided by the coordinator from its own resolved options (trainer
//           rank 0's under mpirun, else wsync-coordinator's): a field of Options::job
//           (JobSettings), which travels as one struct to the coordinator
//   python  read by the Python package only: a field of Options::python, unused by C++
// Each row: X(scope, field, C++ type, default, "VARIABLE", OptionKind, "config field", "doc").
// "config field" names the wsync_config_t field that sets the option too ("" when none; the C API
// maps it in src/capi/capi_config.cc); `doc` is the README's "effect" column (one line of
// markdown).
// clang-format off
#define WSYNC_RANK_OPTION_LIST(X)                                                                  \
  X(rank, device_transport, ::wsync::DeviceTransport, ::wsync::DeviceTransport::kCudaIpc,          \
    "WSYNC_DEVICE_TRANSPORT", kSetting, "device_transport",                                        \
    "device-memory rollouts: `cuda_ipc` (one node), `staged` (any node, pinned host staging), "    \
    "`ucx_cuda` (any node, UCX device puts when the UCX loaded handles CUDA); the same on every "  \
    "rank")                                                                                        \
  X(rank, cuda_ipc_export, ::wsync::CudaIpcExport, ::wsync::CudaIpcExport::kVmm,                   \
    "WSYNC_CUDA_IPC_EXPORT", kSetting, "cuda_ipc_export",                                          \
    "how rollout slots in device memory are shared within a node: `vmm`, CUDA VMM allocations "    \
    "shared as file descriptors over a unix socket (where the driver supports it; copies into "    \
    "them run at the local device-copy rate), or `legacy`, `cudaMalloc` memory shared with "       \
    "`cudaIpcGetMemHandle` (copies ~25% slower on the H200)")                                      \
  X(rank, coordinator_host, std::string, "", "WSYNC_COORDINATOR_HOST", kSetting, "",               \
    "the address rank 0 binds and advertises for its coordinator (multi-node jobs; unset: every "  \
    "interface, advertised as this host's name)")                                                  \
  X(rank, secret, std::string, "", "WSYNC_SECRET", kSecret, "",                                    \
    "the control-plane secret of `wsync-coordinator` (or `--secret`); the Python package's "       \
    "`Bootstrap.from_torch_distributed` reads it too")                                             \
  X(rank, log, bool, false, "WSYNC_LOG", kSetting, "",                                             \
    "the coordinator hosted by trainer rank 0 logs its decisions (broadcast backend, plan) on "    \
    "stderr")                                                                                      \
  X(rank, host_copy, ::wsync::HostCopy, ::wsync::HostCopy::kAuto, "WSYNC_HOST_COPY", kSetting, "", \
    "host copies into mapped peer memory: `memcpy`, `avx2` or `avx512` streaming stores (a kind "  \
    "the CPU lacks falls back to the widest it has), or `auto`, the widest the CPU has")           \
  X(rank, spin_wait_us, int, 0, "WSYNC_SPIN_WAIT_US", kSetting, "",                                \
    "busy polling: for this many microseconds after each control message while a version moves, " \
    "the threads that wait for the next one (the coordinator's two, each trainer's publisher, "    \
    "each rollout's receiver) poll without sleeping instead of waiting for a wake-up; for cores "   \
    "that nothing else needs (on a shared or oversubscribed machine it adds ms stalls: "           \
    "benchmarks/README.md, session 7); `0`: never; each process's own")
#define WSYNC_JOB_OPTION_LIST(X)                                                                   \
  X(job, heartbeat_timeout_ms, int, 10000, "WSYNC_HEARTBEAT_TIMEOUT_MS", kSetting, "",             \
    "job-wide: the coordinator drops a rollout rank it has not heard from (heartbeats every "      \
    "quarter of this) for this many ms, as if it had died: its replica leaves the job, the "       \
    "trainers go on; `0`: never")                                                                  \
  X(job, checksums, bool, false, "WSYNC_CHECKSUMS", kSetting, "checksums",                         \
    "job-wide: versions are checksummed: trainers send a checksum of what they write to each "     \
    "rollout rank, each rollout rank verifies its bytes before the version becomes readable, and " \
    "a replica whose bytes differ gets the version again (see `WSYNC_CHECKSUM_RETRIES`) "          \
    "(docs/checksums.md)")                                                                         \
  X(job, checksum_retries, int, 3, "WSYNC_CHECKSUM_RETRIES", kSetting, "checksum_retries",         \
    "job-wide: with `WSYNC_CHECKSUMS`, how many times a version whose checksum failed on a "       \
    "replica is re-sent to it; after that the replica skips the version (it keeps its previous "   \
    "one)")                                                                                        \
  X(job, delta, bool, false, "WSYNC_DELTA", kSetting, "delta",                                     \
    "job-wide: delta versions: over one-sided writes that cross a NIC (rollouts on UCX or the "    \
    "staged device path; not CUDA IPC) a trainer sends only the elements that changed since the "  \
    "version the replica holds, "                                                                  \
    "and the replica rebuilds the version from its newest one; implies `WSYNC_CHECKSUMS` "         \
    "(docs/delta.md)")                                                                             \
  X(job, delta_max_share, double, 0.25, "WSYNC_DELTA_MAX_SHARE", kSetting, "delta_max_share",      \
    "job-wide: with `WSYNC_DELTA`, a write whose patch is larger than this share of its dense "    \
    "bytes goes dense; it also sizes each rollout rank's landing area for patches (this share of " \
    "its slot bytes); a number in (0, 1]")

#define WSYNC_PYTHON_OPTION_LIST(X)                                                                \
  X(python, library, std::string, "", "WSYNC_LIBRARY", kPythonSide, "",                            \
    "the Python package: the `libwsync.so` it loads (else the package's own, then a CMake build "  \
    "of the repository, then the loader's search path)")                                           \
  X(python, coordinator, std::string, "", "WSYNC_COORDINATOR", kPythonSide, "",                    \
    "the Python package: the `wsync-coordinator` program it starts (else the package's, the "      \
    "CMake build's, then `PATH`)")                                                                 \
  X(python, coordinator_address, std::string, "", "WSYNC_COORDINATOR_ADDRESS", kPythonSide, "",    \
    "the Python package: `host:port` of the coordinator for `Bootstrap.from_torch_distributed` "   \
    "when no argument gives it")                                                                   \
  X(python, num_rollouts, std::string, "", "WSYNC_NUM_ROLLOUTS", kPythonSide, "",                  \
    "the Python package: the number of fixed rollout ranks (a whole number; 0: an elastic job) "  \
    "for `Bootstrap.from_torch_distributed` when no argument gives it")

// Debug switches (kind kDebug, scope rank: fields of Options itself): measurements, A/B runs and
// tests only; never needed for correct operation, some slow down or corrupt transfers on purpose.
#define WSYNC_DEBUG_OPTION_LIST(X)                                                                 \
  X(rank, debug_timing, bool, false, "WSYNC_DEBUG_TIMING", kDebug, "",                             \
    "each trainer prints per-version phase times (publish -> go, transfer, sent -> delivered) "    \
    "and its batched copy kernel's device time")                                                   \
  X(rank, debug_no_early_landing, bool, false, "WSYNC_DEBUG_NO_EARLY_LANDING", kDebug, "",         \
    "staged device writers do not report their writes, so rollouts move the landed bytes to the "  \
    "device only once the version arrived (A/B runs of early landing)")                            \
  X(rank, debug_no_copy_batch, bool, false, "WSYNC_DEBUG_NO_COPY_BATCH", kDebug, "",               \
    "device trainers copy op by op (`cudaMemcpy2DAsync`) instead of one batched kernel (A/B "      \
    "runs)")                                                                                       \
  X(rank, debug_no_in_place_quant, bool, false, "WSYNC_DEBUG_NO_IN_PLACE_QUANT", kDebug, "",       \
    "device trainers copy block-quantized values into rollout slots instead of quantizing "       \
    "straight into slots mapped through CUDA IPC (A/B runs of in-place quantization, "            \
    "`docs/block_fp8.md`)")                                                                        \
  X(rank, debug_send_delay_ms, int, 0, "WSYNC_DEBUG_SEND_DELAY_MS", kDebug, "",                    \
    "milliseconds trainers sleep before sending each version (tests of versioning)")               \
  X(rank, debug_cold_fill_delay_ms, int, 0, "WSYNC_DEBUG_COLD_FILL_DELAY_MS", kDebug, "",          \
    "milliseconds a rollout serving a peer cold start holds its lease before it writes (tests of " \
    "a source lost mid-fill)")                                                                    \
  X(rank, debug_corrupt_every, int, 0, "WSYNC_DEBUG_CORRUPT_EVERY", kDebug, "",                    \
    "trainer 0 flips one byte of one of its writes after it landed, in the first send of every "   \
    "N-th version (tests of `WSYNC_CHECKSUMS`, which must catch and re-send it; `0`: never)")

// Every option, in table order: the rank settings, the job-wide ones, the Python package's, and
// the debug switches.
#define WSYNC_OPTION_LIST(X)  \
  WSYNC_RANK_OPTION_LIST(X)   \
  WSYNC_JOB_OPTION_LIST(X)    \
  WSYNC_PYTHON_OPTION_LIST(X) \
  WSYNC_DEBUG_OPTION_LIST(X)
// clang-format on

// `options`' field of a row of scope `scope`: WSYNC_OPTION_REF(o, job, checksums) is
// o.job.checksums.
#define WSYNC_OPTION_SCOPE_rank(o) (o)
#define WSYNC_OPTION_SCOPE_job(o) (o).job
#define WSYNC_OPTION_SCOPE_python(o) (o).python
#define WSYNC_OPTION_REF(o, scope, field) WSYNC_OPTION_SCOPE_##scope(o).field

// One id per option, in declaration order.
enum class OptionId : uint8_t {
#define WSYNC_OPTION_ID_(scope, field, type, default_value, env, kind, config, doc) field,
  WSYNC_OPTION_LIST(WSYNC_OPTION_ID_)
#undef WSYNC_OPTION_ID_
};
inline constexpr size_t kNumOptions = 0
// NOLINTNEXTLINE(bugprone-macro-parentheses): a `+1` per option, summed after the 0 above
#define WSYNC_OPTION_COUNT_(scope, field, type, default_value, env, kind, config, doc) +1
    WSYNC_OPTION_LIST(WSYNC_OPTION_COUNT_)
#undef WSYNC_OPTION_COUNT_
    ;

// NOLINTBEGIN(bugprone-macro-parentheses): `type field = default_value;` declares a member
#define WSYNC_OPTION_FIELD_(scope, field, type, default_value, env, kind, config, doc) \
  type field = default_value;

// The job-wide settings (WSYNC_JOB_OPTION_LIST: heartbeat_timeout_ms, checksums,
// checksum_retries, delta, delta_max_share). The coordinator takes them from its own resolved
// Options (trainer rank 0's under mpirun, wsync-coordinator's own otherwise); other ranks' values
// are not used, and checkJobSettingsAgree() tells when they differ. Passed down as this one struct
// (ContextOptions::settings.job, CoordinatorOptions::job, SequencerOptions::job).
struct JobSettings {
  WSYNC_JOB_OPTION_LIST(WSYNC_OPTION_FIELD_)

  bool operator==(const JobSettings&) const = default;
  // heartbeat_timeout_ms as a duration (0: heartbeats are not watched).
  std::chrono::milliseconds heartbeatTimeout() const {
    return std::chrono::milliseconds(heartbeat_timeout_ms);
  }
};

// The Python package's variables (WSYNC_PYTHON_OPTION_LIST): listed and read, never used by C++.
struct PythonSideOptions {
  WSYNC_PYTHON_OPTION_LIST(WSYNC_OPTION_FIELD_)
};

// Every option's value, typed: a default-constructed Options holds the defaults. One field per
// WSYNC_OPTION_LIST row, named and typed there; rank rows are fields of Options itself
// (device_transport, cuda_ipc_export, coordinator_host, secret, log, host_copy, spin_wait_us and
// the debug_ switches), job rows are fields of `job`, Python rows of `python`. Enum options stay
// enums: nothing compares their names after parsing.
struct Options {
  WSYNC_RANK_OPTION_LIST(WSYNC_OPTION_FIELD_)
  WSYNC_DEBUG_OPTION_LIST(WSYNC_OPTION_FIELD_)
  JobSettings job;
  PythonSideOptions python;

  // Which options came from a set (non-empty) environment variable; indexed by OptionId.
  std::bitset<kNumOptions> from_environment;
  bool fromEnvironment(OptionId id) const { return from_environment.test(static_cast<size_t>(id)); }
  // Which options a wsync_config_t field set (src/capi/capi_config.cc); resolve() keeps them.
  std::bitset<kNumOptions> from_config;
  // Set explicitly on this rank: by its environment or its config (not just the default).
  bool explicitlySet(OptionId id) const {
    return fromEnvironment(id) || from_config.test(static_cast<size_t>(id));
  }
};
#undef WSYNC_OPTION_FIELD_
// NOLINTEND(bugprone-macro-parentheses)

// The process environment (std::getenv); readOptions()'s default lookup.
const char* processEnvironment(const char* name);

// Reads every option's variable once through `lookup` (returns the value or nullptr when unset;
// default: the process environment) into an Options; unset and empty variables keep the default.
// INVALID_ARGUMENT naming every variable whose value is bad, with the value and the accepted
// values. Not thread-safe against setenv() in the same process (getenv is not): call it at startup
// or at context creation, not on a hot path.
Result<Options> readOptions(
    const std::function<const char*(const char*)>& lookup = &processEnvironment);

// Sets the option read from variable `env` (e.g. "WSYNC_DEVICE_TRANSPORT") to `text`, parsed with
// the same rules as readOptions() (for config values given as text). Does not mark it as from the
// environment. INVALID_ARGUMENT for an unknown variable or a bad value.
Status setOption(Options& options, std::string_view env, std::string_view text);

// The precedence rule (see the top of this file): for every option, `environment`'s value when its
// variable was set (fromEnvironment), else `configured`'s. `configured` starts from defaults and
// carries the values the application's config set, so: environment > config > default. The result
// keeps `environment`'s from_environment bits. The one place a context's options are decided:
//
//   Options configured;  // defaults
//   if (cfg.checksums != WSYNC_UNSET_INT) configured.job.checksums = cfg.checksums == 1;
//   WSYNC_ASSIGN_OR_RETURN(Options environment, readOptions());
//   const Options effective = resolve(configured, environment);
Options resolve(const Options& configured, const Options& environment);

// The cross-rank agreement of job-wide settings: OK when every entry (a rank's name, e.g.
// "trainer 1", and the JobSettings it resolved) holds the same values; else INVALID_ARGUMENT naming
// each differing setting's variable, the first entry's value and every rank whose value differs,
// with its value: "... WSYNC_CHECKSUMS is 1 on trainer 0 but 0 on rollout 2, 0 on rollout 3".
// Pure; an empty list agrees. Compare ranks' own resolved values with each other (a standalone
// wsync-coordinator's flags may differ from every rank's environment without anything being wrong).
Status checkJobSettingsAgree(std::span<const std::pair<std::string, JobSettings>> ranks);

// The job-wide settings `options` set explicitly (explicitlySet): each one's variable and value,
// spelled as the variable takes it ({"WSYNC_CHECKSUMS", "1"}). A rank sends them to the
// coordinator, which checks them against its own (withJobSettings, checkJobSettingsAgree).
using NamedSettingValues = std::vector<std::pair<std::string, std::string>>;
NamedSettingValues explicitJobSettings(const Options& options);
// `decided` with the values of `set` (variable, value) applied: a rank's view of the job-wide
// settings, where what it did not set is the coordinator's. INVALID_ARGUMENT for a variable that
// is not a job-wide option or a bad value.
Result<JobSettings> withJobSettings(const JobSettings& decided, const NamedSettingValues& set);

// The name of an enum option's value, as the variable spells it ("cuda_ipc").
const char* optionValueName(DeviceTransport value);
const char* optionValueName(CudaIpcExport value);
const char* optionValueName(HostCopy value);

// One option as the tables show it.
struct OptionInfo {
  OptionId id;
  const char* env;            // "WSYNC_DEVICE_TRANSPORT"
  const char* field;          // the Options field, "device_transport"
  std::string type;           // "bool", "int", "string", or "`cuda_ipc`, `staged` or `ucx_cuda`"
  std::string default_value;  // "`cuda_ipc`", "`0`", or "unset" (empty string)
  const char* config_field;   // the wsync_config_t field that sets it too; "" when none
  const char* doc;            // one line of markdown
  OptionKind kind;
  bool debug;  // kind == OptionKind::kDebug
};

// Every option, in declaration order.
const std::vector<OptionInfo>& optionTable();

// The README's environment table, one line per row, each ending in '\n':
// | variable | type | default | config field | effect |, the settings first, then the Python
// package's variables (marked "(python)"), then the debug switches (marked "(debug)").
std::string optionsMarkdownTable();

// `options`' values, one "VARIABLE=value" line per option (in table order), "  (environment)"
// appended to those read from the environment; a secret's value shows as "(set)".
std::string describeOptions(const Options& options);

// The WSYNC_ variables in `environ`-style `envp` (NAME=value entries, nullptr-terminated) that no
// option reads (misspellings, removed options), in order. For warnings; not an error.
std::vector<std::string> unknownOptionVariables(const char* const* envp);

}  // namespace wsync
