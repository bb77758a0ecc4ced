#include "layout/dtype.h"

#include <array>
#include <string>

namespace wsync {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  const char* name;
  bool floating;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo = {{
    {DType::kFloat32, 4, "float32", true},
    {DType::kBFloat16, 2, "bfloat16", true},
    {DType::kFloat16, 2, "float16", true},
    {DType::kFloat8E4M3, 1, "float8_e4m3", true},
    {DType::kFloat8E5M2, 1, "float8_e5m2", true},
    {DType::kInt8, 1, "int8", false},
    {DType::kInt16, 2, "int16", false},
    {DType::kInt32, 4, "int32", false},
    {DType::kInt64, 8, "int64", false},
    {DType::kUInt8, 1, "uint8", false},
    {DType::kBool, 1, "bool", false},
}};

const DTypeInfo& info(DType t) {
  return kInfo[static_cast<size_t>(t)];
}

struct Alias {
  const char* name;
  DType type;
};
constexpr std::array<Alias, 14> kAliases = {{
    {"fp32", DType::kFloat32},
    {"float", DType::kFloat32},
    {"bf16", DType::kBFloat16},
    {"fp16", DType::kFloat16},
    {"half", DType::kFloat16},
    {"float8_e4m3fn", DType::kFloat8E4M3},
    {"fp8_e4m3", DType::kFloat8E4M3},
    {"float8_e5m2fn", DType::kFloat8E5M2},
    {"fp8_e5m2", DType::kFloat8E5M2},
    {"short", DType::kInt16},
    {"int", DType::kInt32},
    {"long", DType::kInt64},
    {"byte", DType::kUInt8},
    {"char", DType::kInt8},
}};

}  // namespace

size_t dtypeSize(DType t) {
  return info(t).size;
}
const char* dtypeName(DType t) {
  return info(t).name;
}
bool isFloatingPoint(DType t) {
  return info(t).floating;
}
bool validDType(int value) {
  return value >= 0 && value < kNumDTypes;
}

std::optional<DType> parseDType(std::string_view name) {
  constexpr std::string_view kTorchPrefix = "torch.";
  if (name.substr(0, kTorchPrefix.size()) == kTorchPrefix) name.remove_prefix(kTorchPrefix.size());
  for (const DTypeInfo& i : kInfo) {
    if (name == i.name) return i.type;
  }
  for (const Alias& a : kAliases) {
    if (name == a.name) return a.type;
  }
  return std::nullopt;
}

bool canConvert(DType from, DType to) {
  if (from == to) return true;
  const bool fp8_from = from == DType::kFloat8E4M3 || from == DType::kFloat8E5M2;
  const bool fp8_to = to == DType::kFloat8E4M3 || to == DType::kFloat8E5M2;
  // One float8 format into the other has no meaningful single scale: not supported.
  return isFloatingPoint(from) && isFloatingPoint(to) && !(fp8_from && fp8_to);
}

const char* memoryKindName(MemoryKind m) {
  return m == MemoryKind::kHost ? "host" : "device";
}

}  // namespace wsync
