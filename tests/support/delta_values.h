// The element values of the delta-version tests (tests/mp/delta_test.cc, tests/unit/
// delta_job_test.cc): each version touches about 1 % of the elements (and every element in
// version `every_element_version`, when not 0), so consecutive versions differ in few elements.
#pragma once

#include <cstdint>
#include <cstring>

namespace wsync_test {

// splitmix64's finalizer: a well-mixed 64-bit value of `x`.
inline uint64_t mixBits(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element `i` at `version`: a small whole number (exact in bfloat16) that grows by one in each
// version that touches it.
inline float deltaValueOf(int64_t i, uint64_t version, uint64_t every_element_version = 0) {
  int touches = 0;
  for (uint64_t k = 1; k <= version; ++k)
    touches +=
        k == every_element_version || mixBits(static_cast<uint64_t>(i) * 1000003u + k) % 100 == 0;
  return static_cast<float>(i % 97 + touches);
}

// The float a bfloat16 bit pattern stands for.
inline float floatOfBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace wsync_test
