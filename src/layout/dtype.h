// Element types: sizes, names, and which conversions the data plane performs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "wsync/wsync_types.h"

namespace wsync {

// Values equal the public wsync_dtype_t, so the C shim converts with a cast after validDType().
enum class DType : uint8_t {
  kFloat32 = WSYNC_DTYPE_FLOAT32,
  kBFloat16 = WSYNC_DTYPE_BFLOAT16,
  kFloat16 = WSYNC_DTYPE_FLOAT16,
  kFloat8E4M3 = WSYNC_DTYPE_FLOAT8_E4M3,
  kFloat8E5M2 = WSYNC_DTYPE_FLOAT8_E5M2,
  kInt8 = WSYNC_DTYPE_INT8,
  kInt16 = WSYNC_DTYPE_INT16,
  kInt32 = WSYNC_DTYPE_INT32,
  kInt64 = WSYNC_DTYPE_INT64,
  kUInt8 = WSYNC_DTYPE_UINT8,
  kBool = WSYNC_DTYPE_BOOL,
};
inline constexpr int kNumDTypes = WSYNC_DTYPE_COUNT_;

enum class MemoryKind : uint8_t { kHost = WSYNC_MEMORY_HOST, kDevice = WSYNC_MEMORY_DEVICE };

// Bytes per element.
size_t dtypeSize(DType t);
// Canonical lower-case name: "float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2",
// "int8", "int16", "int32", "int64", "uint8", "bool".
const char* dtypeName(DType t);
// Parses a canonical name, or the torch spellings ("torch.bfloat16", "bf16", "fp32", "half", ...).
std::optional<DType> parseDType(std::string_view name);
// True when `value` is one of the wsync_dtype_t values.
bool validDType(int value);
bool isFloatingPoint(DType t);
// True when the sender can convert `from` into `to`: identical types always; any floating type
// into any other floating type except float8 into the other float8 format (float8 targets take an
// optional per-tensor scale). Integer and bool types convert only to themselves.
bool canConvert(DType from, DType to);

const char* memoryKindName(MemoryKind m);

}  // namespace wsync
