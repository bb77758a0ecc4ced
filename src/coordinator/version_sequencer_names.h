// Names the version sequencer's messages and errors use (coordinator-internal).
#pragma once

#include <cstdint>
#include <string>

namespace wsync::sequencer_names {

inline std::string versionName(uint64_t v) {
  return "version " + std::to_string(v);
}
inline std::string rolloutName(int32_t rank) {
  return "rollout " + std::to_string(rank);
}

}  // namespace wsync::sequencer_names
