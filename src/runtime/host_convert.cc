#include "runtime/host_convert.h"

#include <Eigen/Core>
#include <cstring>

namespace wsync {
namespace {

template <typename From, typename To>
void castArray(const void* src, void* dst, int64_t count) {
  Eigen::Map<const Eigen::Array<From, Eigen::Dynamic, 1>> in(static_cast<const From*>(src), count);
  Eigen::Map<Eigen::Array<To, Eigen::Dynamic, 1>> out(static_cast<To*>(dst), count);
  out = in.template cast<To>();
}

template <typename From>
Status castFrom(const void* src, void* dst, DType to, int64_t count) {
  switch (to) {
    case DType::kFloat32:
      castArray<From, float>(src, dst, count);
      return Status::ok();
    case DType::kBFloat16:
      castArray<From, Eigen::bfloat16>(src, dst, count);
      return Status::ok();
    case DType::kFloat16:
      castArray<From, Eigen::half>(src, dst, count);
      return Status::ok();
    default:
      return {WSYNC_ERR_UNSUPPORTED, "no host conversion into " + std::string(dtypeName(to))};
  }
}

bool isHostFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

}  // namespace

bool hostCanConvert(DType from, DType to) {
  return from == to || (isHostFloat(from) && isHostFloat(to));
}

Status convertHost(const void* src, DType from, void* dst, DType to, int64_t count) {
  if (count <= 0) return Status::ok();
  if (from == to) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtypeSize(from));
    return Status::ok();
  }
  switch (from) {
    case DType::kFloat32:
      return castFrom<float>(src, dst, to, count);
    case DType::kBFloat16:
      return castFrom<Eigen::bfloat16>(src, dst, to, count);
    case DType::kFloat16:
      return castFrom<Eigen::half>(src, dst, to, count);
    default:
      return {WSYNC_ERR_UNSUPPORTED,
              std::string("no host conversion from ") + dtypeName(from) + " to " + dtypeName(to)};
  }
}

}  // namespace wsync
