// Fuzz target: the decoder of every message of the coordinator protocol's table
// (WSYNC_PROTOCOL_MESSAGES in protocol/protocol.h). Input: one byte choosing the message (its
// index in kMessages, modulo their number), then the payload bytes, decoded as that message's
// payload struct. A message added to the table is covered without touching this file.
// Beyond "no crash, no sanitizer report": a payload that decodes must re-encode to bytes that
// decode again and re-encode identically (encode is a function of the decoded struct), and a
// failure is PROTOCOL.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "fuzz_check.h"
#include "protocol/protocol.h"

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
  constexpr size_t kCount = std::size(wsync::kMessages);
  const std::vector<uint8_t> payload(data + 1, data + size);
  const bool known = wsync::withPayloadOf(wsync::kMessages[data[0] % kCount].type, [&](auto t) {
    decodeAndRoundTrip<typename decltype(t)::type>(payload);
  });
  WSYNC_FUZZ_CHECK(known);
  return 0;
}
