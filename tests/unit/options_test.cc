// Options: every variable read once, defaults, every type's syntax, bad values named with the
// accepted values, the environment-over-config rule, the table's consistency, and the README's
// "Environment variables" table equal to optionsMarkdownTable().
#include "options/options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace wsync {
namespace {

// A fake environment: the variables in `values`, nothing else; counts lookups per name.
struct FakeEnvironment {
  std::map<std::string, std::string> values;
  std::map<std::string, int> lookups;

  std::function<const char*(const char*)> lookup() {
    return [this](const char* name) -> const char* {
      ++lookups[name];
      const auto it = values.find(name);
      return it == values.end() ? nullptr : it->second.c_str();
    };
  }
};

Result<Options> readFrom(std::map<std::string, std::string> values) {
  FakeEnvironment env{std::move(values), {}};
  return readOptions(env.lookup());
}

TEST(Options, ReadsEveryVariableOnceAndKeepsDefaultsWhenUnset) {
  FakeEnvironment env;
  const Result<Options> options = readOptions(env.lookup());
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  ASSERT_EQ(env.lookups.size(), kNumOptions);
  for (const OptionInfo& info : optionTable())
    EXPECT_EQ(env.lookups[info.env], 1) << info.env;

  EXPECT_EQ(options->device_transport, DeviceTransport::kCudaIpc);
  EXPECT_EQ(options->cuda_ipc_export, CudaIpcExport::kVmm);
  EXPECT_EQ(options->coordinator_host, "");
  EXPECT_EQ(options->secret, "");
  EXPECT_FALSE(options->log);
  EXPECT_EQ(options->job.heartbeat_timeout_ms, 10000);
  EXPECT_EQ(options->host_copy, HostCopy::kAuto);
  EXPECT_FALSE(options->debug_timing);
  EXPECT_FALSE(options->debug_no_early_landing);
  EXPECT_FALSE(options->debug_no_copy_batch);
  EXPECT_EQ(options->debug_send_delay_ms, 0);
  EXPECT_EQ(options->spin_wait_us, 0);  // busy polling is opt-in
  EXPECT_TRUE(options->from_environment.none());
}

TEST(Options, ParsesEveryOptionFromTheEnvironment) {
  const Result<Options> options = readFrom({
      {"WSYNC_DEVICE_TRANSPORT", "ucx_cuda"},
      {"WSYNC_CUDA_IPC_EXPORT", "LEGACY"},  // enum names are case-insensitive
      {"WSYNC_COORDINATOR_HOST", "10.0.0.7"},
      {"WSYNC_SECRET", "s3 cr=t"},
      {"WSYNC_LOG", "1"},
      {"WSYNC_HEARTBEAT_TIMEOUT_MS", "1500"},
      {"WSYNC_CHECKSUMS", "yes"},
      {"WSYNC_CHECKSUM_RETRIES", "5"},
      {"WSYNC_HOST_COPY", "avx2"},
      {"WSYNC_SPIN_WAIT_US", "500"},
      {"WSYNC_DEBUG_TIMING", "TRUE"},
      {"WSYNC_DEBUG_NO_EARLY_LANDING", "on"},
      {"WSYNC_DEBUG_NO_COPY_BATCH", "yes"},
      {"WSYNC_DEBUG_NO_IN_PLACE_QUANT", "1"},
      {"WSYNC_DEBUG_SEND_DELAY_MS", "250"},
      {"WSYNC_DEBUG_COLD_FILL_DELAY_MS", "40"},
      {"WSYNC_DEBUG_CORRUPT_EVERY", "7"},
      {"WSYNC_DELTA", "1"},
      {"WSYNC_DELTA_MAX_SHARE", "0.5"},
      {"WSYNC_LIBRARY", "/opt/lib/libwsync.so"},
      {"WSYNC_COORDINATOR", "/opt/bin/wsync-coordinator"},
      {"WSYNC_COORDINATOR_ADDRESS", "node1:7000"},
      {"WSYNC_NUM_ROLLOUTS", "8"},
  });
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->device_transport, DeviceTransport::kUcxCuda);
  EXPECT_EQ(options->cuda_ipc_export, CudaIpcExport::kLegacy);
  EXPECT_EQ(options->coordinator_host, "10.0.0.7");
  EXPECT_EQ(options->secret, "s3 cr=t");
  EXPECT_TRUE(options->log);
  EXPECT_EQ(options->job.heartbeat_timeout_ms, 1500);
  EXPECT_EQ(options->host_copy, HostCopy::kAvx2);
  EXPECT_EQ(options->spin_wait_us, 500);
  EXPECT_TRUE(options->debug_timing);
  EXPECT_TRUE(options->debug_no_early_landing);
  EXPECT_TRUE(options->debug_no_copy_batch);
  EXPECT_TRUE(options->debug_no_in_place_quant);
  EXPECT_EQ(options->debug_send_delay_ms, 250);
  EXPECT_EQ(options->debug_cold_fill_delay_ms, 40);
  EXPECT_TRUE(options->job.checksums);
  EXPECT_EQ(options->job.checksum_retries, 5);
  EXPECT_EQ(options->debug_corrupt_every, 7);
  EXPECT_TRUE(options->job.delta);
  EXPECT_EQ(options->job.delta_max_share, 0.5);
  EXPECT_EQ(options->python.library, "/opt/lib/libwsync.so");
  EXPECT_EQ(options->python.coordinator, "/opt/bin/wsync-coordinator");
  EXPECT_EQ(options->python.coordinator_address, "node1:7000");
  EXPECT_EQ(options->python.num_rollouts, "8");
  EXPECT_TRUE(options->from_environment.all());
}

TEST(Options, BoolsAcceptBothSpellingsAndEmptyMeansUnset) {
  for (const char* on : {"1", "true", "True", "yes", "ON"}) {
    const Result<Options> options = readFrom({{"WSYNC_LOG", on}});
    ASSERT_TRUE(options.isOk()) << on;
    EXPECT_TRUE(options->log) << on;
  }
  for (const char* off : {"0", "false", "no", "OFF"}) {
    const Result<Options> options = readFrom({{"WSYNC_LOG", off}});
    ASSERT_TRUE(options.isOk()) << off;
    EXPECT_FALSE(options->log) << off;
    EXPECT_TRUE(options->fromEnvironment(OptionId::log)) << off;  // set, to false
  }
  const Result<Options> empty = readFrom({{"WSYNC_LOG", ""}, {"WSYNC_DEVICE_TRANSPORT", ""}});
  ASSERT_TRUE(empty.isOk());
  EXPECT_FALSE(empty->fromEnvironment(OptionId::log));
  EXPECT_FALSE(empty->fromEnvironment(OptionId::device_transport));
  EXPECT_EQ(empty->device_transport, DeviceTransport::kCudaIpc);
}

// The error names the variable, the value and the accepted values.
void expectRejected(const std::string& env, const std::string& value, const std::string& accepted) {
  const Result<Options> options = readFrom({{env, value}});
  ASSERT_FALSE(options.isOk()) << env << "=" << value;
  EXPECT_EQ(options.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(options.status().message(), env + "='" + value + "': expected " + accepted);
}

TEST(Options, BadValuesAreNamedWithTheAcceptedValues) {
  expectRejected("WSYNC_DEVICE_TRANSPORT", "ipc", "cuda_ipc, staged or ucx_cuda");
  expectRejected("WSYNC_CUDA_IPC_EXPORT", "vmm2", "vmm or legacy");
  expectRejected("WSYNC_HOST_COPY", "sse", "auto, memcpy, avx2 or avx512");
  expectRejected("WSYNC_LOG", "verbose", "1, true, yes, on, 0, false, no or off");
  const std::string whole = "a whole number from 0 to 2147483647";
  expectRejected("WSYNC_DEBUG_SEND_DELAY_MS", "-5", whole);
  expectRejected("WSYNC_DEBUG_SEND_DELAY_MS", "12ms", whole);
  expectRejected("WSYNC_DEBUG_SEND_DELAY_MS", " 12", whole);
  expectRejected("WSYNC_DEBUG_SEND_DELAY_MS", "99999999999", whole);
}

TEST(Options, EveryBadValueIsNamedAtOnce) {
  const Result<Options> options =
      readFrom({{"WSYNC_DEVICE_TRANSPORT", "nvlink"}, {"WSYNC_DEBUG_TIMING", "2"}});
  ASSERT_FALSE(options.isOk());
  EXPECT_EQ(options.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  const std::string& message = options.status().message();
  EXPECT_NE(message.find("WSYNC_DEVICE_TRANSPORT='nvlink'"), std::string::npos) << message;
  EXPECT_NE(message.find("WSYNC_DEBUG_TIMING='2'"), std::string::npos) << message;
}

TEST(Options, TheProcessEnvironmentIsTheDefaultLookup) {
  ASSERT_EQ(setenv("WSYNC_HOST_COPY", "memcpy", 1), 0);
  const Result<Options> options = readOptions();
  unsetenv("WSYNC_HOST_COPY");
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->host_copy, HostCopy::kMemcpy);
  EXPECT_TRUE(options->fromEnvironment(OptionId::host_copy));
}

TEST(Options, TheEnvironmentOverridesTheConfig) {
  Options configured;
  configured.device_transport = DeviceTransport::kStaged;
  configured.cuda_ipc_export = CudaIpcExport::kLegacy;

  // Nothing set: the config's values.
  const Result<Options> unset = readFrom({});
  ASSERT_TRUE(unset.isOk());
  Options effective = resolve(configured, unset.value());
  EXPECT_EQ(effective.device_transport, DeviceTransport::kStaged);
  EXPECT_EQ(effective.cuda_ipc_export, CudaIpcExport::kLegacy);
  EXPECT_EQ(effective.host_copy, HostCopy::kAuto);  // neither set: the default

  // Set, even to the default value: the environment's.
  const Result<Options> set =
      readFrom({{"WSYNC_DEVICE_TRANSPORT", "cuda_ipc"}, {"WSYNC_HOST_COPY", "avx512"}});
  ASSERT_TRUE(set.isOk());
  effective = resolve(configured, set.value());
  EXPECT_EQ(effective.device_transport, DeviceTransport::kCudaIpc);
  EXPECT_EQ(effective.cuda_ipc_export, CudaIpcExport::kLegacy);  // not set: the config's
  EXPECT_EQ(effective.host_copy, HostCopy::kAvx512);
  EXPECT_TRUE(effective.fromEnvironment(OptionId::device_transport));
  EXPECT_FALSE(effective.fromEnvironment(OptionId::cuda_ipc_export));
}

TEST(Options, SetOptionParsesConfigTextWithTheSameRules) {
  Options options;
  ASSERT_TRUE(setOption(options, "WSYNC_DEVICE_TRANSPORT", "staged").isOk());
  EXPECT_EQ(options.device_transport, DeviceTransport::kStaged);
  EXPECT_FALSE(options.fromEnvironment(OptionId::device_transport));

  const Status bad = setOption(options, "WSYNC_CUDA_IPC_EXPORT", "dmabuf");
  EXPECT_EQ(bad.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad.message(), "WSYNC_CUDA_IPC_EXPORT='dmabuf': expected vmm or legacy");
  EXPECT_EQ(options.cuda_ipc_export, CudaIpcExport::kVmm);  // unchanged

  const Status unknown = setOption(options, "WSYNC_TRANSPORT", "staged");
  EXPECT_EQ(unknown.code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(unknown.message().find("'WSYNC_TRANSPORT'"), std::string::npos);
}

TEST(Options, TheTableIsConsistent) {
  const std::vector<OptionInfo>& table = optionTable();
  ASSERT_EQ(table.size(), kNumOptions);
  std::set<std::string> envs;
  std::set<std::string> fields;
  for (size_t i = 0; i < table.size(); ++i) {
    const OptionInfo& info = table[i];
    const std::string env = info.env;
    EXPECT_EQ(static_cast<size_t>(info.id), i) << env;
    EXPECT_TRUE(envs.insert(env).second) << "declared twice: " << env;
    EXPECT_TRUE(fields.insert(info.field).second) << info.field;
    EXPECT_EQ(env.rfind("WSYNC_", 0), 0u) << env;
    EXPECT_EQ(info.debug, env.rfind("WSYNC_DEBUG_", 0) == 0) << env;
    EXPECT_EQ(info.debug, info.kind == OptionKind::kDebug) << env;
    const std::string doc = info.doc;
    EXPECT_FALSE(doc.empty()) << env;
    EXPECT_EQ(doc.find_first_of("|\n"), std::string::npos) << env << ": breaks a markdown row";
  }
  EXPECT_EQ(table[static_cast<size_t>(OptionId::device_transport)].type,
            "`cuda_ipc`, `staged` or `ucx_cuda`");
  EXPECT_EQ(table[static_cast<size_t>(OptionId::device_transport)].default_value, "`cuda_ipc`");
  EXPECT_EQ(table[static_cast<size_t>(OptionId::secret)].default_value, "unset");
  EXPECT_EQ(table[static_cast<size_t>(OptionId::debug_timing)].default_value, "`0`");
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

TEST(Options, TheMarkdownTableListsPythonSideThenDebugSwitchesLast) {
  const std::vector<std::string> rows = lines(optionsMarkdownTable());
  ASSERT_EQ(rows.size(), kNumOptions + 2);
  EXPECT_EQ(rows[0], "| variable | type | default | config field | effect |");
  EXPECT_EQ(rows[1], "| --- | --- | --- | --- | --- |");
  EXPECT_EQ(rows[2].rfind("| `WSYNC_DEVICE_TRANSPORT` | `cuda_ipc`, `staged` or `ucx_cuda` | "
                          "`cuda_ipc` | `device_transport` | device-memory rollouts: ",
                          0),
            0u)
      << rows[2];
  // Sections: settings (0), the Python package's (1), debug switches (2), in that order.
  int section = 0;
  bool seen_python = false;
  for (size_t i = 2; i < rows.size(); ++i) {
    const bool debug = rows[i].find(" (debug) | ") != std::string::npos;
    const bool python = rows[i].find(" (python) | ") != std::string::npos;
    const int row_section = debug ? 2 : python ? 1 : 0;
    EXPECT_GE(row_section, section) << "out of section order: " << rows[i];
    section = std::max(section, row_section);
    EXPECT_EQ(debug, rows[i].rfind("| `WSYNC_DEBUG_", 0) == 0) << rows[i];
    seen_python = seen_python || python;
  }
  EXPECT_EQ(section, 2);
  EXPECT_TRUE(seen_python);
}

TEST(Options, JobWideSettingsLiveInTheirSubStruct) {
  const Result<Options> options = readFrom({{"WSYNC_CHECKSUMS", "1"},
                                            {"WSYNC_CHECKSUM_RETRIES", "7"},
                                            {"WSYNC_HEARTBEAT_TIMEOUT_MS", "0"}});
  ASSERT_TRUE(options.isOk());
  JobSettings expected;
  expected.checksums = true;
  expected.checksum_retries = 7;
  expected.heartbeat_timeout_ms = 0;
  EXPECT_EQ(options->job, expected);
  EXPECT_EQ(options->job.heartbeatTimeout(), std::chrono::milliseconds(0));
  EXPECT_EQ(JobSettings{}.heartbeatTimeout(), std::chrono::milliseconds(10000));
}

TEST(Options, PythonSideVariablesAreListedReadAndNeverRejected) {
  const Result<Options> options =
      readFrom({{"WSYNC_LIBRARY", "/opt/libwsync.so"}, {"WSYNC_NUM_ROLLOUTS", "four"}});
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->python.library, "/opt/libwsync.so");
  EXPECT_EQ(options->python.num_rollouts, "four");
  for (const char* env :
       {"WSYNC_LIBRARY", "WSYNC_COORDINATOR", "WSYNC_COORDINATOR_ADDRESS", "WSYNC_NUM_ROLLOUTS"}) {
    bool listed = false;
    for (const OptionInfo& info : optionTable())
      listed = listed || (info.env == std::string(env) && info.kind == OptionKind::kPythonSide);
    EXPECT_TRUE(listed) << env;
  }
  const char* const envp[] = {"WSYNC_LIBRARY=/x", "WSYNC_COORDINATOR=/y",
                              "WSYNC_COORDINATOR_ADDRESS=h:1", "WSYNC_NUM_ROLLOUTS=2", nullptr};
  EXPECT_TRUE(unknownOptionVariables(envp).empty());
}

TEST(Options, JobSettingsAgreeOrTheDifferenceIsNamed) {
  JobSettings on;
  on.checksums = true;
  const JobSettings off;
  using Ranks = std::vector<std::pair<std::string, JobSettings>>;
  EXPECT_TRUE(checkJobSettingsAgree(Ranks{}).isOk());
  EXPECT_TRUE(checkJobSettingsAgree(Ranks{{"trainer 0", on}, {"rollout 0", on}}).isOk());

  JobSettings fewer = on;
  fewer.checksum_retries = 1;
  const Status differ = checkJobSettingsAgree(
      Ranks{{"trainer 0", on}, {"trainer 1", on}, {"rollout 2", off}, {"rollout 3", fewer}});
  EXPECT_EQ(differ.code(), WSYNC_ERR_INVALID_ARGUMENT);
  const std::string& message = differ.message();
  EXPECT_NE(message.find("WSYNC_CHECKSUMS is 1 on trainer 0 but 0 on rollout 2"), std::string::npos)
      << message;
  EXPECT_NE(message.find("WSYNC_CHECKSUM_RETRIES is 3 on trainer 0 but 1 on rollout 3"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("trainer 1"), std::string::npos) << message;
  EXPECT_EQ(message.find("HEARTBEAT"), std::string::npos) << message;
}

// The table under "## Environment variables" in README.md: its consecutive '|' lines.
std::string readmeOptionsTable(const std::string& path) {
  std::ifstream in(path);
  std::string table;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) {
      if (in_section) break;
      in_section = line == "## Environment variables";
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("|", 0) == 0) {
      table += line + "\n";
    } else if (!table.empty()) {
      break;
    }
  }
  return table;
}

TEST(Options, TheReadmeTableIsTheGeneratedOne) {
  const std::string path = std::string(WSYNC_SOURCE_DIR) + "/README.md";
  ASSERT_TRUE(std::ifstream(path).good()) << path;
  EXPECT_EQ(readmeOptionsTable(path), optionsMarkdownTable())
      << "paste the output of `wsync-options --markdown` under \"## Environment variables\" in "
      << path;
}

TEST(Options, DescribeMarksTheEnvironmentAndHidesTheSecret) {
  const Result<Options> options =
      readFrom({{"WSYNC_SECRET", "hunter2"}, {"WSYNC_DEBUG_SEND_DELAY_MS", "30"}});
  ASSERT_TRUE(options.isOk());
  const std::string text = describeOptions(options.value());
  EXPECT_EQ(lines(text).size(), kNumOptions);
  EXPECT_EQ(text.find("hunter2"), std::string::npos) << text;
  EXPECT_NE(text.find("WSYNC_SECRET=(set)  (environment)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("WSYNC_DEBUG_SEND_DELAY_MS=30  (environment)\n"), std::string::npos);
  EXPECT_NE(text.find("WSYNC_DEVICE_TRANSPORT=cuda_ipc\n"), std::string::npos) << text;
}

TEST(Options, UnknownWsyncVariablesAreListed) {
  const char* const envp[] = {"WSYNC_DEVICE_TRANSPRT=staged",
                              "WSYNC_LOG=1",
                              "PATH=/bin",
                              "WSYNC_OLD",
                              "MY_WSYNC_LOG=1",
                              nullptr};
  EXPECT_EQ(unknownOptionVariables(envp),
            (std::vector<std::string>{"WSYNC_DEVICE_TRANSPRT", "WSYNC_OLD"}));
  EXPECT_TRUE(unknownOptionVariables(nullptr).empty());
}

}  // namespace
}  // namespace wsync
