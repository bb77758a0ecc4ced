// Shared by the fuzz targets: a check that stops the fuzzer (a crash it reports and saves) when
// an invariant of a decoder does not hold. Not for other code.
#pragma once

#include <cstdio>
#include <cstdlib>

#define WSYNC_FUZZ_CHECK(cond)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
