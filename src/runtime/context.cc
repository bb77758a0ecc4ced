#include "runtime/context.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "layout/registration_checks.h"
#include "runtime/device_ops.h"
#include "runtime/rollout_context.h"
#include "runtime/trainer_context.h"
#include "transport/registry.h"

namespace wsync {
namespace {
// The most ranks of one role a job may have; bounds counts and indices before they size anything.
constexpr int32_t kMaxJobRanks = 1 << 16;
}  // namespace

Result<std::unique_ptr<Context>> Context::create(const ContextOptions& options) {
  if (options.timeout.count() <= 0) return invalidArgument("timeout_ms must be positive");
  for (const auto& [field, count] : {std::pair{"num_trainers", options.num_trainers},
                                     std::pair{"num_rollouts", options.num_rollouts}}) {
    if (count < 0 || count > kMaxJobRanks) {
      return invalidArgument(std::string(field) + " must be in [0, " +
                             std::to_string(kMaxJobRanks) + "], got " + std::to_string(count));
    }
  }
  if (options.role == Role::kRollout) {
    if (options.replica < 0) return invalidArgument("a rollout context needs replica >= 0");
    if (!options.use_mpi && options.replica_size == 0 && options.num_rollouts == 0) {
      return invalidArgument(
          "explicit bootstrap: num_rollouts is 0 (a job of no fixed rollout rank): a rollout "
          "joins it with replica_size > 0 and replica_rank");
    }
    // A replica has at least one rank, so its index is below the number of rollout ranks.
    const int32_t replica_bound =
        options.use_mpi || options.replica_size > 0 ? kMaxJobRanks : options.num_rollouts;
    if (options.replica >= replica_bound) {
      return invalidArgument("replica must be in [0, " + std::to_string(replica_bound) +
                             ") (below the number of rollout ranks), got " +
                             std::to_string(options.replica));
    }
    if (options.num_slots < 2 || options.num_slots > 64) {
      return invalidArgument("num_slots must be in [2, 64], got " +
                             std::to_string(options.num_slots));
    }
  }
  if (options.replica_size < 0 || options.replica_size > kMaxJobRanks) {
    return invalidArgument("replica_size must be in [0, " + std::to_string(kMaxJobRanks) +
                           "], got " + std::to_string(options.replica_size));
  }
  const bool joins = options.replica_size > 0;
  if (joins && (options.role != Role::kRollout || options.use_mpi)) {
    return invalidArgument(
        "replica_size > 0 (joining a running job) is for rollouts with explicit bootstrap");
  }
  if (joins && (options.replica_rank < 0 || options.replica_rank >= options.replica_size)) {
    return invalidArgument(
        "replica_rank must be in [0, replica_size = " + std::to_string(options.replica_size) +
        "), got " + std::to_string(options.replica_rank));
  }
  if (!options.use_mpi && !joins) {
    const int32_t count =
        options.role == Role::kTrainer ? options.num_trainers : options.num_rollouts;
    if (options.rank < 0 || options.rank >= count) {
      return invalidArgument("explicit bootstrap: rank " + std::to_string(options.rank) +
                             " is out of range for " + std::to_string(count) + " " +
                             roleName(options.role) + " ranks");
    }
  }
  if (!options.use_mpi) {
    if (options.coordinator_address.empty()) {
      return invalidArgument("explicit bootstrap needs coordinator_address (host:port)");
    }
  }
  std::unique_ptr<Context> ctx;
  if (options.role == Role::kTrainer) {
    ctx = std::make_unique<TrainerContext>(options);
  } else {
    ctx = std::make_unique<RolloutContext>(options);
  }
  WSYNC_RETURN_IF_ERROR(ctx->joinJob());
  return ctx;
}

Context::~Context() = default;

Status Context::joinJob() {
  WSYNC_ASSIGN_OR_RETURN(job_, wsync::joinJob(options_, options_.settings));
  registration_.role = options_.role;
  registration_.rank = job_.welcome.role_rank;
  registration_.replica = options_.replica;
  return Status::ok();
}

Result<int32_t> Context::declareTensor(const std::string& name, const Dims& shape) {
  if (commit_started_) return invalidUsage("register_buffer after commit");
  WSYNC_RETURN_IF_ERROR(checkTensorDecl({name, shape}));
  const int32_t index = registration_.declareTensor(name, shape);
  if (index < 0) {
    for (const TensorDecl& t : registration_.tensors) {
      if (t.name == name) {
        return invalidArgument("tensor '" + name + "' is declared with global shape " +
                               t.shape.toString() + " and " + shape.toString() + " on this rank");
      }
    }
  }
  return index;
}

Result<int32_t> Context::registerBuffer(LocalBuffer buffer, void* data) {
  if (commit_started_) return invalidUsage("register_buffer after commit");
  const std::string where = "buffer '" + buffer.name + "'";
  if (buffer.name.empty()) return invalidArgument("a buffer needs a name");
  for (const LocalBuffer& b : registration_.buffers) {
    if (b.name == buffer.name) return invalidArgument(where + " is registered twice");
  }
  if (buffer.num_elements < 0) return invalidArgument(where + ": negative num_elements");
  if (options_.role == Role::kTrainer && data == nullptr && buffer.num_elements > 0) {
    return invalidArgument(where + ": a trainer buffer needs its data pointer");
  }
  if (!registration_.buffers.empty() && buffer.memory != memoryKind()) {
    return invalidArgument(where + ": " + memoryKindName(buffer.memory) +
                           " memory, but this rank's other buffers are " +
                           memoryKindName(memoryKind()) + " memory (one kind per rank)");
  }
  if (buffer.memory == MemoryKind::kDevice) {
    if (!deviceUsable(options_.cuda_device)) {
      return Status(WSYNC_ERR_UNSUPPORTED,
                    where +
                        ": device memory needs a CUDA build and a usable config.cuda_device (got " +
                        std::to_string(options_.cuda_device) + ")");
    }
    if (data != nullptr) {
      WSYNC_RETURN_IF_ERROR(checkDevicePointer(data, options_.cuda_device, where));
    }
  }
  if (buffer.num_elements > kMaxRegisteredElements) {
    return invalidArgument(where + ": num_elements " + std::to_string(buffer.num_elements) +
                           " is above 2^56");
  }
  for (const Piece& p : buffer.pieces) {
    if (p.tensor < 0 || static_cast<size_t>(p.tensor) >= registration_.tensors.size()) {
      return internalError(where + ": piece names an undeclared tensor");
    }
    WSYNC_RETURN_IF_ERROR(checkPiece(registration_.tensors[static_cast<size_t>(p.tensor)], p,
                                     buffer.num_elements, where));
  }
  registration_.buffers.push_back(std::move(buffer));
  buffer_data_.push_back(data);
  return static_cast<int32_t>(registration_.buffers.size() - 1);
}

MemoryKind Context::memoryKind() const {
  return registration_.buffers.empty() ? MemoryKind::kHost : registration_.buffers.front().memory;
}

Status Context::sendMessage(MessageType type, const std::vector<uint8_t>& payload) {
  return job_.channel->send(static_cast<uint16_t>(type), payload);
}

Status Context::sendError(const Status& status) {
  return sendMessage(MessageType::kError, encode(ErrorMsg{status.code(), status.message()}));
}

Status asJobFailure(const Status& failure) {
  if (failure.code() != WSYNC_ERR_TIMEOUT) return failure;
  return remoteError("the job failed (timed out): " + failure.message());
}

void Context::setFailed(const Status& status) {
  std::lock_guard lock(failure_mu_);
  if (failure_.isOk()) failure_ = asJobFailure(status);
  failed_ = true;
}

Status Context::failure() const {
  std::lock_guard lock(failure_mu_);
  return failure_;
}

Status Context::commit() {
  if (commit_started_) return invalidUsage("commit called twice");
  commit_started_ = true;
  auto fail = [this](const Status& s) {
    setFailed(s);
    return s;
  };
  RegisterMsg reg;
  Status s = prepareRegistration(reg);
  if (!s.isOk()) {
    (void)sendError(s.withContext(std::string(roleName(role())) + " " + std::to_string(rank())));
    return fail(s);
  }
  reg.registration = encodeRegistration(registration_);
  // The broadcast backends this rank can run; trainer 0's carry the world tokens their backends
  // need. Without a backend every rank offers (or without its token) the job goes by writes, and
  // the coordinator logs why.
  const bool make_world_tokens = role() == Role::kTrainer && rank() == 0;
  for (BroadcastOffer& offer : broadcastOffers(memoryKind(), make_world_tokens))
    reg.broadcast_offers.push_back({std::move(offer)});
  WSYNC_RETURN_IF_ERROR(sendMessage(MessageType::kRegister, encode(reg)));
  Result<Frame> frame = expectFrame(*job_.channel, MessageType::kPlanAssignment,
                                    options_.timeout + kCoordinatorReplyGrace);
  if (!frame.isOk()) return fail(frame.status());
  PlanAssignmentMsg assignment;
  WSYNC_RETURN_IF_ERROR(decode(frame->payload, assignment));
  Result<RankPlan> plan = decodeRankPlan(assignment.rank_plan.data(), assignment.rank_plan.size());
  if (!plan.isOk()) return fail(plan.status());
  plan_summary_.bytes_per_version = plan->stats.bytes_total;
  plan_summary_.broadcast_groups = static_cast<int64_t>(plan->groups.size());
  plan_summary_.write_ops = static_cast<int64_t>(plan->writes.size());
  plan_summary_.replicas = plan->stats.replicas;
  s = applyPlan(std::move(plan).value(), std::move(assignment));
  if (!s.isOk()) {
    (void)sendError(s.withContext(std::string(roleName(role())) + " " + std::to_string(rank())));
    return fail(s);
  }
  WSYNC_RETURN_IF_ERROR(sendMessage(MessageType::kCommitDone, encode(VersionMsg{0})));
  frame =
      expectFrame(*job_.channel, MessageType::kCommitOk, options_.timeout + kCoordinatorReplyGrace);
  if (!frame.isOk()) return fail(frame.status());
  WSYNC_RETURN_IF_ERROR(startRunning());
  committed_ = true;
  return Status::ok();
}

void Context::abort() {
  setFailed({WSYNC_ERR_ABORTED, "the context was aborted"});
  if (job_.channel) job_.channel->shutdown();
}

Status Context::finalize() {
  Status s;
  if (job_.channel && !failedOrAborted()) s = sendMessage(MessageType::kBye, {});
  if (job_.hosted_coordinator) {
    // This rank runs the coordinator: let the others finish before it goes away.
    Status job = job_.hosted_coordinator->wait(options_.timeout);
    job_.hosted_coordinator->stop();
    if (s.isOk() && !job.isOk() && job.code() != WSYNC_ERR_TIMEOUT) s = job;
  }
  return s;
}

TransportSetup Context::transportSetup(int32_t writer_rank) const {
  TransportSetup setup;
  // A host-memory trainer reaches device slots through the GPU it shares the node with.
  setup.cuda_device = options_.cuda_device >= 0 ? options_.cuda_device : 0;
  setup.writer_rank = writer_rank;
  setup.timeout = options_.timeout;
  setup.device_transport = options_.settings.device_transport;
  setup.cuda_ipc_export = options_.settings.cuda_ipc_export;
  setup.batch_device_copies = !options_.settings.debug_no_copy_batch;
  setup.time_device_copies = options_.settings.debug_timing;
  setup.early_landing = !options_.settings.debug_no_early_landing;
  return setup;
}

Result<std::unique_ptr<Broadcaster>> Context::createBroadcaster(
    const RankPlan& plan, const PlanAssignmentMsg& assignment) const {
  const BroadcastWorldAssignment& world = assignment.broadcast;
  if (world.backend.empty()) {
    if (!plan.groups.empty()) {
      return protocolError("the plan assignment has broadcast groups but no broadcast backend");
    }
    return std::unique_ptr<Broadcaster>();
  }
  WSYNC_ASSIGN_OR_RETURN(const BroadcastBackend* backend, broadcastBackendNamed(world.backend));
  if (backend->memory != memoryKind()) {
    return protocolError("the coordinator assigned " + world.backend + " broadcasts (" +
                         memoryKindName(backend->memory) + " memory) to a " +
                         memoryKindName(memoryKind()) + "-memory " + roleName(role()));
  }
  BroadcastSetup setup;
  setup.comms = assignment.comms;
  setup.world_token = world.world_token;
  setup.world_rank = world.world_rank;
  setup.world_size = world.world_size;
  setup.root_ranks = world.root_ranks;
  setup.cuda_device = options_.cuda_device;
  setup.timeout = options_.timeout;
  Result<std::unique_ptr<Broadcaster>> broadcaster = backend->create(setup);
  if (!broadcaster.isOk()) {
    return broadcaster.status().withContext(world.backend + " broadcasts for " +
                                            std::to_string(plan.groups.size()) +
                                            " broadcast groups");
  }
  return broadcaster;
}

}  // namespace wsync
