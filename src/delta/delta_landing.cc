#include "delta/delta_landing.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/wire.h"

namespace wsync::delta {
namespace {

uint64_t alignUp(uint64_t v, uint64_t a) {
  return (v + a - 1) / a * a;
}
uint64_t shareOf(uint64_t bytes, uint32_t ppm) {
  return static_cast<uint64_t>(static_cast<long double>(bytes) * ppm / 1000000.0L);
}

}  // namespace

uint32_t shareToPpm(double share) {
  const double ppm = std::round(std::clamp(share, 0.0, 1.0) * 1e6);
  return std::max<uint32_t>(1, static_cast<uint32_t>(ppm));
}

double shareFromPpm(uint32_t ppm) {
  return static_cast<double>(ppm) / 1e6;
}

uint64_t landingAreaBytes(uint64_t slot_bytes, int num_trainers, uint32_t share_ppm) {
  const auto trainers = static_cast<uint64_t>(std::max(num_trainers, 1));
  return alignUp(shareOf(slot_bytes, share_ppm), kPartAlignment) +
         trainers * alignUp(kPartAllowanceBytes, kPartAlignment) + trainers * kPartAlignment;
}

std::vector<LandingPart> landingParts(const std::vector<uint64_t>& dense_bytes,
                                      uint32_t share_ppm) {
  std::vector<LandingPart> parts(dense_bytes.size());
  uint64_t offset = 0;
  for (size_t t = 0; t < dense_bytes.size(); ++t) {
    if (dense_bytes[t] == 0) continue;
    parts[t].offset = offset;
    parts[t].bytes =
        alignUp(shareOf(dense_bytes[t], share_ppm) + kPartAllowanceBytes, kPartAlignment);
    offset += parts[t].bytes;
  }
  return parts;
}

PairAreaWriter::PairAreaWriter(uint8_t* out, uint64_t capacity, uint32_t trainer, uint64_t version)
    : out_(out), capacity_(capacity), trainer_(trainer), version_(version) {}

bool PairAreaWriter::fits(uint64_t patch_bytes) const {
  const uint64_t entries = (entries_.size() + 1) * kPairEntryBytes;
  return used_ + patch_bytes + entries <= capacity_;
}

void PairAreaWriter::add(uint32_t op, const uint8_t* patch, uint64_t patch_bytes) {
  std::memcpy(out_ + used_, patch, patch_bytes);
  used_ += patch_bytes;
  entries_.push_back({op, patch_bytes});
}

uint64_t PairAreaWriter::finish() {
  uint8_t* e = out_ + used_;
  for (const PairEntry& entry : entries_) {
    putFixed32(e, entry.op);
    putFixed32(e + 4, 0);
    putFixed64(e + 8, entry.patch_bytes);
    e += kPairEntryBytes;
  }
  const uint64_t total = used_ + entries_.size() * kPairEntryBytes;
  putFixed32(out_, kPairMagic);
  putFixed32(out_ + 4, trainer_);
  putFixed64(out_ + 8, version_);
  putFixed32(out_ + 16, static_cast<uint32_t>(entries_.size()));
  putFixed32(out_ + 20, 0);
  putFixed64(out_ + 24, total);
  return total;
}

Result<PairArea> readPairArea(const uint8_t* data, uint64_t bytes, uint32_t trainer,
                              uint64_t version, size_t num_ops) {
  PairArea area;
  if (bytes < kPairHeaderBytes || getFixed32(data) != kPairMagic ||
      getFixed32(data + 4) != trainer || getFixed64(data + 8) != version)
    return area;  // no patches from this trainer for this version
  auto bad = [&](const std::string& what) {
    return protocolError("delta patches of trainer " + std::to_string(trainer) + " for version " +
                         std::to_string(version) + ": " + what);
  };
  const uint64_t count = getFixed32(data + 16);
  const uint64_t total = getFixed64(data + 24);
  if (total > bytes || total < kPairHeaderBytes ||
      count > (total - kPairHeaderBytes) / kPairEntryBytes)
    return bad("an area of " + std::to_string(total) + " bytes with " + std::to_string(count) +
               " entries in a part of " + std::to_string(bytes) + " bytes");
  const uint64_t entries_at = total - count * kPairEntryBytes;
  uint64_t patch_at = kPairHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = data + entries_at + i * kPairEntryBytes;
    const PairEntry entry{getFixed32(e), getFixed64(e + 8)};
    if (entry.op >= num_ops || (i > 0 && entry.op <= area.entries.back().op))
      return bad("entry " + std::to_string(i) + " names write op " + std::to_string(entry.op) +
                 " (the pair has " + std::to_string(num_ops) + ", entries increasing)");
    if (entry.patch_bytes > entries_at - patch_at)
      return bad("entry " + std::to_string(i) + "'s patch of " + std::to_string(entry.patch_bytes) +
                 " bytes runs past the patches");
    area.entries.push_back(entry);
    area.patches.push_back(data + patch_at);
    patch_at += entry.patch_bytes;
  }
  if (patch_at != entries_at) return bad("the patches do not fill the area up to its entries");
  return area;
}

}  // namespace wsync::delta
