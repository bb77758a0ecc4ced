// The transfer planner: from every rank's Registration to the static Plan (broadcast groups plus
// one-sided write ops, balanced across trainer senders), and each rank's part of it.
//
// Contract of makePlan (run by the coordinator at commit; docs/architecture.md):
//  - Tensors are unified by name over all registrations; every declaration of a name must have the
//    same global shape (else MISMATCH naming the tensor, both ranks and both shapes). A rollout
//    piece of a tensor no trainer declares is a MISMATCH naming the tensor and the rollout rank.
//  - Every piece must be well formed (INVALID_ARGUMENT naming rank, buffer, tensor): a declared
//    tensor, ranks equal to the tensor's (<= kMaxRank), its box inside the global shape, strides
//    >= 0 with innermost stride 1, and every element inside [0, num_elements) of its buffer.
//    Pieces with an empty box are accepted and ignored.
//  - Every trainer dtype of a tensor must convert (canConvert) into the dtype of every rollout
//    buffer that wants part of it (else MISMATCH naming tensor, ranks, dtypes).
//  - Trainer pieces of one tensor with identical boxes form one "source box" whose holders are
//    alternative senders (data-parallel replicas). Partially overlapping source boxes are
//    resolved: the one whose lowest holder (rank, buffer, piece) comes first owns the overlap,
//    later ones lose it (box difference). So every wanted element has exactly one source box.
//  - A rollout piece whose box equals a source box, laid out row-major-contiguous over the box on
//    the rollout and on at least one holder, joins the BroadcastGroup of (tensor, box, replica,
//    destination dtype) when options.allow_broadcast; a rank that wants the same box twice gets
//    the second copy by writes. Every other piece is served by write ops: one or more Regions
//    (<= 3 dims after merging dims contiguous on both sides) per intersection with the resolved
//    source boxes. Ops with the same ranks, buffers and dtypes whose 1-D regions are contiguous on
//    both sides are merged (across tensors only when neither dtype is float8, whose scales are
//    per tensor); a merged op names the first tensor it covers.
//  - Every wanted element must be provided (else MISMATCH naming tensor, rollout rank, its box and
//    a missing box with its first element).
//  - Senders are balanced: single-holder transfers are charged first, then every choice (a group's
//    sender, a write intersection's holder) in decreasing bytes (ties: generation order) goes to
//    the least-loaded holder (ties: lowest rank). Bytes are counted in the source dtype; a group
//    charges its sender once.
//  - Stats: broadcast_bytes / write_bytes are the bytes delivered (destination dtype, every
//    receiver of a group counted) by groups / writes, bytes_total their sum (= every wanted
//    element once); bytes_per_sender[t] is what trainer t sends in its own dtype (a group once);
//    replicas is the number of distinct rollout replica ids.
//  - Output: Plan::tensors is every declared tensor (trainers' in rank/declaration order, then
//    names only rollouts declare); groups in the order of (first wanting tensor, first receiver);
//    writes sorted by (src_rank, dst_rank, dst_buffer, dst_offset); Plan::shapes holds each
//    distinct strided shape once, in order of first use by the writes. Same input -> identical
//    plan.
// Cost: O(pieces + ops) time besides sorting each tensor's trainer pieces by box (skipped when
// already in order) and, when there are many distinct transfer sizes, the balancing choices.
// Memory: the plan (48 bytes per write op, allocated once at its size before merges across
// pieces, and faulted in with one call), plus working arrays of about 16
// bytes per non-empty piece and 1-4 bytes per balancing choice of a write (16 more per choice
// while the senders are chosen), plus a trainers x rollouts table of 8-byte counters. Large working
// arrays are mapped directly, so that they go back to the system as soon as they are freed.
// Kimi-K2 (256 trainer ranks, 128 rollout ranks, 6.2 M write ops) plans in about 0.75 s of one
// core on the 2-core CI machines, peaking at about 0.32 GiB above its 0.67 GiB of registrations.
// Thread-safe (a pure function of its arguments).
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"

namespace wsync {

struct PlannerOptions {
  bool allow_broadcast = true;  // false: every rollout piece goes by write ops
};

// trainers[i].rank must be i with role kTrainer; rollouts[j].rank must be j with role kRollout and
// replica >= 0 (INVALID_ARGUMENT otherwise).
Result<Plan> makePlan(const std::vector<Registration>& trainers,
                      const std::vector<Registration>& rollouts,
                      const PlannerOptions& options = {});

// The part of `plan` that rank `rank` of `role` needs: a trainer gets the groups it sends and the
// writes it is the source of; a rollout gets the groups it receives (whole, with every receiver)
// and the writes into it. Tensor indices are remapped to the RankPlan's own table (only the
// tensors referenced, in plan order); peers are the sorted distinct ranks of the other role it
// exchanges data with; the strided writes' shapes are copied into the RankPlan's own table (only
// those used, in order of first use); stats are the whole plan's. Cost: O(groups + log(writes) *
// trainers + the rank's writes). Thread-safe.
RankPlan rankView(const Plan& plan, Role role, int32_t rank);

}  // namespace wsync
