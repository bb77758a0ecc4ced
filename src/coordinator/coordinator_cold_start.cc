// The coordinator's side of peer cold start (coordinator/cold_start.h has the protocol and the
// ColdStartTracker that owns its state): events are forwarded to the tracker, which is told what
// the running job offers as sources, and its output is sent, logged and acted on here. Runs on the
// coordinator's event thread.
#include <algorithm>

#include "coordinator/coordinator_impl.h"

namespace wsync {

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

ColdStartSources Coordinator::Impl::coldStartSources() const {
  ColdStartSources sources;
  sources.holders = [this] {
    std::set<std::pair<uint64_t, int32_t>> holders;  // (ready version, replica)
    for (const Participant& p : participants_) {
      const int32_t id = p.hello.replica;
      if (p.hello.role != Role::kRollout || p.dropped || !sequencer_->hasReplica(id)) continue;
      if (const uint64_t v = sequencer_->readyVersion(id); v > 0) holders.insert({v, id});
    }
    return holders;
  };
  sources.live_ranks = [this](int32_t replica) { return liveRanksOf(replica); };
  sources.registration = [this](int32_t rank) {
    return decodeRegistrationOf(participants_.rollout(rank));
  };
  return sources;
}

bool Coordinator::Impl::inColdStart(const Participant& p) const {
  return p.joiner && cold_starts_.active(p.hello.replica);
}

void Coordinator::Impl::startColdStart(JoiningReplica& g) {
  ColdStartJoiner joiner;
  joiner.replica = g.id;
  joiner.ranks = g.ranks;
  joiner.num_slots = g.num_slots;
  joiner.registrations = g.registrations;  // planned against once more per attempt
  joiner.held_version = g.ready_version;   // a catch-up keeps what it holds
  joiner.held_slot = g.ready_slot;
  for (int32_t r : g.ranks) {
    const RegisterMsg& reg = rollout(r).reg;
    joiner.peers[r] = {r,
                       reg.transport,
                       reg.transport_address,
                       reg.slot_descriptors,
                       reg.buffer_byte_offsets,
                       {},
                       0,
                       0};
  }
  Result<ColdStartOutput> out =
      cold_starts_.start(std::move(joiner), coldStartSources(), Clock::now());
  if (!out.isOk()) return abortJoin(g.id, out.status());
  applyColdStart(out.value());
}

void Coordinator::Impl::applyColdStart(const ColdStartOutput& out) {
  for (const ColdStartMessage& m : out.messages) {
    const std::vector<uint8_t> payload = m.encodedPayload();
    for (int32_t r : m.to)
      sendTo(rollout(r), m.type, payload);
  }
  for (const std::string& note : out.notes)
    log(note);
  for (const ColdStartResult& result : out.finished) {
    auto it = joining_.find(result.replica);
    if (it == joining_.end()) continue;
    JoiningReplica& g = it->second;
    g.cold_done = true;
    if (g.catch_ups > 0 && result.version <= g.ready_version) g.catch_up_stuck = true;
    g.ready_version = result.version;
    g.ready_slot = result.slot;
    maybeCompleteJoin(g.id);
  }
}

Status Coordinator::Impl::onColdStartMessage(Participant& p, MessageType type,
                                             const std::vector<uint8_t>& payload) {
  const int32_t replica = p.hello.replica;
  const auto refuse_join = [&](const Status& s) {
    abortJoin(replica, s.withContext(nameOf(p) + " in its cold start"));
    return Status::ok();  // the job goes on without the joiner
  };
  Result<ColdStartOutput> out = ColdStartOutput();
  if (type == MessageType::kPrepared) {
    SlotMsg m;
    if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
    out = cold_starts_.onPrepared(replica, p.role_rank, m, coldStartSources(), Clock::now());
  } else if (type == MessageType::kReadied) {
    VersionMsg m;
    if (Status s = decode(payload, m); !s.isOk()) return refuse_join(s);
    out = cold_starts_.onReadied(replica, p.role_rank, m, Clock::now());
  } else {
    return refuse_join(protocolError(std::string("unexpected ") + messageTypeName(type)));
  }
  if (!out.isOk()) return refuse_join(out.status());
  applyColdStart(out.value());
  return Status::ok();
}

Status Coordinator::Impl::onColdFillDone(const Participant& p,
                                         const std::vector<uint8_t>& payload) {
  if (p.hello.role != Role::kRollout) return protocolError("ColdFillDone from a trainer");
  ColdFillDoneMsg m;
  WSYNC_RETURN_IF_ERROR(decode(payload, m));
  Result<ColdStartOutput> out =
      cold_starts_.onFillDone(p.role_rank, m, coldStartSources(), Clock::now());
  if (!out.isOk()) return out.status();
  applyColdStart(out.value());
  return Status::ok();
}

void Coordinator::Impl::onColdStartSourceLost(int32_t replica) {
  applyColdStart(cold_starts_.onSourceLost(replica, coldStartSources(), Clock::now()));
}

}  // namespace wsync
