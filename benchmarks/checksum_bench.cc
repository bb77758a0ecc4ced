// wsync-checksum-bench: host throughput of the shard checksum (src/checksum/checksum.h), per kind
// the CPU has, against memcpy of the same bytes, for one contiguous run and for the same bytes cut
// into runs of --row-bytes.
//
//   wsync-checksum-bench [--mib 256] [--row-bytes 4096] [--repeats 5]
//
// Prints one line per kind and layout: bytes, best seconds of --repeats, GB/s (bytes read / s).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>
#include <vector>

#include "best_seconds.h"
#include "checksum/checksum.h"

using wsync_bench::bestSeconds;

int main(int argc, char** argv) {
  cxxopts::Options options("wsync-checksum-bench", "Host throughput of wsync's shard checksum");
  options.add_options()("mib", "MiB summed", cxxopts::value<uint64_t>()->default_value("256"))(
      "row-bytes", "bytes per run in the many-runs layout",
      cxxopts::value<uint64_t>()->default_value("4096"))("repeats", "timed repeats (best kept)",
                                                         cxxopts::value<int>()->default_value("5"))(
      "h,help", "this help");
  const auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", options.help().c_str());
    return 0;
  }
  const uint64_t bytes = args["mib"].as<uint64_t>() << 20;
  const uint64_t row = std::max<uint64_t>(1, args["row-bytes"].as<uint64_t>());
  const int repeats = std::max(1, args["repeats"].as<int>());
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i)
    data[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  std::vector<uint8_t> target(bytes);
  volatile uint64_t sink = 0;

  const double copy_s =
      bestSeconds(repeats, [&] { std::memcpy(target.data(), data.data(), bytes); });
  std::printf("%-28s %12llu bytes %9.4f s %8.2f GB/s\n", "memcpy", (unsigned long long)bytes,
              copy_s, static_cast<double>(bytes) / copy_s / 1e9);
  const wsync::ChecksumKind kinds[] = {wsync::ChecksumKind::kScalar, wsync::ChecksumKind::kAvx2,
                                       wsync::ChecksumKind::kAvx512};
  for (wsync::ChecksumKind kind : kinds) {
    if (kind != wsync::ChecksumKind::kScalar && kind > wsync::checksumKind()) continue;
    const double s = bestSeconds(
        repeats, [&] { sink = sink + wsync::checksumRunWith(kind, data.data(), bytes, 0, 0); });
    char what[64];
    std::snprintf(what, sizeof what, "checksum %s, one run", wsync::checksumKindName(kind));
    std::printf("%-28s %12llu bytes %9.4f s %8.2f GB/s\n", what, (unsigned long long)bytes, s,
                static_cast<double>(bytes) / s / 1e9);
  }
  // The runtime's path (fastest kind, checksumSpan): the same bytes as runs of `row` bytes, each
  // run started afresh (its own keys, partial last word, reduction): the cost of many short runs.
  wsync::ChecksumSpan span;
  span.row_bytes = row;
  span.rows = bytes / row;
  span.src_pitch = row;
  span.dst_pitch = row;
  const double s =
      bestSeconds(repeats, [&] { sink = sink + wsync::checksumSpan(data.data(), span); });
  const uint64_t summed = span.rows * row;
  char what[64];
  std::snprintf(what, sizeof what, "checksum %s, %llu-byte runs",
                wsync::checksumKindName(wsync::checksumKind()), (unsigned long long)row);
  std::printf("%-28s %12llu bytes %9.4f s %8.2f GB/s\n", what, (unsigned long long)summed, s,
              static_cast<double>(summed) / s / 1e9);
  return 0;
}
