// Planning a replica that joins the running job (coordinator/coordinator.h). The plan (and every
// rank's encoded view of it) is computed on a planner thread, so the event thread keeps sequencing
// versions meanwhile (a Kimi-K2 replica takes about a second to plan); the result is applied on
// the event thread, and only to the join that asked for it (plan_token).
#include <chrono>
#include <memory>
#include <thread>
#include <utility>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/delta_assign.h"
#include "plan/planner.h"
#include "plan/replica_plan.h"

namespace wsync {
namespace coordinator_internal {

// What the planner thread hands back: per trainer rank its encoded view (its writes to the
// replica) and the replica's ranks it writes to; per replica rank its encoded view.
struct JoinerPlan {
  size_t write_ops = 0;
  double plan_ms = 0;
  std::vector<std::vector<uint8_t>> trainer_views;
  std::vector<std::vector<int32_t>> trainer_peers;
  std::vector<std::vector<uint8_t>> rollout_views;  // by index in the replica's ranks
  DenseWriteBytes dense;  // per replica rank, each trainer's dense bytes (delta landing parts)
};

}  // namespace coordinator_internal

namespace {

using coordinator_internal::Clock;
using coordinator_internal::JoinerPlan;

// Runs on a planner thread: reads only its arguments.
Result<JoinerPlan> planReplica(const std::vector<Registration>& trainers,
                               std::vector<Registration> rollouts,
                               const std::vector<int32_t>& ranks, int32_t num_trainers) {
  const auto t0 = Clock::now();
  Result<Plan> plan = makeReplicaPlan(trainers, std::move(rollouts), ranks[0]);
  if (!plan.isOk()) return plan.status().withContext("planning the replica");
  JoinerPlan out;
  out.plan_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  out.write_ops = plan->writes.size();
  out.dense = denseWriteBytes(*plan, num_trainers);
  for (int32_t t = 0; t < num_trainers; ++t) {
    const RankPlan view = rankView(*plan, Role::kTrainer, t);
    out.trainer_views.push_back(encodeRankPlan(view));
    out.trainer_peers.push_back(view.peers);
  }
  for (int32_t r : ranks)
    out.rollout_views.push_back(encodeRankPlan(rankView(*plan, Role::kRollout, r)));
  return out;
}

}  // namespace

void Coordinator::Impl::planJoiner(JoiningReplica& g) {
  std::vector<Registration> rollouts;
  for (int32_t member : g.members) {
    const Participant& p = participants_[static_cast<size_t>(member)];
    if (Status s = checkJoinerScalings(p); !s.isOk()) return abortJoin(g.id, s);
    Result<Registration> reg = decodeRegistrationOf(p);
    if (!reg.isOk()) return abortJoin(g.id, reg.status());
    const auto slots = static_cast<int32_t>(p.reg.slot_descriptors.size());
    if (g.num_slots != 0 && slots != g.num_slots) {
      return abortJoin(g.id, invalidArgument(nameOf(p) + " has " + std::to_string(slots) +
                                             " slots, its replica's other ranks " +
                                             std::to_string(g.num_slots)));
    }
    g.num_slots = slots;
    rollouts.push_back(std::move(reg).value());
  }
  g.registrations = rollouts;  // a cold start plans against them again
  g.plan_token = ++last_plan_token_;
  // Reap planners that finished (their results are queued events already).
  std::erase_if(planners_, [](const std::future<void>& f) {
    return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  });
  const std::vector<Registration>* trainers = &trainer_registrations_;
  planners_.push_back(std::async(
      std::launch::async,
      [this, trainers, rollouts = std::move(rollouts), id = g.id, token = g.plan_token,
       ranks = g.ranks, n = numTrainers(), delay = opt_.debug_join_plan_delay]() mutable {
        if (delay.count() > 0) std::this_thread::sleep_for(delay);
        Result<JoinerPlan> result = planReplica(*trainers, std::move(rollouts), ranks, n);
        const Status status = result.status();
        std::shared_ptr<const JoinerPlan> plan;
        if (result.isOk()) plan = std::make_shared<const JoinerPlan>(std::move(result).value());
        Event e;
        e.kind = Event::kTask;
        e.task = [this, id, token, status, plan] { finishPlanJoiner(id, token, status, plan); };
        push(std::move(e));
      }));
}

// Sends every trainer its extension and the replica's ranks their assignments.
void Coordinator::Impl::finishPlanJoiner(int32_t replica, uint64_t token, const Status& status,
                                         const std::shared_ptr<const JoinerPlan>& plan) {
  auto it = joining_.find(replica);
  if (it == joining_.end() || it->second.plan_token != token) return;  // aborted meanwhile
  if (phase_ == Phase::kDone || phase_ == Phase::kFailed) return;
  JoiningReplica& g = it->second;
  if (!status.isOk()) return abortJoin(g.id, status);
  g.plan_ms = plan->plan_ms;
  g.write_ops = plan->write_ops;
  for (int32_t t = 0; t < numTrainers(); ++t) {
    PlanExtensionMsg ext;
    ext.replica = g.id;
    ext.ranks = g.ranks;
    ext.rank_plan = plan->trainer_views[static_cast<size_t>(t)];
    for (int32_t peer : plan->trainer_peers[static_cast<size_t>(t)]) {
      const Participant& q = rollout(peer);
      ext.peers.push_back({peer,
                           q.reg.transport,
                           q.reg.transport_address,
                           q.reg.slot_descriptors,
                           q.reg.buffer_byte_offsets,
                           {},
                           0,
                           0});
      assignDeltaLanding(opt_.job, plan->dense, t, trainer(t).reg.device_id.empty(),
                         q.reg.delta_landing, ext.peers.back());
    }
    std::vector<uint8_t> encoded = encode(ext);
    sendTo(trainer(t), MessageType::kPlanExtension, encoded);
    restart_.keepExtension(g.id, t, std::move(encoded));  // restarted trainers get it again
  }
  g.extended = true;
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    PlanAssignmentMsg msg;
    msg.rank_plan = plan->rollout_views[i];
    msg.replica_of_rollout = participants_.replicaOfRollout();
    sendTo(rollout(g.ranks[i]), MessageType::kPlanAssignment, encode(msg));
  }
}

}  // namespace wsync
