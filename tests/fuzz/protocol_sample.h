// A populated instance of any protocol payload, from its fields() alone (protocol/protocol.h), for
// the fuzz seeds and the table-wide round trip test: a third field visitor besides FieldWriter and
// FieldReader that fills every field with a sample value, lists with two elements. The values are
// chosen so that every payload of the table passes its own checks (ranks increasing, slots and
// world ranks in range): ints count up from 0 in visiting order, int lists are {0, 1}, unsigned
// 32-bit fields (Hello's protocol version) keep their defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/protocol.h"

namespace wsync::test {

class SampleFiller {
 public:
  static constexpr bool kReading = true;

  void u8(uint8_t& x) { x = 1; }
  void flag(bool& b) { b = true; }
  void fixed32(uint32_t& x) { x = 0x01234567u; }
  void fixed64(uint64_t& x) { x = 0x0123456789abcdefULL; }
  void u64(uint64_t& x) { x = 42; }
  void u32(uint32_t& /*x*/) {}
  void i64(int64_t& x) { x = next_++; }
  void i32(int32_t& x) { x = next_++; }
  void count32(int32_t& x, uint64_t /*max*/) { x = 1; }
  template <class E>
  void enumeration(E& e, uint64_t max) {
    e = static_cast<E>(max);
  }
  template <class E>
  void enum8(E& e, uint8_t max) {
    e = static_cast<E>(max);
  }
  void str(std::string& s, size_t /*max_bytes*/) { s = "sample"; }
  void bytes(std::vector<uint8_t>& b, uint64_t /*max_bytes*/) { b = {1, 2, 3}; }
  void raw(void* /*p*/, size_t /*n*/) {}
  void i32s(std::vector<int32_t>& v, uint64_t /*max_count*/) { v = {0, 1}; }
  void u64s(std::vector<uint64_t>& v, uint64_t /*max_count*/) { v = {0, 4096}; }
  template <class T, class F>
  void list(std::vector<T>& v, uint64_t /*max_count*/, F&& each, size_t /*min_bytes_each*/ = 1) {
    v.resize(2);
    for (T& x : v)
      each(*this, x);
  }
  template <class T>
  void list(std::vector<T>& v, uint64_t max_count) {
    list(v, max_count, [](SampleFiller& f, T& x) { T::fields(f, x); });
  }
  template <class F>
  void extension(bool& present, uint8_t /*format*/, F&& fields) {
    present = true;
    fields(*this);
  }
  template <class Cond, class Fail>
  void check(Cond&& /*cond*/, Fail&& /*fail*/) {}

 private:
  int32_t next_ = 0;
};

template <class M>
M samplePayload() {
  M m{};
  SampleFiller f;
  M::fields(f, m);
  return m;
}

}  // namespace wsync::test
