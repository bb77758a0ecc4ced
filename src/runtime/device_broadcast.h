// Broadcast groups on device memory for one rank: the NcclBroadcaster of its NCCL world, built
// from the rank's PlanAssignment at commit, with the plan's numbering translated (communicator
// index into PlanAssignmentMsg::comms, trainer rank of the root). Keeps the contexts free of
// CUDA and NCCL types: in a build without CUDA, makeNcclWorldId() and create() are UNSUPPORTED.
//
// Thread-safety: one thread at a time (the trainer's publisher thread, the rollout's receiver
// thread after commit).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/protocol.h"
#include "plan/plan.h"
#include "runtime/device_ops.h"  // CudaStreamHandle

namespace wsync {

// For error messages about broadcast groups: "{0,1}" (the group's rollout ranks) and
// "tensors 'a', 'b', 'c' and 4 more" (the tensors of a rank's groups).
std::string groupReceivers(const BroadcastGroup& group);
std::string groupTensors(const RankPlan& plan);

// The NCCL unique id trainer 0 registers with (RegisterMsg::nccl_unique_id). Needs no GPU.
Result<std::vector<uint8_t>> makeNcclWorldId();

class DeviceBroadcaster {
 public:
  // Collective over every rank of the job's NCCL world (assignment.nccl): NCCL world init and one
  // split per communicator of assignment.comms, each bounded by `timeout`. `device` is this rank's
  // CUDA device (one per rank).
  static Result<std::unique_ptr<DeviceBroadcaster>> create(const PlanAssignmentMsg& assignment,
                                                           int device,
                                                           std::chrono::milliseconds timeout);
  // Finalizes the communicators (bounded by the timeout; aborts them on failure).
  ~DeviceBroadcaster();
  DeviceBroadcaster(const DeviceBroadcaster&) = delete;
  DeviceBroadcaster& operator=(const DeviceBroadcaster&) = delete;

  // Queues a broadcast of `bytes` at `data` (device memory of the rank's device) on communicator
  // `comm_index` (an index into the assignment's comms, as PlanAssignmentMsg::group_comm gives)
  // from trainer rank `root_trainer`. Every member queues the same broadcasts per communicator in
  // plan order.
  Status post(int32_t comm_index, int32_t root_trainer, void* data, size_t bytes);
  // Issues everything queued on `stream` (returns once it is on the stream).
  Status launch(CudaStreamHandle stream);
  // Waits for the launched broadcasts (and everything else on `stream`) up to `timeout`. TIMEOUT
  // or an error aborts the communicators: the broadcaster is unusable afterwards.
  Status wait(CudaStreamHandle stream, std::chrono::milliseconds timeout);

 private:
  DeviceBroadcaster() = default;
  struct Impl;  // the NcclBroadcaster (CUDA builds); empty otherwise
  std::unique_ptr<Impl> impl_;
  std::vector<int32_t> comm_ids_;       // per assignment comm index: BroadcastComm::id
  std::vector<int32_t> trainer_ranks_;  // per trainer rank: its NCCL world rank
};

}  // namespace wsync
