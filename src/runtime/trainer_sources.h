// What a trainer's sends read: each registered buffer as published (the caller's memory, or in
// snapshot mode its copy taken at publish), the quantized sources of block-scaled rollout tensors,
// and a write op's source region converted into packed staging (host: row by row now; device: one
// kernel on a stream). The snapshot is a write source, registered with the transports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"
#include "runtime/device_ops.h"
#include "runtime/trainer_quantizer.h"

namespace wsync {

class TrainerSources {
 public:
  // Commit (before registration): `buffers` with their memory `data`, all in `memory` (device:
  // CUDA device `device`); buffers from `quantizer`'s first buffer on are its quantized sources
  // (all three outlive this object). `snapshot`: room for a copy of every buffer.
  Status setUp(const std::vector<LocalBuffer>& buffers, const std::vector<void*>& data,
               const TrainerQuantizer& quantizer, MemoryKind memory, int device, bool snapshot);

  // Snapshot mode: copies every buffer into the snapshot. Device memory: on `stream`, returning
  // once the copies are enqueued (the caller orders them after its own work).
  Status takeSnapshot(CudaStreamHandle stream);
  // The snapshot's memory (null without snapshot mode), for registration.
  const uint8_t* snapshotData() const;
  size_t snapshotBytes() const;

  // Buffer `buffer`'s first byte as this version sends it.
  const uint8_t* of(int32_t buffer) const;
  // Converts write op `op`'s source region of `plan` into `staged`, packed: on the host now, or
  // (device memory) by a kernel enqueued on `stream` with float8 scale `scale`.
  Status convertHost(const RankPlan& plan, const WriteOp& op, uint8_t* staged) const;
  Status convertAsync(const RankPlan& plan, const WriteOp& op, uint8_t* staged, float scale,
                      CudaStreamHandle stream) const;

 private:
  const std::vector<LocalBuffer>* buffers_ = nullptr;
  const std::vector<void*>* data_ = nullptr;
  const TrainerQuantizer* quantizer_ = nullptr;
  bool snapshot_ = false;
  std::vector<size_t> snapshot_offsets_;  // per buffer, bytes into the snapshot
  std::vector<uint8_t> host_snapshot_;
  DeviceBuffer device_snapshot_;
};

}  // namespace wsync
