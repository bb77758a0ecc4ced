#include "coordinator/admission.h"

#include <algorithm>

namespace wsync {
namespace {

bool sameIdentity(const JobShape& job, const HelloMsg& a, const HelloMsg& b) {
  if (job.mpi_world_size > 0) return a.world_rank == b.world_rank;
  return a.role == b.role && a.role_rank == b.role_rank;
}

bool hostFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16;
}

// Whether trainer `rank` (host memory) can convert `from` into `to`.
bool hostConverts(DType from, DType to) {
  return from == to || (hostFloat(from) && hostFloat(to));
}

bool onHost(const std::vector<Registration>& trainers, int32_t rank) {
  if (rank < 0 || static_cast<size_t>(rank) >= trainers.size()) return false;
  const Registration& reg = trainers[static_cast<size_t>(rank)];
  return reg.buffers.empty() || reg.buffers.front().memory == MemoryKind::kHost;
}

}  // namespace

Status checkConversions(const Plan& plan, const std::vector<Registration>& trainers) {
  auto refuse = [&](int32_t tensor, int32_t trainer, DType from, DType to,
                    const std::string& rollouts) {
    return Status(WSYNC_ERR_UNSUPPORTED,
                  "tensor '" + plan.tensors[static_cast<size_t>(tensor)].name + "': trainer " +
                      std::to_string(trainer) + " holds it in host memory as " + dtypeName(from) +
                      " and rollout rank(s) " + rollouts + " want " + dtypeName(to) +
                      "; host memory converts only between float32, bfloat16 and float16 "
                      "(float8 conversion needs device memory)");
  };
  for (const WriteOp& op : plan.writes) {
    if (onHost(trainers, op.src_rank) && !hostConverts(op.src_dtype, op.dst_dtype))
      return refuse(op.tensor, op.src_rank, op.src_dtype, op.dst_dtype,
                    std::to_string(op.dst_rank));
  }
  for (const BroadcastGroup& g : plan.groups) {
    if (!onHost(trainers, g.src.rank) || hostConverts(g.src_dtype, g.dst_dtype)) continue;
    std::string ranks;
    for (const BufferSpan& d : g.dst)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(d.rank);
    return refuse(g.tensor, g.src.rank, g.src_dtype, g.dst_dtype, ranks);
  }
  return Status::ok();
}

std::string rankName(Role role, int32_t rank) {
  return std::string(roleName(role)) + " " + std::to_string(rank);
}

int expectedParticipants(const JobShape& job) {
  if (job.mpi_world_size > 0) return job.mpi_world_size - job.first_participant_world_rank;
  return job.num_trainers + job.num_rollouts;
}

Status checkHello(const JobShape& job, const HelloMsg& hello,
                  const std::vector<const HelloMsg*>& joined) {
  if (hello.role == Role::kRollout && hello.replica < 0) {
    return invalidArgument("rollout Hello without a replica index (set config.replica >= 0)");
  }
  if (hello.role == Role::kRollout && job.mpi_world_size <= 0 && job.num_rollouts == 0) {
    return invalidArgument(
        "the job has no fixed rollout rank (an elastic job: wsync-coordinator --rollouts 0); a "
        "rollout joins it with config.replica_size > 0 and config.replica_rank");
  }
  // Every replica has at least one rank: a replica index sizes per-replica tables, so it is bounded
  // by the number of ranks that can join before anything is sized by it.
  if (hello.role == Role::kRollout && hello.replica >= expectedParticipants(job)) {
    return invalidArgument("replica " + std::to_string(hello.replica) +
                           " is out of range: a job of " +
                           std::to_string(expectedParticipants(job)) +
                           " ranks has fewer replicas (replica must be < the number of rollout "
                           "ranks)");
  }
  for (const HelloMsg* q : joined) {
    if (sameIdentity(job, *q, hello)) {
      return invalidArgument("a rank with the same identity already joined (" +
                             rankName(q->role, q->role_rank) + ")");
    }
  }
  if (job.mpi_world_size > 0) {
    if (hello.world_rank < job.first_participant_world_rank ||
        hello.world_rank >= job.mpi_world_size) {
      return invalidArgument("world rank " + std::to_string(hello.world_rank) +
                             " is not in the job");
    }
    return Status::ok();
  }
  const int count = hello.role == Role::kTrainer ? job.num_trainers : job.num_rollouts;
  if (hello.role_rank < 0 || hello.role_rank >= count) {
    return invalidArgument(rankName(hello.role, hello.role_rank) +
                           " is out of range: the job has " + std::to_string(count) + " " +
                           roleName(hello.role) + " ranks");
  }
  return Status::ok();
}

std::string describeAbsentRanks(const JobShape& job, const std::vector<const HelloMsg*>& joined) {
  std::string missing = std::to_string(joined.size()) + " of " +
                        std::to_string(expectedParticipants(job)) + " ranks joined";
  std::string absent;
  auto add = [&absent](const std::string& name) { absent += (absent.empty() ? "" : ", ") + name; };
  if (job.mpi_world_size > 0) {
    std::vector<bool> seen(static_cast<size_t>(job.mpi_world_size), false);
    for (const HelloMsg* h : joined)
      seen[static_cast<size_t>(h->world_rank)] = true;
    for (int w = job.first_participant_world_rank; w < job.mpi_world_size; ++w) {
      if (!seen[static_cast<size_t>(w)]) add(std::to_string(w));
    }
    return missing + "; never arrived: MPI world rank(s) " + absent;
  }
  for (Role role : {Role::kTrainer, Role::kRollout}) {
    const int count = role == Role::kTrainer ? job.num_trainers : job.num_rollouts;
    for (int r = 0; r < count; ++r) {
      const bool seen = std::any_of(joined.begin(), joined.end(), [&](const HelloMsg* h) {
        return h->role == role && h->role_rank == r;
      });
      if (!seen) add(rankName(role, r));
    }
  }
  return missing + "; never arrived: " + absent;
}

Status checkExplicitJobSettings(const JobSettings& decided,
                                const std::vector<std::pair<std::string, const HelloMsg*>>& ranks) {
  std::vector<std::pair<std::string, JobSettings>> views{{"the coordinator", decided}};
  for (const auto& [name, hello] : ranks) {
    NamedSettingValues set;
    for (const NamedValueMsg& v : hello->job_settings)
      set.emplace_back(v.variable, v.value);
    Result<JobSettings> view = withJobSettings(decided, set);
    if (!view.isOk()) return view.status().withContext(name + "'s job-wide settings");
    views.emplace_back(name, *view);
  }
  return checkJobSettingsAgree(views);
}

}  // namespace wsync
