// The field codec: a record (a control message, a backend's address or descriptor) lists its
// fields once, in wire order, in a function of a visitor and the record, `static void
// fields(auto& v, auto& m)`, calling the primitives below (v.u64(m.version); v.str(m.host,
// kMaxHostBytes); ...). FieldWriter encodes with it (m is const), FieldReader decodes with it, so
// the encoding and the decoding of a record cannot drift apart. The bytes are those of wire.h:
// unsigned integers are varints, signed ones zigzag varints, fixed-width ones little-endian,
// strings and byte strings a varint length then the bytes, vectors a varint count then the
// elements.
// Contract (FieldReader): every length and count read off the wire is checked against the bound
// the field names (and against what is left of the input) before anything is allocated; a value
// out of its type's range, a flag other than 0/1, truncation or a failed check() fails the
// reader, which then stays failed (later fields read nothing), so a decoder visits the whole
// record and asks finish() once. Not thread-safe; one reader per input.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/wire.h"

namespace wsync {

class FieldWriter {
 public:
  static constexpr bool kReading = false;

  void u8(uint8_t x) { w_.u8(x); }
  void flag(bool b) { w_.u8(b ? 1 : 0); }
  void fixed32(uint32_t x) { w_.fixed32(x); }
  void fixed64(uint64_t x) { w_.fixed64(x); }
  void u64(uint64_t x) { w_.varu(x); }
  void u32(uint32_t x) { w_.varu(x); }
  void i64(int64_t x) { w_.vari(x); }
  void i32(int32_t x) { w_.vari(x); }
  // A non-negative count kept in an int32_t (negative values are written as 0).
  void count32(int32_t x, uint64_t /*max*/) { w_.varu(static_cast<uint64_t>(std::max(0, x))); }
  // An enum as an unsigned varint (enum8: one byte) of at most `max`.
  template <class E>
  void enumeration(E e, uint64_t /*max*/) {
    w_.varu(static_cast<uint64_t>(e));
  }
  template <class E>
  void enum8(E e, uint8_t /*max*/) {
    w_.u8(static_cast<uint8_t>(e));
  }
  void str(const std::string& s, size_t /*max_bytes*/) { w_.str(s); }
  void bytes(const std::vector<uint8_t>& b, uint64_t /*max_bytes*/) {
    w_.varu(b.size());
    w_.bytes(b.data(), b.size());
  }
  // `n` bytes as they are (a fixed-size array or handle), no length.
  void raw(const void* p, size_t n) { w_.bytes(p, n); }
  void i32s(const std::vector<int32_t>& v, uint64_t /*max_count*/) {
    w_.varu(v.size());
    for (const int32_t x : v)
      w_.vari(x);
  }
  void u64s(const std::vector<uint64_t>& v, uint64_t /*max_count*/) {
    w_.varu(v.size());
    for (const uint64_t x : v)
      w_.varu(x);
  }
  // A vector of records: `each(v, element)` visits one element's fields; without it, the
  // element type's own static fields(). `min_bytes_each`: see FieldReader::list.
  template <class T, class F>
  void list(const std::vector<T>& v, uint64_t /*max_count*/, F&& each,
            size_t /*min_bytes_each*/ = 1) {
    w_.varu(v.size());
    for (const T& x : v)
      each(*this, x);
  }
  template <class T>
  void list(const std::vector<T>& v, uint64_t max_count) {
    list(v, max_count, [](FieldWriter& f, const T& x) { T::fields(f, x); });
  }
  // An optional block at the end of a record, for fields added later: absent (present false)
  // writes nothing; present writes its format number (> 0), then its fields.
  template <class F>
  void extension(const bool& present, uint8_t format, F&& fields) {
    if (!present) return;
    w_.u8(format);
    fields(*this);
  }
  // Decoding-side checks (FieldReader::check); nothing to write.
  template <class Cond, class Fail>
  void check(Cond&& /*cond*/, Fail&& /*fail*/) {}

  std::vector<uint8_t> take() { return w_.take(); }

 private:
  ByteWriter w_;
};

class FieldReader {
 public:
  static constexpr bool kReading = true;

  explicit FieldReader(const std::vector<uint8_t>& bytes) : r_(bytes) {}
  FieldReader(const void* data, size_t size) : r_(data, size) {}

  bool ok() const { return r_.ok(); }
  bool atEnd() const { return r_.atEnd(); }
  size_t remaining() const { return r_.remaining(); }

  void u8(uint8_t& x) { r_.u8(x); }
  void flag(bool& b) {
    uint8_t v = 0;
    if (!r_.u8(v)) return;
    if (v > 1) {
      r_.fail();
      return;
    }
    b = v == 1;
  }
  void fixed32(uint32_t& x) { r_.fixed32(x); }
  void fixed64(uint64_t& x) { r_.fixed64(x); }
  void u64(uint64_t& x) { r_.varu(x); }
  void u32(uint32_t& x) {
    uint64_t v = 0;
    if (r_.varuMax(v, std::numeric_limits<uint32_t>::max())) x = static_cast<uint32_t>(v);
  }
  void i64(int64_t& x) { r_.vari(x); }
  void i32(int32_t& x) {
    int64_t v = 0;
    if (!r_.vari(v)) return;
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      r_.fail();
      return;
    }
    x = static_cast<int32_t>(v);
  }
  void count32(int32_t& x, uint64_t max) {
    uint64_t v = 0;
    if (r_.varuMax(v, std::min<uint64_t>(max, std::numeric_limits<int32_t>::max()))) {
      x = static_cast<int32_t>(v);
    }
  }
  template <class E>
  void enumeration(E& e, uint64_t max) {
    uint64_t v = 0;
    if (r_.varuMax(v, max)) e = static_cast<E>(v);
  }
  template <class E>
  void enum8(E& e, uint8_t max) {
    uint8_t v = 0;
    if (!r_.u8(v)) return;
    if (v > max) {
      r_.fail();
      return;
    }
    e = static_cast<E>(v);
  }
  void str(std::string& s, size_t max_bytes) { r_.str(s, max_bytes); }
  void bytes(std::vector<uint8_t>& b, uint64_t max_bytes) {
    uint64_t n = 0;
    if (!r_.count(n, max_bytes)) return;
    b.resize(n);
    r_.bytes(b.data(), n);
  }
  void raw(void* p, size_t n) { r_.bytes(p, n); }
  void i32s(std::vector<int32_t>& v, uint64_t max_count) {
    list(v, max_count, [](FieldReader& f, int32_t& x) { f.i32(x); });
  }
  void u64s(std::vector<uint64_t>& v, uint64_t max_count) {
    list(v, max_count, [](FieldReader& f, uint64_t& x) { f.u64(x); });
  }
  // A count of at most `max_count`, and no more than what is left of the input at
  // `min_bytes_each` per element, then each element.
  template <class T, class F>
  void list(std::vector<T>& v, uint64_t max_count, F&& each, size_t min_bytes_each = 1) {
    uint64_t n = 0;
    if (!r_.count(n, max_count, min_bytes_each)) return;
    v.resize(n);
    for (T& x : v) {
      if (!ok()) return;
      each(*this, x);
    }
  }
  template <class T>
  void list(std::vector<T>& v, uint64_t max_count) {
    list(v, max_count, [](FieldReader& f, T& x) { T::fields(f, x); });
  }
  // The optional block at the end: present when bytes are left. A block of format 0 is
  // malformed; one of a newer format than `format` has its fields read as far as known here and
  // the rest skipped (finish() accepts trailing bytes after it).
  template <class F>
  void extension(bool& present, uint8_t format, F&& fields) {
    present = false;
    if (!ok() || atEnd()) return;
    uint8_t got = 0;
    if (!r_.u8(got)) return;
    if (got == 0) {
      fail(protocolError("an extension block of format 0"));
      return;
    }
    fields(*this);
    present = ok();
    trailing_allowed_ = ok() && got > format;
  }
  // Fails the reader with `fail()`'s status (a Status) unless `cond()` holds; neither is called
  // once the reader failed. For checks that must come before the rest of the record is read (a
  // version, a tag).
  template <class Cond, class Fail>
  void check(Cond&& cond, Fail&& fail_status) {
    if (ok() && !cond()) fail(fail_status());
  }
  void fail(Status s) {
    if (error_.isOk()) error_ = std::move(s);
    r_.fail();
  }

  // The verdict once every field was visited: OK, the status of the first failed check(),
  // "malformed or truncated <what>" or "trailing bytes after <what>" (PROTOCOL).
  Status finish(const std::string& what) const {
    if (!error_.isOk()) return error_;
    if (!ok()) return protocolError("malformed or truncated " + what);
    if (!atEnd() && !trailing_allowed_) return protocolError("trailing bytes after " + what);
    return Status::ok();
  }

 private:
  ByteReader r_;
  Status error_;  // the first failed check(); OK otherwise
  bool trailing_allowed_ = false;
};

// Encodes / decodes a record with a static fields(V&, M&).
template <class M>
std::vector<uint8_t> encodeFields(const M& m) {
  FieldWriter w;
  M::fields(w, m);
  return w.take();
}
// Decodes into a fresh M and moves it into `m` on success (`m` is untouched on failure).
template <class M>
Status decodeFields(const std::vector<uint8_t>& bytes, M& m, const std::string& what) {
  FieldReader r(bytes);
  M decoded{};
  M::fields(r, decoded);
  WSYNC_RETURN_IF_ERROR(r.finish(what));
  m = std::move(decoded);
  return Status::ok();
}

}  // namespace wsync
