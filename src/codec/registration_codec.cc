#include "codec/registration_codec.h"

#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace wsync {
namespace codec_detail {
namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;
constexpr size_t kVersionAt = 4;
constexpr size_t kLengthAt = 6;
constexpr size_t kChecksumAt = 14;

inline uint64_t mixStep(uint64_t h, uint64_t word) {
  h = (h ^ word) * kFnvPrime;
  return h ^ (h >> 29);
}

uint64_t loadLittleEndian(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void storeLittleEndian(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The checksum's seed covers the header fields before the checksum itself.
uint64_t headerSeed(const uint8_t* header) {
  return loadLittleEndian(header, 6) ^ (loadLittleEndian(header + kLengthAt, 8) * kFnvPrime);
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The magic as text when printable, otherwise as hex bytes.
std::string describeMagic(const uint8_t* m) {
  bool printable = true;
  for (int i = 0; i < 4; ++i)
    printable = printable && std::isprint(m[i]);
  if (printable) return "'" + std::string(reinterpret_cast<const char*>(m), 4) + "'";
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%02x %02x %02x %02x", m[0], m[1], m[2], m[3]);
  return buf;
}

std::string magicText(const RecordKind& k) {
  return "'" + std::string(k.magic, 4) + "'";
}

}  // namespace

static_assert(std::endian::native == std::endian::little, "checksum64 loads words little-endian");

uint64_t checksum64(const uint8_t* data, size_t size, uint64_t seed) {
  uint64_t h = mixStep(kFnvOffset, seed);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    h = mixStep(h, word);
  }
  for (; i < size; ++i)
    h = mixStep(h, data[i]);
  return mixStep(h, size);
}

void beginRecord(ByteWriter& w, const RecordKind& kind) {
  w.bytes(kind.magic, 4);
  w.u8(static_cast<uint8_t>(kind.version));
  w.u8(static_cast<uint8_t>(kind.version >> 8));
  w.fixed64(0);  // payload length, set by finishRecord
  w.fixed64(0);  // checksum, set by finishRecord
}

std::vector<uint8_t> finishRecord(ByteWriter&& w) {
  std::vector<uint8_t> out = w.take();
  const size_t payload = out.size() - kHeaderSize;
  storeLittleEndian(out.data() + kLengthAt, payload, 8);
  const uint64_t sum = checksum64(out.data() + kHeaderSize, payload, headerSeed(out.data()));
  storeLittleEndian(out.data() + kChecksumAt, sum, 8);
  return out;
}

std::vector<uint8_t> frameRecord(const RecordKind& kind, uint16_t version,
                                 const std::vector<uint8_t>& payload) {
  ByteWriter w;
  RecordKind k = kind;
  k.version = version;
  beginRecord(w, k);
  w.bytes(payload.data(), payload.size());
  return finishRecord(std::move(w));
}

Status openRecord(const RecordKind& kind, const uint8_t* data, size_t size) {
  const std::string who = kind.decoder;
  if (data == nullptr || size < kHeaderSize) {
    return protocolError(who + ": buffer of " + std::to_string(data ? size : 0) +
                         " bytes is shorter than the " + std::to_string(kHeaderSize) +
                         "-byte record header");
  }
  if (std::memcmp(data, kind.magic, 4) != 0) {
    return protocolError(who + ": bad magic " + describeMagic(data) + " at byte 0 (a " +
                         kind.record + " record starts with " + magicText(kind) + ")");
  }
  const auto version = static_cast<uint16_t>(loadLittleEndian(data + kVersionAt, 2));
  if (version != kind.version) {
    return protocolError(who + ": unknown " + kind.record + " format version " +
                         std::to_string(version) + " at byte " + std::to_string(kVersionAt) +
                         " (this build supports version " + std::to_string(kind.version) + ")");
  }
  const uint64_t length = loadLittleEndian(data + kLengthAt, 8);
  if (length != size - kHeaderSize) {
    return protocolError(who + ": header at byte " + std::to_string(kLengthAt) + " says " +
                         std::to_string(length) + " payload bytes but " +
                         std::to_string(size - kHeaderSize) + " follow the header" +
                         (length > size - kHeaderSize ? " (truncated)" : ""));
  }
  const uint64_t expected = loadLittleEndian(data + kChecksumAt, 8);
  const uint64_t actual = checksum64(data + kHeaderSize, size - kHeaderSize, headerSeed(data));
  if (expected != actual) {
    return protocolError(who + ": checksum mismatch: header (byte " + std::to_string(kChecksumAt) +
                         ") says " + hex64(expected) + ", the record hashes to " + hex64(actual) +
                         " (corrupted record)");
  }
  return Status::ok();
}

bool Decoder::invalid(const char* field, size_t at, const std::string& why) {
  if (status_.isOk()) {
    status_ =
        protocolError(std::string(kind_.decoder) + ": " + path(field) + ": " + why + " (at byte " +
                      std::to_string(at) + " of " + std::to_string(record_size_) + ")");
  }
  reader_.fail();
  return false;
}

bool Decoder::truncated(const char* field, size_t at, size_t before) {
  if (!status_.isOk()) return false;
  return invalid(field, at, before >= 10 ? "malformed varint (over 10 bytes)" : "truncated");
}

bool Decoder::finish() {
  if (!status_.isOk()) return false;
  if (reader_.remaining() != 0) {
    return invalid(
        "payload", offset(),
        std::to_string(reader_.remaining()) + " unexpected bytes after the " + kind_.record);
  }
  return true;
}

std::string Decoder::path(const char* field) const {
  std::string p;
  for (int i = 0; i < depth_ && i < kMaxDepth; ++i) {
    p += path_[i].name;
    if (path_[i].index >= 0) p += "[" + std::to_string(path_[i].index) + "]";
    p += ".";
  }
  return p + field;
}

}  // namespace codec_detail

using codec_detail::Decoder;

// Payload: role u8, rank varu, replica vari, tensors, buffers.
//   tensor: name str, shape dimsU
//   buffer: name str, u8 (memory << 4 | dtype), num_elements varu, pieces
//   piece:  tensor varu, box, local_offset vari, local_strides dimsI
std::vector<uint8_t> encodeRegistration(const Registration& reg) {
  using namespace codec_detail;
  return encodeRecord(kRegistrationRecord, [&](ByteWriter& w) {
    w.u8(static_cast<uint8_t>(reg.role));
    putU(w, reg.rank);
    w.vari(reg.replica);
    w.varu(reg.tensors.size());
    for (const TensorDecl& t : reg.tensors) {
      w.str(t.name);
      putDimsU(w, t.shape);
    }
    w.varu(reg.buffers.size());
    for (const LocalBuffer& b : reg.buffers) {
      w.str(b.name);
      w.u8(packNibbles(static_cast<uint8_t>(b.memory), static_cast<uint8_t>(b.dtype)));
      putU(w, b.num_elements);
      w.varu(b.pieces.size());
      for (const Piece& p : b.pieces) {
        putU(w, p.tensor);
        putBox(w, p.box);
        w.vari(p.local_offset);
        putDimsI(w, p.local_strides);
      }
    }
  });
}

namespace {

bool decodeBuffer(Decoder& d, size_t num_tensors, LocalBuffer& b) {
  if (!d.str(b.name, codec_detail::kMaxNameBytes, "name")) return false;
  const size_t at = d.offset();
  uint8_t kinds = 0;
  if (!d.u8(kinds, "memory/dtype")) return false;
  if ((kinds >> 4) > static_cast<uint8_t>(MemoryKind::kDevice)) {
    return d.invalid("memory", at,
                     "memory kind " + std::to_string(kinds >> 4) + " is not host or device");
  }
  b.memory = static_cast<MemoryKind>(kinds >> 4);
  size_t n = 0;
  if (!d.dtype(b.dtype, kinds & 0xf, at, "dtype") || !d.nonNeg64(b.num_elements, "num_elements")) {
    return false;
  }
  const size_t count_at = d.offset();
  if (!d.count(n, 4, "pieces.size")) return false;
  if (n > PieceList::kMaxSize) {
    return d.invalid("pieces.size", count_at,
                     std::to_string(n) + " pieces in one buffer (at most " +
                         std::to_string(PieceList::kMaxSize) + ")");
  }
  b.pieces.resize(n);
  Decoder::Scope scope(d, "pieces");
  for (size_t i = 0; i < n; ++i) {
    scope.at(i);
    Piece& p = b.pieces[i];
    if (!d.index(p.tensor, num_tensors, "tensors", "tensor") || !d.box(p.box, "box") ||
        !d.vari(p.local_offset, "local_offset") ||
        !d.dims(p.local_strides, false, "local_strides")) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<Registration> decodeRegistration(const uint8_t* data, size_t size) {
  using namespace codec_detail;
  return decodeRecord<Registration>(
      kRegistrationRecord, data, size, [](Decoder& d, Registration& reg) {
        size_t n = 0;
        if (!d.role(reg.role, "role") || !d.nonNeg32(reg.rank, "rank") ||
            !d.signed32(reg.replica, -1, "replica") || !d.count(n, 2, "tensors.size")) {
          return false;
        }
        reg.tensors.resize(n);
        {
          Decoder::Scope scope(d, "tensors");
          for (size_t i = 0; i < n; ++i) {
            scope.at(i);
            TensorDecl& t = reg.tensors[i];
            if (!d.str(t.name, kMaxNameBytes, "name") || !d.dims(t.shape, true, "shape")) {
              return false;
            }
          }
        }
        if (!d.count(n, 4, "buffers.size")) return false;
        reg.buffers.resize(n);
        {
          Decoder::Scope scope(d, "buffers");
          for (size_t i = 0; i < n; ++i) {
            scope.at(i);
            if (!decodeBuffer(d, reg.tensors.size(), reg.buffers[i])) return false;
          }
        }
        return true;
      });
}

}  // namespace wsync
