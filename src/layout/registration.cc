#include "layout/registration.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <memory>
#include <type_traits>

namespace wsync {

static_assert(std::is_trivially_copyable_v<Piece> && std::is_trivially_destructible_v<Piece>,
              "PieceList copies pieces as bytes");

PieceList::PieceList(std::initializer_list<Piece> pieces) {
  reserve(pieces.size());
  for (const Piece& p : pieces)
    push_back(p);
}

PieceList::PieceList(const PieceList& other) {
  reserve(other.size_);
  std::uninitialized_copy_n(other.data(), other.size_, data());
  size_ = other.size_;
}

// An empty list (inline, capacity 1) holds nothing to free: the move assignment does the move.
PieceList::PieceList(PieceList&& other) noexcept {
  *this = std::move(other);
}

PieceList& PieceList::operator=(const PieceList& other) {
  if (this != &other) {
    PieceList copy(other);
    *this = std::move(copy);
  }
  return *this;
}

PieceList& PieceList::operator=(PieceList&& other) noexcept {
  if (this != &other) {
    if (onHeap()) std::allocator<Piece>().deallocate(store_.many, capacity_);
    size_ = other.size_;
    capacity_ = other.capacity_;
    if (other.onHeap()) {
      store_.many = other.store_.many;
      other.store_.many = nullptr;
      other.capacity_ = 1;
    } else if (other.size_ == 1) {
      std::construct_at(&store_.one, other.store_.one);
    }
    other.size_ = 0;
  }
  return *this;
}

PieceList::~PieceList() {
  if (onHeap()) std::allocator<Piece>().deallocate(store_.many, capacity_);
}

void PieceList::reallocate(size_t capacity) {
  assert(capacity >= size_);
  // Past kMaxSize std::vector would throw length_error; such a list cannot be allocated anyway.
  if (capacity > kMaxSize) std::abort();
  if (capacity <= 1) {  // back inline (only from shrink_to_fit)
    if (!onHeap()) return;
    Piece* old = store_.many;
    const uint32_t old_capacity = capacity_;
    if (size_ == 1) {
      std::construct_at(&store_.one, old[0]);
    } else {
      store_.many = nullptr;
    }
    capacity_ = 1;
    std::allocator<Piece>().deallocate(old, old_capacity);
    return;
  }
  Piece* fresh = std::allocator<Piece>().allocate(capacity);
  std::uninitialized_copy_n(data(), size_, fresh);
  if (onHeap()) std::allocator<Piece>().deallocate(store_.many, capacity_);
  store_.many = fresh;
  capacity_ = static_cast<uint32_t>(capacity);
}

void PieceList::reserve(size_t n) {
  if (n > capacity_) reallocate(n);
}

void PieceList::resize(size_t n) {
  reserve(n);
  for (size_t i = size_; i < n; ++i)
    std::construct_at(data() + i);
  size_ = static_cast<uint32_t>(n);
}

void PieceList::push_back(const Piece& piece) {
  if (size_ == capacity_) {
    const Piece copy = piece;  // `piece` may live in this list
    reallocate(std::min(2 * static_cast<size_t>(capacity_), kMaxSize + 1));
    std::construct_at(data() + size_, copy);
  } else {
    std::construct_at(data() + size_, piece);
  }
  ++size_;
}

Piece& PieceList::emplace_back() {
  if (size_ == capacity_) reallocate(std::min(2 * static_cast<size_t>(capacity_), kMaxSize + 1));
  Piece* p = std::construct_at(data() + size_);
  ++size_;
  return *p;
}

void PieceList::shrink_to_fit() {
  if (size_ < capacity_) reallocate(size_);
}

const char* roleName(Role r) {
  return r == Role::kTrainer ? "trainer" : "rollout";
}

int32_t Registration::declareTensor(const std::string& name, const Dims& shape) {
  if (tensor_index_.size() != tensors.size()) {
    tensor_index_.clear();
    for (size_t i = 0; i < tensors.size(); ++i) {
      tensor_index_.emplace(tensors[i].name, static_cast<int32_t>(i));
    }
  }
  auto [it, inserted] = tensor_index_.emplace(name, static_cast<int32_t>(tensors.size()));
  if (!inserted) return tensors[static_cast<size_t>(it->second)].shape == shape ? it->second : -1;
  tensors.push_back({name, shape});
  return it->second;
}

}  // namespace wsync
