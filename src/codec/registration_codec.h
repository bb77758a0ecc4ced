// Versioned binary encoding of Registration (rank -> coordinator), plus the record framing and
// decoding helpers that plan_codec shares.
//
// Record layout (all fixed-width fields little-endian):
//   magic[4]  "WSRG" (registration), "WSPL" (plan), "WSRP" (rank plan)
//   version   u16, the payload format version
//   length    u64, payload bytes that follow the header (must match the buffer exactly)
//   checksum  u64, checksum64() over magic, version, length and the payload
//   payload   varints (common/wire.h); see the .cc files for the field order
// Decoding is bounds-checked: a truncated, corrupted or hostile buffer gives a WSYNC_ERR_PROTOCOL
// Status naming the field and byte offset, never a crash; no allocation exceeds a small constant
// times the buffer size. Decoded records are structurally valid (ranks <= kMaxRank, non-negative
// extents, enums in range, indices inside their tables); semantic checks that need several
// registrations (shapes agree, pieces fit buffers) remain the registry's job.
// Encoding is deterministic: equal structs give equal bytes. All functions are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/wire.h"
#include "layout/box.h"
#include "layout/dtype.h"
#include "layout/registration.h"

namespace wsync {

inline constexpr uint16_t kRegistrationFormatVersion = 1;

std::vector<uint8_t> encodeRegistration(const Registration& reg);
Result<Registration> decodeRegistration(const uint8_t* data, size_t size);

// Internals shared by the codecs (and their tests); not for other components.
namespace codec_detail {

inline constexpr size_t kHeaderSize = 4 + 2 + 8 + 8;
inline constexpr size_t kMaxNameBytes = 4096;  // tensor and buffer names

struct RecordKind {
  char magic[4];
  uint16_t version;     // the only version this build reads and writes
  const char* decoder;  // "decodePlan", for messages
  const char* record;   // "Plan", for messages
};
inline constexpr RecordKind kRegistrationRecord{
    {'W', 'S', 'R', 'G'}, kRegistrationFormatVersion, "decodeRegistration", "Registration"};

// FNV-1a style 64-bit checksum taking 8 bytes per step, with an xor-shift so high bits feed back
// into low ones. Every step is a bijection of the state, so any single-byte change of an input of
// fixed length changes the result.
uint64_t checksum64(const uint8_t* data, size_t size, uint64_t seed);

// Writes a header with zero length and checksum; finishRecord() fills both in.
void beginRecord(ByteWriter& w, const RecordKind& kind);
std::vector<uint8_t> finishRecord(ByteWriter&& w);
// Wraps `payload` in a header of `kind` with `version` (tests use it to build hostile records).
std::vector<uint8_t> frameRecord(const RecordKind& kind, uint16_t version,
                                 const std::vector<uint8_t>& payload);
// Checks magic, version, length and checksum. On success the payload is data[kHeaderSize, size).
Status openRecord(const RecordKind& kind, const uint8_t* data, size_t size);

// Encoding helpers. Values the decoder requires non-negative go out as plain varints (a negative
// one becomes a 10-byte value the decoder rejects); values that may be negative are zigzagged.
inline void putU(ByteWriter& w, int64_t v) {
  w.varu(static_cast<uint64_t>(v));
}
inline void putDimsU(ByteWriter& w, const Dims& d) {
  w.u8(d.rank);
  for (int i = 0; i < d.rank; ++i)
    putU(w, d[i]);
}
inline void putDimsI(ByteWriter& w, const Dims& d) {
  w.u8(d.rank);
  for (int i = 0; i < d.rank; ++i)
    w.vari(d[i]);
}
// A box is its rank and then (offset, extent) per dim; offset and extent must have equal rank.
inline void putBox(ByteWriter& w, const Box& b) {
  w.u8(b.extent.rank);
  for (int i = 0; i < b.extent.rank; ++i) {
    putU(w, b.offset[i]);
    putU(w, b.extent[i]);
  }
}
// Two dtypes in one byte: high nibble `hi`, low nibble `lo`.
inline uint8_t packNibbles(uint8_t hi, uint8_t lo) {
  return static_cast<uint8_t>(hi << 4 | lo);
}

// A ByteReader over a record's payload that remembers the first failure: which field (as a path
// such as "writes[12].region.count[1]"), at which byte offset of the record, and why.
// Every read returns false once anything failed, so decoders return on the first false.
class Decoder {
 public:
  Decoder(const RecordKind& kind, const uint8_t* record, size_t record_size)
      : kind_(kind),
        record_size_(record_size),
        reader_(record + kHeaderSize, record_size - kHeaderSize) {}

  // Names one level of the field path for its lifetime; at(i) sets the element index.
  class Scope {
   public:
    Scope(Decoder& d, const char* name) : d_(d), level_(d.depth_) {
      if (level_ < kMaxDepth) d_.path_[level_] = {name, -1};
      ++d_.depth_;
    }
    ~Scope() { --d_.depth_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    void at(size_t i) {
      if (level_ < kMaxDepth) d_.path_[level_].index = static_cast<int64_t>(i);
    }

   private:
    Decoder& d_;
    int level_;
  };

  size_t offset() const { return record_size_ - reader_.remaining(); }

  bool u8(uint8_t& v, const char* field) {
    const size_t at = offset();
    return reader_.u8(v) || truncated(field, at, 0);
  }
  bool varu(uint64_t& v, const char* field) {
    const size_t at = offset();
    const size_t before = reader_.remaining();
    return reader_.varu(v) || truncated(field, at, before);
  }
  bool vari(int64_t& v, const char* field) {
    const size_t at = offset();
    const size_t before = reader_.remaining();
    return reader_.vari(v) || truncated(field, at, before);
  }
  // An unsigned varint in [0, INT64_MAX].
  bool nonNeg64(int64_t& v, const char* field) {
    const size_t at = offset();
    uint64_t u = 0;
    if (!varu(u, field)) return false;
    if (u > static_cast<uint64_t>(INT64_MAX)) return invalid(field, at, "value exceeds int64");
    v = static_cast<int64_t>(u);
    return true;
  }
  // An unsigned varint in [0, INT32_MAX].
  bool nonNeg32(int32_t& v, const char* field) {
    const size_t at = offset();
    uint64_t u = 0;
    if (!varu(u, field)) return false;
    if (u > static_cast<uint64_t>(INT32_MAX)) {
      return invalid(field, at, "value " + std::to_string(u) + " exceeds int32");
    }
    v = static_cast<int32_t>(u);
    return true;
  }
  // A zigzag varint in [min, INT32_MAX].
  bool signed32(int32_t& v, int32_t min, const char* field) {
    const size_t at = offset();
    int64_t s = 0;
    if (!vari(s, field)) return false;
    if (s < min || s > INT32_MAX) {
      return invalid(
          field, at,
          "value " + std::to_string(s) + " outside [" + std::to_string(min) + ", int32 max]");
    }
    v = static_cast<int32_t>(s);
    return true;
  }
  // An index into a table of `table_size` entries named `table`.
  bool index(int32_t& v, size_t table_size, const char* table, const char* field) {
    const size_t at = offset();
    uint64_t u = 0;
    if (!varu(u, field)) return false;
    if (u >= table_size) {
      return invalid(field, at,
                     "index " + std::to_string(u) + " outside " + table + " (" +
                         std::to_string(table_size) + " entries)");
    }
    v = static_cast<int32_t>(u);
    return true;
  }
  // A count of elements that each take at least `min_bytes_each` bytes, so a count larger than
  // what is left cannot trigger a large allocation. `min_bytes_each` must be at least 1.
  bool count(size_t& n, size_t min_bytes_each, const char* field) {
    const size_t at = offset();
    uint64_t u = 0;
    if (!varu(u, field)) return false;
    const size_t left = reader_.remaining();
    if (u > left / min_bytes_each) {
      return invalid(field, at,
                     "count " + std::to_string(u) + " cannot fit in the " + std::to_string(left) +
                         " bytes left (truncated or corrupted)");
    }
    n = static_cast<size_t>(u);
    return true;
  }
  bool str(std::string& s, size_t max_bytes, const char* field) {
    const size_t at = offset();
    uint64_t n = 0;
    if (!varu(n, field)) return false;
    if (n > max_bytes) {
      return invalid(
          field, at,
          "length " + std::to_string(n) + " over the limit " + std::to_string(max_bytes));
    }
    if (n > reader_.remaining()) return truncated(field, at, 0);
    s.resize(static_cast<size_t>(n));
    return reader_.bytes(s.data(), s.size()) || truncated(field, at, 0);
  }
  bool dtype(DType& t, uint8_t value, size_t at, const char* field) {
    if (!validDType(value)) {
      return invalid(field, at, "dtype value " + std::to_string(value) + " is not a wsync dtype");
    }
    t = static_cast<DType>(value);
    return true;
  }
  // A byte holding two dtypes (src in the high nibble, dst in the low one).
  bool dtypePair(DType& hi, DType& lo, const char* field) {
    const size_t at = offset();
    uint8_t b = 0;
    return u8(b, field) && dtype(hi, b >> 4, at, field) && dtype(lo, b & 0xf, at, field);
  }
  bool role(Role& r, const char* field) {
    const size_t at = offset();
    uint8_t b = 0;
    if (!u8(b, field)) return false;
    if (b > static_cast<uint8_t>(Role::kRollout)) {
      return invalid(field, at, "role value " + std::to_string(b) + " is not trainer or rollout");
    }
    r = static_cast<Role>(b);
    return true;
  }
  bool rank(uint8_t& r, const char* field) {
    const size_t at = offset();
    if (!u8(r, field)) return false;
    if (r > kMaxRank) {
      return invalid(field, at,
                     "rank " + std::to_string(r) + " over kMaxRank " + std::to_string(kMaxRank));
    }
    return true;
  }
  // Dims written by putDimsU (non-negative values) or putDimsI (any values).
  bool dims(Dims& d, bool non_negative, const char* field) {
    d = Dims();
    uint8_t r = 0;
    if (!rank(r, field)) return false;
    d.rank = r;
    for (int i = 0; i < r; ++i) {
      if (!(non_negative ? nonNeg64(d[i], field) : vari(d[i], field))) return false;
    }
    return true;
  }
  bool box(Box& b, const char* field) {
    b = Box();
    uint8_t r = 0;
    if (!rank(r, field)) return false;
    b.offset.rank = b.extent.rank = r;
    for (int i = 0; i < r; ++i) {
      const size_t at = offset();
      if (!nonNeg64(b.offset[i], field) || !nonNeg64(b.extent[i], field)) return false;
      if (b.offset[i] > INT64_MAX - b.extent[i]) {
        return invalid(field, at, "offset + extent overflows int64 in dim " + std::to_string(i));
      }
    }
    return true;
  }

  // Records a semantic failure of `field` read at byte `at`; returns false.
  bool invalid(const char* field, size_t at, const std::string& why);
  // Fails unless the payload was consumed exactly.
  bool finish();
  // The first failure, as a WSYNC_ERR_PROTOCOL Status (success when nothing failed).
  Status status() const { return status_; }

 private:
  static constexpr int kMaxDepth = 4;
  struct PathPart {
    const char* name;
    int64_t index;
  };
  // `before`: bytes left before a varint read (0 for other reads), to tell an over-long varint
  // from a truncated one.
  bool truncated(const char* field, size_t at, size_t before);
  std::string path(const char* field) const;

  const RecordKind& kind_;
  size_t record_size_;
  ByteReader reader_;
  std::array<PathPart, kMaxDepth> path_{};
  int depth_ = 0;
  Status status_;
};

// A record of `kind` whose payload is what put(ByteWriter&) writes.
template <typename Put>
std::vector<uint8_t> encodeRecord(const RecordKind& kind, Put put) {
  ByteWriter w;
  beginRecord(w, kind);
  put(w);
  return finishRecord(std::move(w));
}

// Opens a record of `kind` and reads a T from its payload with get(Decoder&, T&), which returns
// false at the first failure; the payload must end there. The Decoder's error otherwise.
template <typename T, typename Get>
Result<T> decodeRecord(const RecordKind& kind, const uint8_t* data, size_t size, Get get) {
  WSYNC_RETURN_IF_ERROR(openRecord(kind, data, size));
  Decoder d(kind, data, size);
  T value;
  if (!get(d, value) || !d.finish()) return d.status();
  return value;
}

}  // namespace codec_detail
}  // namespace wsync
