// What one rank tells the coordinator: the tensors it knows (global names and shapes) and its local
// buffers, each made of pieces. A piece says "elements [box] of global tensor T live in this buffer
// starting at local_offset, laid out with local_strides". One buffer with several pieces expresses
// fused tensors (qkv = q, k, v) and flat FSDP ranges (a flat range cut into row boxes); a buffer
// with one piece is the common case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "layout/box.h"
#include "layout/dtype.h"

namespace wsync {

enum class Role : uint8_t { kTrainer = 0, kRollout = 1 };
const char* roleName(Role r);  // "trainer" / "rollout"

// A global tensor as one rank declares it.
struct TensorDecl {
  std::string name;  // e.g. the Hugging Face name "model.layers.0.self_attn.q_proj.weight"
  Dims shape;        // the global (checkpoint) shape
};

struct Piece {
  int32_t tensor = -1;       // index into Registration::tensors
  Box box;                   // elements of the global tensor this piece holds
  int64_t local_offset = 0;  // elements from the start of the buffer to element box.offset
  Dims local_strides;        // per dim of the tensor, in elements; innermost must be 1
};

// The pieces of a LocalBuffer: the std::vector subset the library uses, storing a single piece
// inline (most buffers hold exactly one, and a large trainer job registers over a million
// buffers: no heap block per buffer). Iterators are pointers, invalidated as std::vector's are.
// At most kMaxSize pieces (growing past it aborts). Not thread-safe (like std::vector).
class PieceList {
 public:
  static constexpr size_t kMaxSize = UINT32_MAX;

  PieceList() noexcept {}
  explicit PieceList(size_t n) { resize(n); }  // n pieces Piece{}
  PieceList(std::initializer_list<Piece> pieces);
  PieceList(const PieceList& other);
  PieceList(PieceList&& other) noexcept;
  PieceList& operator=(const PieceList& other);
  PieceList& operator=(PieceList&& other) noexcept;
  ~PieceList();

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  Piece* data() { return onHeap() ? store_.many : &store_.one; }
  const Piece* data() const { return onHeap() ? store_.many : &store_.one; }
  Piece* begin() { return data(); }
  Piece* end() { return data() + size_; }
  const Piece* begin() const { return data(); }
  const Piece* end() const { return data() + size_; }
  Piece& operator[](size_t i) { return data()[i]; }
  const Piece& operator[](size_t i) const { return data()[i]; }
  Piece& front() { return data()[0]; }
  const Piece& front() const { return data()[0]; }
  Piece& back() { return data()[size_ - 1]; }
  const Piece& back() const { return data()[size_ - 1]; }

  void reserve(size_t n);
  void resize(size_t n);  // new pieces are Piece{}
  void clear() { size_ = 0; }
  void push_back(const Piece& piece);
  Piece& emplace_back();  // a Piece{} at the end
  void shrink_to_fit();

 private:
  bool onHeap() const { return capacity_ > 1; }
  void reallocate(size_t capacity);  // capacity >= size_

  union Store {
    Store() noexcept : many(nullptr) {}
    Piece one;    // capacity_ == 1
    Piece* many;  // capacity_ > 1
  } store_;
  uint32_t size_ = 0;
  uint32_t capacity_ = 1;
};

struct LocalBuffer {
  std::string name;  // unique within the rank; rollouts look buffers up by this name
  DType dtype = DType::kFloat32;
  MemoryKind memory = MemoryKind::kHost;
  int64_t num_elements = 0;  // the buffer's size; every piece must fall inside it
  PieceList pieces;
};

struct Registration {
  Role role = Role::kTrainer;
  int32_t rank = 0;      // index among the ranks of this role, 0-based
  int32_t replica = -1;  // rollouts: the replica (engine instance) this rank belongs to
  std::vector<TensorDecl> tensors;
  std::vector<LocalBuffer> buffers;

  // Convenience for builders and tests: the index of tensor `name`, declaring it when new.
  // Returns -1 (and declares nothing) when `name` is declared with a different shape.
  // O(1) amortized: keeps a name index that is rebuilt when `tensors` was changed directly.
  int32_t declareTensor(const std::string& name, const Dims& shape);

 private:
  std::unordered_map<std::string, int32_t> tensor_index_;  // a cache of `tensors`, not data
};

}  // namespace wsync
