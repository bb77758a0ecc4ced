// The progress layout descriptor extension (progress_log.h).
#include "transport/ucx_staged/progress_log.h"

#include "common/wire.h"

namespace wsync::staged_internal {

std::vector<uint8_t> encodeProgressLayout(const ProgressLayout& p) {
  ByteWriter w;
  w.u8(kProgressVersion);
  w.varu(p.writers);
  w.varu(p.records);
  w.varu(p.log_descriptor.size());
  w.bytes(p.log_descriptor.data(), p.log_descriptor.size());
  return w.take();
}

bool decodeProgressLayout(const std::vector<uint8_t>& bytes, ProgressLayout& p) {
  if (bytes.empty()) return false;
  ByteReader r(bytes.data(), bytes.size());
  uint8_t version = 0;
  uint64_t writers = 0;
  uint64_t records = 0;
  uint64_t descriptor_bytes = 0;
  if (!r.u8(version) || version != kProgressVersion || !r.varuMax(writers, 1u << 16) ||
      !r.varuMax(records, 1u << 24) || !r.varuMax(descriptor_bytes, 1u << 20) ||
      r.remaining() != descriptor_bytes || writers == 0 || records == 0) {
    return false;
  }
  p.writers = static_cast<uint32_t>(writers);
  p.records = static_cast<uint32_t>(records);
  p.log_descriptor.resize(descriptor_bytes);
  return r.bytes(p.log_descriptor.data(), descriptor_bytes);
}

}  // namespace wsync::staged_internal
