// The values of a validation job's versions (wsync-cluster-rank): version 1 holds, at global
// element `flat` of a tensor, a small integer of the tensor's name and `flat` (exact in bfloat16);
// each later version v changes a deterministic pseudo-random subset of each tensor's elements:
// round(changed_share * elements) draws of a global index from a generator seeded by (tensor name,
// v), each giving its element a new small integer that differs from the old one (a draw that
// repeats an index changes it again). Every rank draws the whole sequence and applies the draws
// that fall in its own pieces, so trainers (any sharding) and rollouts (any layout) agree on every
// element of every version without talking: a rollout applies the same changes to its expected
// copy and compares bit for bit.
// Thread-safety: a VersionChanges is immutable after construction; apply() writes only `data`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/registration.h"

namespace wsync::cluster {

uint32_t tensorNameHash(const std::string& name);  // FNV-1a

// The version-1 value of global element `flat` of the tensor with name hash `tensor_hash`.
float initialValue(uint32_t tensor_hash, int64_t flat);

// Writes version 1 into (check = false) or counts the elements that differ from version 1 in
// (check = true) buffer `buf` of `reg` at `data` (float32 or bfloat16).
int64_t fillOrCheckInitial(const Registration& reg, const LocalBuffer& buf, void* data, bool check);

// Counts the elements of the pieces of `buf` whose bits differ between `a` and `b`.
int64_t countPieceMismatches(const Registration& reg, const LocalBuffer& buf, const void* a,
                             const void* b);

class VersionChanges {
 public:
  // `reg`: a rank's registration (kept by reference: it must outlive this object).
  VersionChanges(const Registration& reg, double changed_share);

  // Applies version `v`'s changes (v >= 2) to this rank's buffers, `data[b]` being buffer b of
  // the registration. Returns the number of draws that fell in this rank's pieces.
  int64_t apply(uint64_t v, const std::vector<void*>& data) const;

  double changedShare() const { return share_; }

 private:
  struct Holder {  // one piece of a tensor on this rank
    int32_t buffer;
    int32_t piece;
  };
  const Registration& reg_;
  double share_;
  std::vector<std::vector<Holder>> holders_;  // per tensor of reg_
};

}  // namespace wsync::cluster
