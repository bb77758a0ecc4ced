// Fuzz target: decodeRegistration (codec/registration_codec.h) on arbitrary bytes. A record that
// decodes must re-encode to a record that decodes again and re-encodes identically.
// Input: a mode byte, then the bytes. Odd mode: the bytes are a whole record (header checks
// included). Even mode: the bytes are a payload, framed here with a valid header and checksum so
// that mutations reach the payload decoder instead of failing the checksum.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "codec/registration_codec.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& kind = wsync::codec_detail::kRegistrationRecord;
  const std::vector<uint8_t> input(data + 1, data + size);
  const std::vector<uint8_t> record =
      (data[0] & 1) != 0 ? input : wsync::codec_detail::frameRecord(kind, kind.version, input);
  wsync::Result<wsync::Registration> first =
      wsync::decodeRegistration(record.data(), record.size());
  if (!first.isOk()) {
    WSYNC_FUZZ_CHECK(first.status().code() == WSYNC_ERR_PROTOCOL);
    return 0;
  }
  const std::vector<uint8_t> bytes = wsync::encodeRegistration(*first);
  wsync::Result<wsync::Registration> second = wsync::decodeRegistration(bytes.data(), bytes.size());
  WSYNC_FUZZ_CHECK(second.isOk());
  WSYNC_FUZZ_CHECK(wsync::encodeRegistration(*second) == bytes);
  return 0;
}
