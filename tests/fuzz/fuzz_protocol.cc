// Fuzz target: every decode() overload of the coordinator protocol (coordinator/protocol.h).
// Input: one byte choosing the message struct (its value modulo 8), then the payload bytes.
// Beyond "no crash, no sanitizer report": a payload that decodes must re-encode to bytes that
// decode again and re-encode identically (encode is a function of the decoded struct).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "coordinator/protocol.h"
#include "fuzz_check.h"

namespace {

template <typename Msg>
void decodeAndRoundTrip(const std::vector<uint8_t>& payload) {
  Msg first;
  const wsync::Status s = wsync::decode(payload, first);
  if (!s.isOk()) {
    WSYNC_FUZZ_CHECK(s.code() == WSYNC_ERR_PROTOCOL);
    return;
  }
  const std::vector<uint8_t> bytes = wsync::encode(first);
  Msg second;
  WSYNC_FUZZ_CHECK(wsync::decode(bytes, second).isOk());
  WSYNC_FUZZ_CHECK(wsync::encode(second) == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::vector<uint8_t> payload(data + 1, data + size);
  switch (data[0] % 8) {
    case 0:
      decodeAndRoundTrip<wsync::HelloMsg>(payload);
      break;
    case 1:
      decodeAndRoundTrip<wsync::WelcomeMsg>(payload);
      break;
    case 2:
      decodeAndRoundTrip<wsync::RegisterMsg>(payload);
      break;
    case 3:
      decodeAndRoundTrip<wsync::PlanAssignmentMsg>(payload);
      break;
    case 4:
      decodeAndRoundTrip<wsync::VersionMsg>(payload);
      break;
    case 5:
      decodeAndRoundTrip<wsync::SlotMsg>(payload);
      break;
    case 6:
      decodeAndRoundTrip<wsync::GoMsg>(payload);
      break;
    default:
      decodeAndRoundTrip<wsync::ErrorMsg>(payload);
      break;
  }
  return 0;
}
