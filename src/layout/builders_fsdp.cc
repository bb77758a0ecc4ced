// Layout builders: FSDP flat ranges of one tensor and FlatParameters (flat ranges over
// several members, packed or at given offsets).
#include <algorithm>
#include <string>
#include <utility>

#include "layout/builders.h"
#include "layout/builders_internal.h"

namespace wsync {
using namespace layout_internal;  // the builders' shared helpers (builders_internal.h)

namespace {

// Visits the minimal boxes covering elements [b, e) of the row-major flattening of `shape`
// (0 <= b <= e <= numel, strides = rowMajorStrides(shape)): visit(box, flat index of the box's
// first element). At most 2*(rank-1)+1 boxes, in increasing flat order.
//  Ascending: from the innermost dim outwards, finish the partial block of each dim so that the
//  cursor reaches a multiple of the next outer stride (one box per dim). Stops at the first dim
//  whose block extends past e.
//  Descending: from that dim inwards, take whole indices of each dim up to e (one box per dim).
template <typename Visit>
void forEachFlatBox(const Dims& shape, const Dims& strides, int64_t b, int64_t e, Visit visit) {
  if (b >= e) return;
  const int rank = shape.rank;
  if (rank == 0) {
    visit(Box{}, b);
    return;
  }
  // The box at dim k covering [cur, end): indices of dims < k fixed by cur, dim k partial, dims
  // > k whole. Requires cur and end multiples of strides[k] inside one block of strides[k-1].
  auto boxAt = [&](int k, int64_t cur, int64_t end) {
    Box box;
    box.offset = Dims::zeros(rank);
    box.extent = shape;
    for (int d = 0; d <= k; ++d) {
      box.offset[d] = (cur / strides[d]) % shape[d];
      box.extent[d] = 1;
    }
    box.extent[k] = (end - cur) / strides[k];
    return box;
  };
  int64_t cur = b;
  int level = 0;  // where the descending phase starts
  for (int k = rank - 1; k >= 1; --k) {
    const int64_t block = strides[k - 1];  // = strides[k] * shape[k]
    const int64_t block_end = (cur + block - 1) / block * block;
    if (block_end > e) {
      level = k;
      break;
    }
    if (block_end > cur) {
      visit(boxAt(k, cur, block_end), cur);
      cur = block_end;
    }
  }
  for (int k = level; k < rank && cur < e; ++k) {
    const int64_t end = e / strides[k] * strides[k];
    if (end > cur) {
      visit(boxAt(k, cur, end), cur);
      cur = end;
    }
  }
}

int flatBoxCount(const Dims& shape, const Dims& strides, int64_t b, int64_t e) {
  int n = 0;
  forEachFlatBox(shape, strides, b, e, [&](const Box&, int64_t) { ++n; });
  return n;
}

// Appends the pieces of tensor `tensor` for its flat elements [b, e); element b lands at buffer
// element `base`.
void appendFlatPieces(int32_t tensor, const Dims& shape, const Dims& strides, int64_t b, int64_t e,
                      int64_t base, PieceList& out) {
  forEachFlatBox(shape, strides, b, e, [&](const Box& box, int64_t first) {
    Piece& p = out.emplace_back();
    p.tensor = tensor;
    p.box = box;
    p.local_offset = base + (first - b);
    p.local_strides = strides;
  });
}

// The argument checks of flatParameter: INVALID_ARGUMENT naming `fn`, the buffer, the member
// count and the range, or OK.
Status checkFlatParameter(const char* fn, const std::string& buffer_name,
                          const std::vector<FlatMember>& members, const int64_t* offsets,
                          size_t num_offsets, int64_t padded_numel, DType dtype, int64_t flat_begin,
                          int64_t flat_end, MemoryKind memory) {
  auto header = [&] {
    return std::string(fn) + "(buffer " + quoted(buffer_name) + ", " +
           std::to_string(members.size()) + " members, range [" + std::to_string(flat_begin) +
           ", " + std::to_string(flat_end) + "))";
  };
  auto invalid = [&](const std::string& why) { return invalidArgument(header() + ": " + why); };
  if (buffer_name.empty()) return invalid("empty buffer name");
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  if (members.empty()) return invalid("no members");
  if (offsets != nullptr && num_offsets != members.size()) {
    return invalid(std::to_string(num_offsets) + " member offsets for " +
                   std::to_string(members.size()) + " members");
  }
  int64_t end = 0;  // the previous member's end in the flat parameter
  for (size_t i = 0; i < members.size(); ++i) {
    const FlatMember& m = members[i];
    if (m.tensor.empty()) return invalid("member " + std::to_string(i) + " has an empty name");
    if (std::string why = shapeProblem(m.shape, 0); !why.empty()) {
      return invalid("member " + quoted(m.tensor) + " shape " + m.shape.toString() + ": " + why);
    }
    int64_t start = end;
    if (offsets != nullptr) {
      start = offsets[i];
      if (start < end) {
        return invalid("member " + quoted(m.tensor) + " starts at " + std::to_string(start) +
                       ", before the previous member's end " + std::to_string(end));
      }
    }
    if (addOverflows(start, m.shape.product(), &end)) {
      return invalid("member " + quoted(m.tensor) + " ends past int64");
    }
  }
  const int64_t total = offsets != nullptr ? padded_numel : end;
  if (offsets != nullptr && padded_numel < end) {
    return invalid("padded_numel " + std::to_string(padded_numel) +
                   " is below the last member's end " + std::to_string(end));
  }
  if (flat_begin < 0 || flat_begin > flat_end || flat_end > total) {
    return invalid("range is not inside [0, " + std::to_string(total) + ")");
  }
  if (const std::string* dup = duplicateName(
          members.size(), [&](size_t i) -> const std::string& { return members[i].tensor; })) {
    return invalid("member " + quoted(*dup) + " appears twice");
  }
  return Status::ok();
}

// The pieces of the (checked) members' elements inside [flat_begin, flat_end), member i declared
// as ids[i]; offsets as in flatParameter.
PieceList flatMemberPieces(const std::vector<FlatMember>& members, const int64_t* offsets,
                           int64_t flat_begin, int64_t flat_end, IdList& ids) {
  // Two passes over the members that intersect the range: count, then emit (exact reserve).
  auto forEachHeld = [&](auto visit) {
    int64_t start = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      if (offsets != nullptr) start = offsets[i];
      const int64_t numel = members[i].shape.product();
      if (start >= flat_end) break;
      const int64_t lo = std::max(flat_begin, start);
      const int64_t hi = std::min(flat_end, start + numel);
      if (lo < hi) {
        const Dims strides = rowMajorStrides(members[i].shape);
        visit(i, strides, lo - start, hi - start, lo - flat_begin);
      }
      start += numel;
    }
  };
  size_t count = 0;
  forEachHeld([&](size_t i, const Dims& strides, int64_t b, int64_t e, int64_t) {
    count += static_cast<size_t>(flatBoxCount(members[i].shape, strides, b, e));
  });
  PieceList pieces;
  pieces.reserve(count);
  forEachHeld([&](size_t i, const Dims& strides, int64_t b, int64_t e, int64_t base) {
    appendFlatPieces(ids[i], members[i].shape, strides, b, e, base, pieces);
  });
  return pieces;
}

// Shared by addFlatParameter (offsets == nullptr: members packed, padded_numel unused) and
// addFlatParameterWithOffsets.
Result<int32_t> flatParameter(Registration& reg, const char* fn, const std::string& buffer_name,
                              const std::vector<FlatMember>& members, const int64_t* offsets,
                              size_t num_offsets, int64_t padded_numel, DType dtype,
                              int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  WSYNC_RETURN_IF_ERROR(checkFlatParameter(fn, buffer_name, members, offsets, num_offsets,
                                           padded_numel, dtype, flat_begin, flat_end, memory));
  IdList ids(members.size());
  WSYNC_RETURN_IF_ERROR(declareAll(
      reg, fn, members.size(), [&](size_t i) -> const std::string& { return members[i].tensor; },
      [&](size_t i) -> const Dims& { return members[i].shape; }, ids));
  PieceList pieces = flatMemberPieces(members, offsets, flat_begin, flat_end, ids);
  return appendBuffer(reg, buffer_name, dtype, memory, flat_end - flat_begin, std::move(pieces));
}

}  // namespace

Result<int32_t> addFlatRange(Registration& reg, const std::string& tensor, const Dims& shape,
                             DType dtype, int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  auto invalid = [&](const std::string& why) {
    return invalidArgument("addFlatRange(tensor " + quoted(tensor) + ", shape " + shape.toString() +
                           ", range [" + std::to_string(flat_begin) + ", " +
                           std::to_string(flat_end) + ")): " + why);
  };
  if (tensor.empty()) return invalid("empty tensor name");
  if (std::string why = shapeProblem(shape, 0); !why.empty()) return invalid(why);
  if (std::string why = kindProblem(dtype, memory); !why.empty()) return invalid(why);
  const int64_t numel = shape.product();
  if (flat_begin < 0 || flat_begin > flat_end || flat_end > numel) {
    return invalid("range is not inside [0, " + std::to_string(numel) + ")");
  }
  WSYNC_ASSIGN_OR_RETURN(const int32_t id, declareOne(reg, "addFlatRange", tensor, shape));
  const Dims strides = rowMajorStrides(shape);
  PieceList pieces;
  pieces.reserve(static_cast<size_t>(flatBoxCount(shape, strides, flat_begin, flat_end)));
  appendFlatPieces(id, shape, strides, flat_begin, flat_end, 0, pieces);
  return appendBuffer(reg, tensor, dtype, memory, flat_end - flat_begin, std::move(pieces));
}

Result<int32_t> addFlatParameter(Registration& reg, const std::string& buffer_name,
                                 const std::vector<FlatMember>& members, DType dtype,
                                 int64_t flat_begin, int64_t flat_end, MemoryKind memory) {
  return flatParameter(reg, "addFlatParameter", buffer_name, members, nullptr, 0, 0, dtype,
                       flat_begin, flat_end, memory);
}

Result<int32_t> addFlatParameterWithOffsets(Registration& reg, const std::string& buffer_name,
                                            const std::vector<FlatMember>& members,
                                            const std::vector<int64_t>& member_offsets,
                                            int64_t padded_numel, DType dtype, int64_t flat_begin,
                                            int64_t flat_end, MemoryKind memory) {
  return flatParameter(reg, "addFlatParameterWithOffsets", buffer_name, members,
                       member_offsets.data(), member_offsets.size(), padded_numel, dtype,
                       flat_begin, flat_end, memory);
}

}  // namespace wsync
