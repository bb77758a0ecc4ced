// A trainer's quantized sources (plan/block_scaling_plan.h): the float8 values and block scales of
// every piece a block-scaled rollout tensor takes from this trainer, in memory of the trainer's
// kind, refilled each version before the writes copy them unchanged. Per version:
//   1. computeMaxima: every source's block maxima from the version's bytes; returns the partial
//      maxima of the exchanged blocks (the PartialMaxima payload; empty when none);
//   2. quantize(merged): the exchanged blocks take the job-wide maxima (BlockMaxima), then scales
//      and float8 values are computed.
// Device memory: every source is one task of a batched kernel (kernels/block_quant_kernels.h),
// one launch per group size (in practice one): computeMaxima computes only the exchanged blocks'
// partial maxima (nothing when none are exchanged) and copies just those to the host; quantize
// scatters the merged maxima into the device grid, then one fused pass per source reads its data
// once and writes the scales and float8 values (the max |x| of a block it holds alone, merged
// with the job-wide maximum of an exchanged block). Host memory: blockAmaxHost, scalesFromAmax,
// quantizeBlocksHost per source.
// Memory cost: one byte per quantized element plus the scales, per scheme. Publisher thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "layout/block_scaling.h"
#include "layout/registration.h"
#include "plan/block_scaling_plan.h"
#include "quant/block_quant.h"
#include "quant/block_quant_geometry.h"
#include "runtime/device_ops.h"

namespace wsync {

class TrainerQuantizer {
 public:
  TrainerQuantizer() = default;
  // The quantized sources of `own` (the trainer's registration, unchanged) for the job's `table`;
  // `exchanged`: PlanAssignment::exchanged_blocks. Device memory lives on `cuda_device`.
  static Result<TrainerQuantizer> create(const Registration& own,
                                         const std::vector<ScaledTensor>& table,
                                         std::vector<uint64_t> exchanged, MemoryKind memory,
                                         int cuda_device, std::chrono::milliseconds timeout);

  bool empty() const { return sources_.empty(); }
  bool exchanges() const { return !exchanged_.empty(); }
  // The registration index of the first quantized buffer (the trainer's own come before).
  int32_t firstBuffer() const { return first_buffer_; }
  // The memory of quantized buffer `buffer` (>= firstBuffer()); nullptr when out of range.
  uint8_t* bufferData(int32_t buffer) const;
  // The memory the writes read (to register with every transport): base and bytes.
  const uint8_t* memory() const;
  size_t memoryBytes() const { return arena_bytes_; }

  // `source(b)`: where the version's bytes of the trainer's own buffer b are (its memory or its
  // snapshot). Device memory: the work runs on `stream` (waited for before returning).
  using SourceOf = std::function<const uint8_t*(int32_t)>;
  Result<std::vector<uint8_t>> computeMaxima(const SourceOf& source, CudaStreamHandle stream);
  // Where a source's float8 values go instead of its buffer (device memory only): device memory
  // the kernel writes in place (a rollout's slot, runtime/in_place_quantization.h), rows (every
  // dim of the source's box but the last, flattened) `pitch` bytes apart, pitch >= the box's last
  // extent. dst null: the source's buffer.
  struct ValuesTarget {
    uint8_t* dst = nullptr;
    int64_t pitch = 0;
  };
  size_t numSources() const { return sources_.size(); }
  int32_t valuesBuffer(size_t source) const { return sources_[source].q.values_buffer; }
  const Box& sourceBox(size_t source) const { return sources_[source].q.box; }

  // `merged`: the BlockMaxima payload (ignored when nothing is exchanged). Device memory: the
  // quantization is enqueued on `stream` (the writes after it on the same stream see it).
  // `targets`: empty, or one per source (device memory; INVALID_ARGUMENT otherwise).
  Status quantize(const std::vector<uint8_t>& merged, const SourceOf& source,
                  CudaStreamHandle stream, const std::vector<ValuesTarget>& targets = {});

 private:
  struct Source {
    QuantizedSource q;
    BlockScaling scaling;
    PieceView view;        // data: offset from the buffer start (bytes), filled per version
    size_t values_at = 0;  // bytes into the arena
    size_t scales_at = 0;
    size_t amax_at = 0;  // floats into the grid
  };
  PieceView viewOf(const Source& s, const SourceOf& source) const;

  // Device memory (trainer_quantizer_device.cc). Tasks of one group size, contiguous in tasks_,
  // numbered from 0 (first_tile); their exchanged blocks are units_[first_unit, +num_units).
  // key: 2 * group, plus 1 where every task's blocks are whole in width by shape (the
  // whole-width kernel runs the batch when its addresses allow too).
  struct Batch {
    int group = 256;
    int key = 0;
    size_t first_task = 0;
    size_t num_tasks = 0;
    uint64_t blocks = 0;
    size_t first_unit = 0;
    size_t num_units = 0;
  };
  Status setUpDevice();
  // tasks_' data pointers for this version's sources and, with `targets` (one per source), their
  // outputs, uploaded when they changed.
  Status refreshTasks(const SourceOf& source, CudaStreamHandle stream,
                      const std::vector<ValuesTarget>* targets);
  Result<std::vector<uint8_t>> computeMaximaOnDevice(const SourceOf& source,
                                                     CudaStreamHandle stream);
  Status quantizeOnDevice(const std::vector<uint8_t>& merged, const SourceOf& source,
                          CudaStreamHandle stream, const std::vector<ValuesTarget>& targets);

  std::vector<Source> sources_;
  std::vector<uint64_t> exchanged_;
  int32_t first_buffer_ = 0;
  MemoryKind memory_ = MemoryKind::kHost;
  int cuda_device_ = -1;
  std::chrono::milliseconds timeout_{60000};  // bound on a device wait
  std::vector<size_t> buffer_at_;             // per quantized buffer: bytes into the arena
  size_t arena_bytes_ = 0;
  std::vector<uint8_t> host_arena_;
  DeviceBuffer device_arena_;
  size_t grid_blocks_ = 0;    // every source's cover blocks, concatenated (the grid)
  std::vector<float> amax_;   // host memory: the grid's block maxima
  DeviceBuffer device_amax_;  // device memory, where blocks are exchanged: their merged maxima
                              // at their grid index, else 0

  std::vector<block_quant_kernels::QuantTask> tasks_;  // device memory: one per source
  std::vector<size_t> task_source_;                    // the source of each task
  std::vector<Batch> batches_;
  bool tasks_uploaded_ = false;
  DeviceBuffer device_tasks_;
  std::vector<size_t> unit_exchanged_;  // per exchanged unit (batch order): its exchanged_ index
  std::vector<float> partial_host_;     // the units' partial maxima, batch order
  std::vector<float> merged_host_;      // BlockMaxima, exchanged_ order (kept until copied)
  DeviceBuffer device_units_;           // uint64 unit numbers, sorted per batch
  DeviceBuffer device_partial_;         // float per unit
  DeviceBuffer device_exchanged_;       // uint64 grid index per exchanged_ entry
  DeviceBuffer device_merged_;          // float per exchanged_ entry
};

}  // namespace wsync
