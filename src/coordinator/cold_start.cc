// Peer cold start of joining replicas (coordinator/cold_start.h).
#include "coordinator/cold_start.h"

#include <algorithm>

#include "codec/plan_codec.h"
#include "coordinator/admission.h"  // rankName
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {
namespace {

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

double msBetween(ColdStartTime t0, ColdStartTime t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

Status checkJoiner(const ColdStartJoiner& j) {
  const std::string what = "cold start of " + replicaName(j.replica);
  if (j.ranks.empty()) return invalidArgument(what + ": no ranks");
  if (j.num_slots < 1) return invalidArgument(what + ": no slots");
  if (j.held_version > 0 && (j.held_slot < 0 || j.held_slot >= j.num_slots || j.num_slots < 2)) {
    return invalidArgument(what + ": it holds version " + std::to_string(j.held_version) +
                           " in slot " + std::to_string(j.held_slot) + " of " +
                           std::to_string(j.num_slots) + " (a catch-up needs another slot)");
  }
  if (j.registrations.size() != j.ranks.size()) {
    return invalidArgument(what + ": " + std::to_string(j.registrations.size()) +
                           " registrations for " + std::to_string(j.ranks.size()) + " ranks");
  }
  for (size_t i = 0; i < j.ranks.size(); ++i) {
    const int32_t rank = j.ranks[i];
    if (rank != j.ranks[0] + static_cast<int32_t>(i)) {
      return invalidArgument(what + ": its ranks are not consecutive (rollout " +
                             std::to_string(rank) + " at replica rank " + std::to_string(i) + ")");
    }
    if (j.peers.count(rank) == 0) {
      return invalidArgument(what + ": no peer information for rollout " + std::to_string(rank));
    }
  }
  return Status::ok();
}

}  // namespace

uint64_t ColdStartTracker::currentFill(int32_t replica) const {
  auto it = fills_.find(replica);
  return it == fills_.end() ? 0 : it->second.fill;
}

Result<ColdStartOutput> ColdStartTracker::start(ColdStartJoiner joiner,
                                                const ColdStartSources& sources,
                                                ColdStartTime now) {
  WSYNC_RETURN_IF_ERROR(checkJoiner(joiner));
  const int32_t id = joiner.replica;
  if (fills_.count(id) != 0) {
    return invalidArgument(replicaName(id) + " is in a cold start already");
  }
  Fill& f = fills_[id];
  f.joiner = std::move(joiner);
  f.started = now;
  f.slot = f.joiner.held_version > 0 ? nextSlot(f.joiner, f.joiner.held_slot) : 0;
  ColdStartOutput out;
  retry(f, sources, now, out);
  return out;
}

int32_t ColdStartTracker::nextSlot(const ColdStartJoiner& j, int32_t slot) {
  int32_t next = (slot + 1) % j.num_slots;
  if (j.held_version > 0 && next == j.held_slot) next = (next + 1) % j.num_slots;
  return next;
}

void ColdStartTracker::finish(Fill& f, uint64_t version, int32_t slot, ColdStartOutput& out) {
  out.finished.push_back({f.joiner.replica, version, slot});
  fills_.erase(f.joiner.replica);
}

// The next attempt: the running replica with the newest ready version (ties: the lowest id) whose
// layout fills the joiner without conversions; the joiner's ranks prepare a slot for its version.
void ColdStartTracker::retry(Fill& f, const ColdStartSources& sources, ColdStartTime now,
                             ColdStartOutput& out) {
  const bool prepared = f.attempts > 0;  // an attempt ends only once its Prepared all came
  if (f.attempts >= options_.max_attempts) {
    return giveUp(f, std::to_string(f.attempts) + " attempts failed, the last: " + f.failure,
                  prepared, out);
  }
  const std::set<std::pair<uint64_t, int32_t>> holders = sources.holders();
  std::vector<std::pair<uint64_t, int32_t>> order(holders.begin(), holders.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string why_not;
  const uint64_t held = f.joiner.held_version;
  for (const auto& [version, source] : order) {
    if (version <= held) break;  // order is newest first: a catch-up takes only newer versions
    const std::vector<int32_t> ranks = sources.live_ranks(source);
    std::vector<Registration> senders;
    Status s;
    for (int32_t r : ranks) {
      Result<Registration> reg = sources.registration(r);
      if (!reg.isOk()) {
        s = reg.status();
        break;
      }
      senders.push_back(std::move(reg).value());
    }
    Result<Plan> plan =
        s.isOk() ? makeColdFillPlan(std::move(senders), f.joiner.registrations, f.joiner.ranks[0])
                 : Result<Plan>(s);
    if (!plan.isOk()) {
      why_not +=
          (why_not.empty() ? "" : "; ") + replicaName(source) + ": " + plan.status().toString();
      continue;
    }
    f.fill = ++last_fill_id_;
    f.source = source;
    f.version = version;
    f.stage = Fill::Stage::kPreparing;
    f.waiting = std::set<int32_t>(f.joiner.ranks.begin(), f.joiner.ranks.end());
    f.source_lost = false;
    f.failure.clear();
    f.bytes = 0;
    f.attempts += 1;
    f.attempt_started = now;
    f.source_ranks = ranks;
    out.notes.push_back(
        replicaName(f.joiner.replica) + (held > 0 ? " catch-up" : " cold start") + ", attempt " +
        std::to_string(f.attempts) + ": version " + std::to_string(version) + " from " +
        replicaName(source) + " (" + std::to_string(plan->writes.size()) + " write ops, " +
        std::to_string(plan->stats.write_bytes) + " bytes) into slot " + std::to_string(f.slot));
    f.plan = std::move(plan).value();
    out.messages.push_back({MessageType::kPrepare, f.joiner.ranks, SlotMsg{version, f.slot}});
    return;
  }
  if (why_not.empty()) {
    why_not = held > 0 ? "no running replica holds a version newer than " + std::to_string(held)
                       : "no running replica holds a version yet";
  }
  giveUp(f, why_not, prepared, out);
}

bool ColdStartTracker::sendFills(Fill& f, ColdStartTime now, ColdStartOutput& out) {
  f.stage = Fill::Stage::kFilling;
  f.waiting.clear();
  f.fill_sent = now;
  for (size_t i = 0; i < f.source_ranks.size(); ++i) {
    const RankPlan view = rankView(f.plan, Role::kTrainer, static_cast<int32_t>(i));
    if (view.writes.empty()) continue;
    ColdFillMsg fill;
    fill.fill = f.fill;
    fill.version = f.version;
    fill.target_slot = f.slot;
    fill.rank_plan = encodeRankPlan(view);
    for (int32_t peer : view.peers)
      fill.peers.push_back(f.joiner.peers.at(peer));  // the joiner's ranks (checked at start)
    const int32_t source_rank = f.source_ranks[i];
    f.waiting.insert(source_rank);
    out.messages.push_back({MessageType::kColdFill, {source_rank}, std::move(fill)});
  }
  f.plan = Plan();
  return !f.waiting.empty();
}

void ColdStartTracker::sendReady(Fill& f, ColdStartOutput& out) {
  f.stage = Fill::Stage::kReadying;
  f.waiting = std::set<int32_t>(f.joiner.ranks.begin(), f.joiner.ranks.end());
  out.messages.push_back({MessageType::kReady, f.joiner.ranks, SlotMsg{f.version, f.slot}});
}

void ColdStartTracker::giveUp(Fill& f, const std::string& why, bool prepared,
                              ColdStartOutput& out) {
  const int32_t id = f.joiner.replica;
  out.notes.push_back(replicaName(id) +
                      (f.joiner.held_version > 0 ? ": no catch-up (" : ": no cold start (") + why +
                      ")");
  if (prepared) {  // Go without a slot for this replica: its ranks give the prepared slot back
    GoMsg go{f.version, std::vector<int32_t>(static_cast<size_t>(id) + 1, -1), {}};
    out.messages.push_back({MessageType::kGo, f.joiner.ranks, std::move(go)});
  }
  finish(f, f.joiner.held_version, f.joiner.held_slot, out);
}

Result<ColdStartOutput> ColdStartTracker::onPrepared(int32_t replica, int32_t rank,
                                                     const SlotMsg& m,
                                                     const ColdStartSources& sources,
                                                     ColdStartTime now) {
  auto it = fills_.find(replica);
  if (it == fills_.end() || it->second.stage != Fill::Stage::kPreparing ||
      m.version != it->second.version || m.slot != it->second.slot ||
      it->second.waiting.count(rank) == 0) {
    return protocolError("Prepared(" + std::to_string(m.version) + ", slot " +
                         std::to_string(m.slot) + ") out of order");
  }
  Fill& f = it->second;
  f.waiting.erase(rank);
  ColdStartOutput out;
  if (!f.waiting.empty()) return out;
  if (f.source_lost) {
    retry(f, sources, now, out);
  } else if (!sendFills(f, now, out)) {  // nothing to write (an empty model): ready at once
    sendReady(f, out);
  }
  return out;
}

Result<ColdStartOutput> ColdStartTracker::onReadied(int32_t replica, int32_t rank,
                                                    const VersionMsg& m, ColdStartTime now) {
  auto it = fills_.find(replica);
  if (it == fills_.end() || it->second.stage != Fill::Stage::kReadying ||
      m.version != it->second.version || it->second.waiting.count(rank) == 0) {
    return protocolError("Readied(" + std::to_string(m.version) + ") out of order");
  }
  Fill& f = it->second;
  f.waiting.erase(rank);
  ColdStartOutput out;
  if (!f.waiting.empty()) return out;
  const char* what = f.joiner.held_version > 0 ? " caught up from " : " cold-started from ";
  out.notes.push_back(replicaName(replica) + what + replicaName(f.source) + " with version " +
                      std::to_string(f.version) + ": " + std::to_string(f.bytes) + " bytes in " +
                      std::to_string(msBetween(f.attempt_started, now)) + " ms (attempt " +
                      std::to_string(f.attempts) + ", " +
                      std::to_string(msBetween(f.started, now)) + " ms since its ranks committed)");
  finish(f, f.version, f.slot, out);
  return out;
}

Result<ColdStartOutput> ColdStartTracker::onFillDone(int32_t rank, const ColdFillDoneMsg& m,
                                                     const ColdStartSources& sources,
                                                     ColdStartTime now) {
  ColdStartOutput out;
  auto it = std::find_if(fills_.begin(), fills_.end(),
                         [&](const auto& entry) { return entry.second.fill == m.fill; });
  if (it == fills_.end()) return out;  // an earlier attempt's, or a forgotten cold start's
  Fill& f = it->second;
  if (f.stage != Fill::Stage::kFilling || f.waiting.erase(rank) == 0) {
    return protocolError("ColdFillDone for fill " + std::to_string(m.fill) + " out of order");
  }
  if (m.code != WSYNC_SUCCESS) {
    f.failure = Status(m.code, m.message).withContext(rankName(Role::kRollout, rank)).toString();
  } else {
    f.bytes += m.bytes;
  }
  if (!f.waiting.empty()) return out;
  if (!f.failure.empty()) {
    out.notes.push_back(replicaName(f.joiner.replica) + " cold start, attempt " +
                        std::to_string(f.attempts) + " failed: " + f.failure);
    retry(f, sources, now, out);
    return out;
  }
  sendReady(f, out);
  return out;
}

ColdStartOutput ColdStartTracker::onSourceLost(int32_t replica, const ColdStartSources& sources,
                                               ColdStartTime now) {
  ColdStartOutput out;
  std::vector<int32_t> affected;
  for (const auto& [id, f] : fills_) {
    if (f.source == replica && f.stage != Fill::Stage::kReadying) affected.push_back(id);
  }
  for (int32_t id : affected) {
    auto it = fills_.find(id);
    if (it == fills_.end()) continue;
    Fill& f = it->second;
    f.failure = replicaName(replica) + ", its source, was dropped";
    f.source_lost = true;
    if (f.stage == Fill::Stage::kPreparing) continue;  // retried once every rank prepared
    // Mid-fill: the source's surviving ranks may still finish a write into the slot (they stop
    // at their next one), so the next attempt writes another slot.
    out.notes.push_back(replicaName(id) + " cold start, attempt " + std::to_string(f.attempts) +
                        " failed: " + f.failure);
    f.waiting.clear();
    const int32_t next = nextSlot(f.joiner, f.slot);
    if (next == f.slot) {  // a catch-up with 2 slots: the other one holds its held version
      giveUp(f, f.failure + ", and no other slot is free", /*prepared=*/true, out);
      continue;
    }
    f.slot = next;
    retry(f, sources, now, out);
  }
  return out;
}

ColdStartOutput ColdStartTracker::tick(ColdStartTime now) const {
  ColdStartOutput out;
  const auto half = options_.timeout / 2;
  for (const auto& [id, f] : fills_) {
    // A source that holds a fill past half the timeout (a fill moves a version's bytes, as
    // trainers do within the timeout) is stalled: the caller drops it, and the fill goes on from
    // another replica, in another slot, or the joiner's first version comes from the trainers.
    if (f.stage == Fill::Stage::kFilling && now - f.fill_sent >= half) {
      out.stalled_sources.emplace_back(
          f.source, "it did not finish its part of " + replicaName(id) + "'s cold start (version " +
                        std::to_string(f.version) + ") within " + std::to_string(half.count()) +
                        " ms (stalled)");
    }
    // Each attempt is bounded; writers may still be busy, so the join ends.
    if (now - f.attempt_started < options_.timeout) continue;
    out.overdue.emplace_back(id, "its cold start from " + replicaName(f.source) + " (version " +
                                     std::to_string(f.version) + ", attempt " +
                                     std::to_string(f.attempts) + ") did not complete");
  }
  return out;
}

}  // namespace wsync
