#include "layout/registration_checks.h"

namespace wsync {
namespace {

std::string field(const char* name, int d) {
  return std::string(name) + "[" + std::to_string(d) + "]";
}

}  // namespace

Status checkTensorDecl(const TensorDecl& tensor) {
  const std::string what = "tensor '" + tensor.name + "'";
  if (tensor.shape.rank > kMaxRank) {
    return invalidArgument(what + ": rank " + std::to_string(tensor.shape.rank) + " is above " +
                           std::to_string(kMaxRank));
  }
  int64_t elements = 1;
  for (int d = 0; d < tensor.shape.rank; ++d) {
    const int64_t n = tensor.shape[d];
    if (n <= 0) {
      return invalidArgument(what + ": " + field("global_shape", d) + " is " + std::to_string(n) +
                             " (must be > 0)");
    }
    if (__builtin_mul_overflow(elements, n, &elements) || elements > kMaxRegisteredElements) {
      return invalidArgument(what + ": global_shape " + tensor.shape.toString() +
                             " has more than 2^56 elements (" + field("global_shape", d) + " " +
                             std::to_string(n) + " overflows the element count)");
    }
  }
  return Status::ok();
}

Status checkPiece(const TensorDecl& tensor, const Piece& piece, int64_t num_elements,
                  const std::string& where) {
  const std::string what = where + ", tensor '" + tensor.name + "'";
  const int rank = tensor.shape.rank;
  if (piece.box.offset.rank != rank || piece.box.extent.rank != rank ||
      piece.local_strides.rank != rank) {
    return invalidArgument(what + ": box_offset, box_extent and local_strides have ranks " +
                           std::to_string(piece.box.offset.rank) + ", " +
                           std::to_string(piece.box.extent.rank) + " and " +
                           std::to_string(piece.local_strides.rank) + "; the tensor has rank " +
                           std::to_string(rank));
  }
  bool empty = false;
  for (int d = 0; d < rank; ++d) {
    const int64_t offset = piece.box.offset[d];
    const int64_t extent = piece.box.extent[d];
    if (offset < 0 || offset > tensor.shape[d]) {
      return invalidArgument(what + ": " + field("box_offset", d) + " " + std::to_string(offset) +
                             " is outside [0, " + std::to_string(tensor.shape[d]) +
                             "] (global_shape " + tensor.shape.toString() + ")");
    }
    if (extent < 0 || extent > tensor.shape[d] - offset) {  // no overflow: offset <= shape
      return invalidArgument(what + ": " + field("box_extent", d) + " " + std::to_string(extent) +
                             " from " + field("box_offset", d) + " " + std::to_string(offset) +
                             " runs past " + field("global_shape", d) + " " +
                             std::to_string(tensor.shape[d]));
    }
    empty = empty || extent == 0;
    if (piece.local_strides[d] < 0) {
      return invalidArgument(what + ": " + field("local_strides", d) + " " +
                             std::to_string(piece.local_strides[d]) + " is negative");
    }
  }
  if (rank > 0 && piece.local_strides[rank - 1] != 1) {
    return invalidArgument(what + ": the innermost local stride must be 1, got " +
                           std::to_string(piece.local_strides[rank - 1]));
  }
  if (empty) return Status::ok();
  if (piece.local_offset < 0 || piece.local_offset >= num_elements) {
    return invalidArgument(what + ": local_offset " + std::to_string(piece.local_offset) +
                           " is outside the buffer of " + std::to_string(num_elements) +
                           " elements");
  }
  int64_t last = piece.local_offset;  // the buffer element of the box's last element
  for (int d = 0; d < rank; ++d) {
    int64_t span = 0;
    if (__builtin_mul_overflow(piece.box.extent[d] - 1, piece.local_strides[d], &span) ||
        __builtin_add_overflow(last, span, &last) || last >= num_elements) {
      return invalidArgument(what + ": box_extent " + piece.box.extent.toString() +
                             " with local_strides " + piece.local_strides.toString() +
                             " from local_offset " + std::to_string(piece.local_offset) +
                             " reaches past the buffer of " + std::to_string(num_elements) +
                             " elements (at " + field("box_extent", d) + ")");
    }
  }
  return Status::ok();
}

Status checkRegistration(const Registration& reg) {
  for (const TensorDecl& t : reg.tensors)
    WSYNC_RETURN_IF_ERROR(checkTensorDecl(t));
  for (const LocalBuffer& b : reg.buffers) {
    const std::string where = "buffer '" + b.name + "'";
    if (b.num_elements < 0 || b.num_elements > kMaxRegisteredElements) {
      return invalidArgument(where + ": num_elements " + std::to_string(b.num_elements) +
                             " is outside [0, 2^56]");
    }
    for (const Piece& p : b.pieces) {
      if (p.tensor < 0 || static_cast<size_t>(p.tensor) >= reg.tensors.size()) {
        return invalidArgument(where + ": a piece names tensor index " + std::to_string(p.tensor) +
                               " of " + std::to_string(reg.tensors.size()));
      }
      WSYNC_RETURN_IF_ERROR(
          checkPiece(reg.tensors[static_cast<size_t>(p.tensor)], p, b.num_elements, where));
    }
  }
  return Status::ok();
}

}  // namespace wsync
