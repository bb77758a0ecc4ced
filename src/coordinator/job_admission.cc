#include "coordinator/job_admission.h"

#include <algorithm>
#include <utility>

#include "coordinator/delta_assign.h"

namespace wsync {

JobAdmission::JobAdmission(JobAdmissionOptions options, ParticipantTable& participants,
                           CoordinatorWire& wire)
    : options_(options), participants_(participants), wire_(wire) {}

std::vector<const HelloMsg*> JobAdmission::joinedHellos() const {
  std::vector<const HelloMsg*> hellos;
  hellos.reserve(participants_.size());
  for (const Participant& p : participants_) {
    if (!p.joiner) hellos.push_back(&p.hello);
  }
  return hellos;
}

bool JobAdmission::onHello(ConnectionId conn, const HelloMsg& hello) {
  if (Status s = checkHello(options_.shape, hello, joinedHellos()); !s.isOk()) {
    wire_.log("refused a connection: " + s.toString());
    wire_.refuse(conn, s);
    return false;
  }
  Participant p;
  p.conn = conn;
  p.hello = hello;
  p.role_rank = hello.role_rank;
  participants_.admit(std::move(p));
  return static_cast<int>(joinedHellos().size()) == expectedParticipants(options_.shape);
}

Status JobAdmission::admitAll() {
  const bool mpi_job = options_.shape.mpi_world_size > 0;
  std::vector<size_t> order;
  for (size_t i = 0; i < participants_.size(); ++i) {
    if (!participants_[i].joiner) order.push_back(i);
  }
  if (mpi_job) {
    std::sort(order.begin(), order.end(), [this](size_t a, size_t b) {
      return participants_[a].hello.world_rank < participants_[b].hello.world_rank;
    });
    int32_t next[2] = {0, 0};
    for (size_t i : order) {
      Participant& p = participants_[i];
      p.role_rank = next[static_cast<int>(p.hello.role)]++;
    }
  }
  std::vector<int32_t> by_rank[2];  // participants_ index by trainer rank, by rollout rank
  for (size_t i : order) {
    auto& index = by_rank[static_cast<int>(participants_[i].hello.role)];
    const auto r = static_cast<size_t>(participants_[i].role_rank);
    if (index.size() <= r) index.resize(r + 1, -1);
    index[r] = static_cast<int32_t>(i);
  }
  participants_.assignRanks(std::move(by_rank[static_cast<int>(Role::kTrainer)]),
                            std::move(by_rank[static_cast<int>(Role::kRollout)]));
  WSYNC_RETURN_IF_ERROR(checkRanksJobSettings());
  if (participants_.numTrainers() == 0) return invalidUsage("the job has no trainer rank");
  // An explicit-bootstrap job may have no fixed rollout rank (num_rollouts 0): every replica joins
  // at run time, and until one does, each version completes at once, ready on no replica.
  if (participants_.numRollouts() == 0 && mpi_job) {
    return invalidUsage(
        "the MPI job has no rollout rank (a job whose replicas all join at run time is "
        "bootstrapped explicitly: wsync-coordinator --trainers N --rollouts 0)");
  }
  WelcomeMsg welcome;
  welcome.num_trainers = participants_.numTrainers();
  welcome.num_rollouts = participants_.numRollouts();
  welcome.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  describeJobSettings(options_.job, welcome);
  if (mpi_job) {
    for (int32_t i : participants_.trainerIndices())
      welcome.trainer_world_ranks.push_back(participants_[static_cast<size_t>(i)].hello.world_rank);
    for (int32_t i : participants_.rolloutIndices())
      welcome.rollout_world_ranks.push_back(participants_[static_cast<size_t>(i)].hello.world_rank);
  }
  for (size_t i : order) {
    welcome.role_rank = participants_[i].role_rank;
    wire_.sendTo(participants_[i], MessageType::kWelcome, encode(welcome));
  }
  wire_.log("all " + std::to_string(order.size()) + " ranks joined (" +
            std::to_string(welcome.num_trainers) + " trainers, " +
            std::to_string(welcome.num_rollouts) + " rollouts)");
  return Status::ok();
}

Status JobAdmission::checkRanksJobSettings() const {
  std::vector<std::pair<std::string, const HelloMsg*>> named;
  for (const auto* index : {&participants_.trainerIndices(), &participants_.rolloutIndices()}) {
    for (int32_t i : *index) {
      if (i >= 0)
        named.emplace_back(participantName(participants_[static_cast<size_t>(i)]),
                           &participants_[static_cast<size_t>(i)].hello);
    }
  }
  return checkExplicitJobSettings(options_.job, named);
}

}  // namespace wsync
