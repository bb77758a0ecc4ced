// Fuzz target: every decode() overload of the coordinator protocol (coordinator/protocol.h).
// Input: one byte choosing the message struct (its value modulo 16), then the payload bytes.
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
  using Decoder = void (*)(const std::vector<uint8_t>&);
  // One entry per decode() overload of coordinator/protocol.h; byte 0 picks it (modulo 16).
  static constexpr Decoder kDecoders[] = {decodeAndRoundTrip<wsync::HelloMsg>,
                                          decodeAndRoundTrip<wsync::WelcomeMsg>,
                                          decodeAndRoundTrip<wsync::RegisterMsg>,
                                          decodeAndRoundTrip<wsync::PlanAssignmentMsg>,
                                          decodeAndRoundTrip<wsync::VersionMsg>,
                                          decodeAndRoundTrip<wsync::SlotMsg>,
                                          decodeAndRoundTrip<wsync::GoMsg>,
                                          decodeAndRoundTrip<wsync::ErrorMsg>,
                                          decodeAndRoundTrip<wsync::DeliveredMsg>,
                                          decodeAndRoundTrip<wsync::ReplicaMsg>,
                                          decodeAndRoundTrip<wsync::PlanExtensionMsg>,
                                          decodeAndRoundTrip<wsync::ColdFillMsg>,
                                          decodeAndRoundTrip<wsync::ColdFillDoneMsg>,
                                          decodeAndRoundTrip<wsync::SentChecksumsMsg>,
                                          decodeAndRoundTrip<wsync::VerifyMsg>,
                                          decodeAndRoundTrip<wsync::ChecksumFailedMsg>};
  static_assert(sizeof(kDecoders) / sizeof(kDecoders[0]) == 16);
  kDecoders[data[0] % 16](payload);
  return 0;
}
