// Peer cold start (protocol/protocol.h, "Peer cold start"): a replica that finished joining is
// filled with the newest ready version from a running replica's ranks, over the data plane, before
// it takes part in versions. Runs on the coordinator's event thread.
//
// An attempt: Prepare(v, slot) to the joiner's ranks -> every Prepared; ColdFill to each source
// rank with writes -> every ColdFillDone; Ready(v, slot) to the joiner's ranks -> every Readied;
// then the sequencer gets the replica holding v in that slot. A failed attempt (a source rank no
// longer holds v, or failed) is retried from the newest ready version, at most
// kMaxColdStartAttempts times; a source replica dropped mid-fill (or dropped as stalled because
// its fill took more than half the job's timeout: checkJoinDeadlines) is replaced by another (the
// next attempt writes another slot of the joiner, since the dropped one's surviving ranks may
// still be finishing a write). Without a source, the cold start is given up: the joiner's ranks
// give their prepared slot back and the replica gets its first version from the trainers. The
// trainers go on publishing throughout (the joiner is not in the sequencer until it holds v), and
// a source rank's lease on v only keeps its replica from writing that one slot (skipped or waited
// for as any slow reader).
#include <algorithm>

#include "codec/plan_codec.h"
#include "coordinator/coordinator_impl.h"
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {
namespace {

using coordinator_internal::Clock;

// Attempts of one cold start before the replica gets its first version from the trainers.
constexpr int kMaxColdStartAttempts = 3;

std::string replicaName(int32_t id) {
  return "replica " + std::to_string(id);
}

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

std::vector<int32_t> Coordinator::Impl::liveRanksOf(int32_t replica) const {
  std::vector<int32_t> ranks;
  for (const Participant& p : participants_) {
    if (p.hello.role == Role::kRollout && p.hello.replica == replica && !p.dropped && p.connected &&
        p.committed && p.role_rank >= 0)
      ranks.push_back(p.role_rank);
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

bool Coordinator::Impl::inColdStart(const Participant& p) const {
  if (!p.joiner) return false;
  auto it = joining_.find(p.hello.replica);
  return it != joining_.end() && it->second.cold.has_value();
}

void Coordinator::Impl::startColdStart(JoiningReplica& g) {
  g.cold.emplace();
  g.cold->started = Clock::now();
  g.cold->slot = 0;
  retryColdStart(g);
}

void Coordinator::Impl::finishColdStart(JoiningReplica& g, uint64_t version, int32_t slot) {
  g.cold.reset();
  g.cold_done = true;
  g.ready_version = version;
  g.ready_slot = slot;
  maybeCompleteJoin(g.id);
}

// The next attempt: the running replica with the newest ready version (ties: the lowest id) whose
// layout fills the joiner without conversions; the joiner's ranks prepare a slot for its version.
void Coordinator::Impl::retryColdStart(JoiningReplica& g) {
  ColdStart& cold = *g.cold;
  const bool prepared = cold.attempts > 0;  // an attempt ends only once its Prepared all came
  if (cold.attempts >= kMaxColdStartAttempts) {
    return giveUpColdStart(
        g, std::to_string(cold.attempts) + " attempts failed, the last: " + cold.failure, prepared);
  }
  std::set<std::pair<uint64_t, int32_t>> holders;  // (ready version, replica)
  for (const Participant& p : participants_) {
    const int32_t id = p.hello.replica;
    if (p.hello.role != Role::kRollout || p.dropped || !sequencer_->hasReplica(id)) continue;
    if (const uint64_t v = sequencer_->readyVersion(id); v > 0) holders.insert({v, id});
  }
  std::vector<std::pair<uint64_t, int32_t>> order(holders.begin(), holders.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string why_not;
  for (const auto& [version, source] : order) {
    const std::vector<int32_t> ranks = liveRanksOf(source);
    std::vector<Registration> sources;
    Status s;
    for (int32_t r : ranks) {
      Result<Registration> reg = decodeRegistrationOf(rollout(r));
      if (!reg.isOk()) {
        s = reg.status();
        break;
      }
      sources.push_back(std::move(reg).value());
    }
    Result<Plan> plan = s.isOk() ? makeColdFillPlan(std::move(sources), g.registrations, g.ranks[0])
                                 : Result<Plan>(s);
    if (!plan.isOk()) {
      why_not +=
          (why_not.empty() ? "" : "; ") + replicaName(source) + ": " + plan.status().toString();
      continue;
    }
    cold.fill = ++last_fill_id_;
    cold.source = source;
    cold.version = version;
    cold.stage = ColdStart::Stage::kPreparing;
    cold.waiting = std::set<int32_t>(g.ranks.begin(), g.ranks.end());
    cold.source_lost = false;
    cold.failure.clear();
    cold.bytes = 0;
    cold.attempts += 1;
    cold.attempt_started = Clock::now();
    cold.source_ranks = ranks;
    log(replicaName(g.id) + " cold start, attempt " + std::to_string(cold.attempts) + ": version " +
        std::to_string(version) + " from " + replicaName(source) + " (" +
        std::to_string(plan->writes.size()) + " write ops, " +
        std::to_string(plan->stats.write_bytes) + " bytes) into slot " + std::to_string(cold.slot));
    cold.plan = std::move(plan).value();
    const auto prepare = encode(SlotMsg{version, cold.slot});
    for (int32_t r : g.ranks)
      sendTo(rollout(r), MessageType::kPrepare, prepare);
    return;
  }
  giveUpColdStart(g, order.empty() ? "no running replica holds a version yet" : why_not, prepared);
}

// Every joiner rank prepared the slot: each source rank with writes gets its ColdFill.
bool Coordinator::Impl::sendColdFills(JoiningReplica& g) {
  ColdStart& cold = *g.cold;
  cold.stage = ColdStart::Stage::kFilling;
  cold.waiting.clear();
  cold.fill_sent = Clock::now();
  for (size_t i = 0; i < cold.source_ranks.size(); ++i) {
    const RankPlan view = rankView(cold.plan, Role::kTrainer, static_cast<int32_t>(i));
    if (view.writes.empty()) continue;
    ColdFillMsg fill;
    fill.fill = cold.fill;
    fill.version = cold.version;
    fill.target_slot = cold.slot;
    fill.rank_plan = encodeRankPlan(view);
    for (int32_t peer : view.peers) {
      const Participant& q = rollout(peer);
      fill.peers.push_back({peer,
                            q.reg.transport,
                            q.reg.transport_address,
                            q.reg.slot_descriptors,
                            q.reg.buffer_byte_offsets,
                            {},
                            0,
                            0});
    }
    const int32_t source_rank = cold.source_ranks[i];
    cold.waiting.insert(source_rank);
    sendTo(rollout(source_rank), MessageType::kColdFill, encode(fill));
  }
  cold.plan = Plan();
  return !cold.waiting.empty();
}

void Coordinator::Impl::giveUpColdStart(JoiningReplica& g, const std::string& why, bool prepared) {
  log(replicaName(g.id) + ": no cold start (" + why + ")");
  if (prepared) {  // Go without a slot for this replica: its ranks give the prepared slot back
    GoMsg go{g.cold->version, std::vector<int32_t>(static_cast<size_t>(g.id) + 1, -1), {}};
    const auto payload = encode(go);
    for (int32_t r : g.ranks)
      sendTo(rollout(r), MessageType::kGo, payload);
  }
  finishColdStart(g, 0, -1);
}

Status Coordinator::Impl::onColdStartMessage(Participant& p, MessageType type,
                                             const std::vector<uint8_t>& payload) {
  JoiningReplica& g = joining_.at(p.hello.replica);
  ColdStart& cold = *g.cold;
  const auto refuse_join = [&](const Status& s) {
    abortJoin(g.id, s.withContext(nameOf(p) + " in its cold start"));
    return Status::ok();  // the job goes on without the joiner
  };
  if (type == MessageType::kPrepared) {
    SlotMsg m;
    if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
    if (cold.stage != ColdStart::Stage::kPreparing || m.version != cold.version ||
        m.slot != cold.slot || cold.waiting.erase(p.role_rank) == 0) {
      return refuse_join(protocolError("Prepared(" + std::to_string(m.version) + ", slot " +
                                       std::to_string(m.slot) + ") out of order"));
    }
    if (!cold.waiting.empty()) return Status::ok();
    if (cold.source_lost) {
      retryColdStart(g);
    } else if (!sendColdFills(g)) {  // nothing to write (an empty model): ready at once
      cold.stage = ColdStart::Stage::kReadying;
      cold.waiting = std::set<int32_t>(g.ranks.begin(), g.ranks.end());
      for (int32_t r : g.ranks)
        sendTo(rollout(r), MessageType::kReady, encode(SlotMsg{cold.version, cold.slot}));
    }
    return Status::ok();
  }
  if (type != MessageType::kReadied) {
    return refuse_join(protocolError(std::string("unexpected ") + messageTypeName(type)));
  }
  VersionMsg m;
  if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
  if (cold.stage != ColdStart::Stage::kReadying || m.version != cold.version ||
      cold.waiting.erase(p.role_rank) == 0) {
    return refuse_join(protocolError("Readied(" + std::to_string(m.version) + ") out of order"));
  }
  if (!cold.waiting.empty()) return Status::ok();
  log(replicaName(g.id) + " cold-started from " + replicaName(cold.source) + " with version " +
      std::to_string(cold.version) + ": " + std::to_string(cold.bytes) + " bytes in " +
      std::to_string(msSince(cold.attempt_started)) + " ms (attempt " +
      std::to_string(cold.attempts) + ", " + std::to_string(msSince(cold.started)) +
      " ms since its ranks committed)");
  finishColdStart(g, cold.version, cold.slot);
  return Status::ok();
}

// A source rank's answer. Answers of earlier attempts (and of dropped ranks) are ignored.
Status Coordinator::Impl::onColdFillDone(const Participant& p,
                                         const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kRollout) return protocolError("ColdFillDone from a trainer");
  ColdFillDoneMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  for (auto& [id, g] : joining_) {
    if (!g.cold || g.cold->fill != m.fill) continue;
    ColdStart& cold = *g.cold;
    if (cold.stage != ColdStart::Stage::kFilling || cold.waiting.erase(p.role_rank) == 0) {
      return protocolError("ColdFillDone for fill " + std::to_string(m.fill) + " out of order");
    }
    if (m.code != WSYNC_SUCCESS) {
      cold.failure = Status(m.code, m.message).withContext(nameOf(p)).toString();
    } else {
      cold.bytes += m.bytes;
    }
    if (!cold.waiting.empty()) return Status::ok();
    if (!cold.failure.empty()) {
      log(replicaName(id) + " cold start, attempt " + std::to_string(cold.attempts) +
          " failed: " + cold.failure);
      retryColdStart(g);
      return Status::ok();
    }
    cold.stage = ColdStart::Stage::kReadying;
    cold.waiting = std::set<int32_t>(g.ranks.begin(), g.ranks.end());
    const auto ready = encode(SlotMsg{cold.version, cold.slot});
    for (int32_t r : g.ranks)
      sendTo(rollout(r), MessageType::kReady, ready);
    return Status::ok();
  }
  return Status::ok();
}

void Coordinator::Impl::onColdStartSourceLost(int32_t replica) {
  std::vector<int32_t> affected;
  for (const auto& [id, g] : joining_) {
    if (g.cold && g.cold->source == replica && g.cold->stage != ColdStart::Stage::kReadying)
      affected.push_back(id);
  }
  for (int32_t id : affected) {
    auto it = joining_.find(id);
    if (it == joining_.end() || !it->second.cold) continue;
    JoiningReplica& g = it->second;
    ColdStart& cold = *g.cold;
    cold.failure = replicaName(replica) + ", its source, was dropped";
    cold.source_lost = true;
    if (cold.stage == ColdStart::Stage::kPreparing) continue;  // retried once every rank prepared
    // Mid-fill: the source's surviving ranks may still finish a write into the slot (they stop
    // at their next one), so the next attempt writes another slot.
    log(replicaName(id) + " cold start, attempt " + std::to_string(cold.attempts) +
        " failed: " + cold.failure);
    cold.waiting.clear();
    cold.slot = (cold.slot + 1) % g.num_slots;
    retryColdStart(g);
  }
}

}  // namespace wsync
