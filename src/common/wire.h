// Byte-level encoding shared by everything that crosses a process boundary (plans, registrations,
// control messages). Integers are LEB128 varints (signed ones zigzag-encoded), so small values cost
// one byte; fixed-width fields are little-endian.
// Contract: ByteReader never reads past its buffer. Every read returns false on truncation or on a
// value over the caller's bound, and the reader then stays failed (all later reads fail too), so a
// decoder can read a whole record and check ok() once. Nothing here allocates more than the
// caller's bound for a length read off the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace wsync {

// Fixed-width little-endian integers at an address, for headers laid out in place in a memory
// region (delta landing areas, patches). The caller owns the bounds.
inline void putFixed32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void putFixed64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t getFixed16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
inline uint32_t getFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t getFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

class ByteWriter {
 public:
  void u8(uint8_t v) { buf_.push_back(v); }
  void fixed32(uint32_t v) { appendLittleEndian(v, 4); }
  void fixed64(uint64_t v) { appendLittleEndian(v, 8); }
  void varu(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<uint8_t>(v) | 0x80);
      v >>= 7;
    }
    buf_.push_back(static_cast<uint8_t>(v));
  }
  void vari(int64_t v) { varu((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63)); }
  void str(std::string_view s) {
    varu(s.size());
    bytes(s.data(), s.size());
  }
  void bytes(const void* p, size_t n) {
    if (n == 0) return;
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }

  const std::vector<uint8_t>& data() const { return buf_; }
  std::vector<uint8_t> take() { return std::move(buf_); }
  size_t size() const { return buf_.size(); }

 private:
  void appendLittleEndian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const void* data, size_t size)
      : p_(static_cast<const uint8_t*>(data)), end_(p_ + size) {}
  explicit ByteReader(const std::vector<uint8_t>& v) : ByteReader(v.data(), v.size()) {}

  bool ok() const { return ok_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  bool atEnd() const { return ok_ && p_ == end_; }

  bool u8(uint8_t& v) {
    if (!need(1)) return false;
    v = *p_++;
    return true;
  }
  bool fixed32(uint32_t& v) {
    uint64_t w = 0;
    if (!readLittleEndian(w, 4)) return false;
    v = static_cast<uint32_t>(w);
    return true;
  }
  bool fixed64(uint64_t& v) { return readLittleEndian(v, 8); }
  bool varu(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!u8(b)) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return fail();  // more than 10 bytes: malformed
  }
  // Reads an unsigned varint and checks it is at most `max`.
  bool varuMax(uint64_t& v, uint64_t max) { return varu(v) && (v <= max || fail()); }
  bool vari(int64_t& v) {
    uint64_t u = 0;
    if (!varu(u)) return false;
    v = static_cast<int64_t>((u >> 1) ^ (~(u & 1) + 1));
    return true;
  }
  bool str(std::string& s, size_t max_bytes) {
    uint64_t n = 0;
    if (!varuMax(n, max_bytes) || !need(n)) return false;
    s.assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  bool bytes(void* out, size_t n) {
    if (!need(n)) return false;
    if (n == 0) return true;  // `out` may be null (an empty vector's data())
    std::memcpy(out, p_, n);
    p_ += n;
    return true;
  }
  // Reads a varint count and checks count * min_bytes_each fits in what is left, so a corrupted
  // count cannot make the caller reserve unbounded memory.
  bool count(uint64_t& n, uint64_t max, size_t min_bytes_each = 1) {
    if (!varuMax(n, max)) return false;
    if (min_bytes_each > 0 && n > remaining() / min_bytes_each) return fail();
    return true;
  }

  bool fail() {
    ok_ = false;
    p_ = end_;
    return false;
  }

 private:
  bool need(size_t n) { return (ok_ && remaining() >= n) || fail(); }
  bool readLittleEndian(uint64_t& v, int n) {
    if (!need(static_cast<size_t>(n))) return false;
    v = 0;
    for (int i = 0; i < n; ++i)
      v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += n;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace wsync
