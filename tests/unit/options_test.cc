// Options: every variable read once, defaults, every type's syntax, bad values named with the
// accepted values, the environment-over-config rule, the table's consistency, and the README's
// "Environment variables" table equal to optionsMarkdownTable().
#include "options/options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
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
  EXPECT_EQ(options->heartbeat_timeout_ms, 10000);
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
      {"WSYNC_DEBUG_SEND_DELAY_MS", "250"},
      {"WSYNC_DEBUG_COLD_FILL_DELAY_MS", "40"},
      {"WSYNC_DEBUG_CORRUPT_EVERY", "7"},
  });
  ASSERT_TRUE(options.isOk()) << options.status().toString();
  EXPECT_EQ(options->device_transport, DeviceTransport::kUcxCuda);
  EXPECT_EQ(options->cuda_ipc_export, CudaIpcExport::kLegacy);
  EXPECT_EQ(options->coordinator_host, "10.0.0.7");
  EXPECT_EQ(options->secret, "s3 cr=t");
  EXPECT_TRUE(options->log);
  EXPECT_EQ(options->heartbeat_timeout_ms, 1500);
  EXPECT_EQ(options->host_copy, HostCopy::kAvx2);
  EXPECT_EQ(options->spin_wait_us, 500);
  EXPECT_TRUE(options->debug_timing);
  EXPECT_TRUE(options->debug_no_early_landing);
  EXPECT_TRUE(options->debug_no_copy_batch);
  EXPECT_EQ(options->debug_send_delay_ms, 250);
  EXPECT_EQ(options->debug_cold_fill_delay_ms, 40);
  EXPECT_TRUE(options->checksums);
  EXPECT_EQ(options->checksum_retries, 5);
  EXPECT_EQ(options->debug_corrupt_every, 7);
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

TEST(Options, TheMarkdownTableListsDebugSwitchesLast) {
  const std::vector<std::string> rows = lines(optionsMarkdownTable());
  ASSERT_EQ(rows.size(), kNumOptions + 2);
  EXPECT_EQ(rows[0], "| variable | type | default | effect |");
  EXPECT_EQ(rows[1], "| --- | --- | --- | --- |");
  EXPECT_EQ(rows[2].rfind("| `WSYNC_DEVICE_TRANSPORT` | `cuda_ipc`, `staged` or `ucx_cuda` | "
                          "`cuda_ipc` | device-memory rollouts: ",
                          0),
            0u)
      << rows[2];
  bool seen_debug = false;
  for (size_t i = 2; i < rows.size(); ++i) {
    const bool debug = rows[i].find(" (debug) | ") != std::string::npos;
    EXPECT_TRUE(debug || !seen_debug) << "a setting after a debug switch: " << rows[i];
    EXPECT_EQ(debug, rows[i].rfind("| `WSYNC_DEBUG_", 0) == 0) << rows[i];
    seen_debug = seen_debug || debug;
  }
  EXPECT_TRUE(seen_debug);
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
