// TrainerQuantizer in device memory (trainer_quantizer.h): the sources as tasks of the batched
// block quantization kernel, one launch per group size and step.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device_quant_ops.h"
#include "runtime/trainer_quantizer.h"

namespace wsync {

namespace bk = block_quant_kernels;

Status TrainerQuantizer::setUpDevice() {
  if (sources_.empty()) return Status::ok();
  WSYNC_RETURN_IF_ERROR(setDevice(cuda_device_));
  // tasks ordered by group size, then by whether their blocks are whole in width (the
  // whole-width kernel takes a batch whose tasks all are), one batch per both
  std::vector<int> group(sources_.size());
  std::vector<int> batch_key(sources_.size());
  for (size_t i = 0; i < sources_.size(); ++i) {
    const Source& s = sources_[i];
    PieceView checked = s.view;  // the batched kernel does not check; the launchers did
    checked.data = &s;
    const std::string why = checkPiece(checked, s.q.shape, s.scaling);
    if (!why.empty())
      return invalidArgument("quantized source (table entry " + std::to_string(s.q.entry) +
                             "): " + why);
    const int dtype = s.view.dtype == DType::kFloat32 ? 0 : 1;
    group[i] = bk::groupSizeFor(s.scaling.block_rows, s.scaling.block_cols, dtype);
    const bool whole = bk::wholeWidthVectors(bk::geometryOf(s.view, s.scaling), group[i]) > 0;
    batch_key[i] = 2 * group[i] + (whole ? 1 : 0);
  }
  task_source_.resize(sources_.size());
  std::iota(task_source_.begin(), task_source_.end(), size_t{0});
  std::stable_sort(task_source_.begin(), task_source_.end(),
                   [&](size_t a, size_t b) { return batch_key[a] < batch_key[b]; });
  // grid index -> source: the last source whose grid starts at or before it (sources lie in the
  // grid in order; a table per block would be one entry per MXFP8 block, 218 M for an 8B model)
  auto source_of_block = [this](uint64_t e) {
    const auto after = std::upper_bound(sources_.begin(), sources_.end(), e,
                                        [](uint64_t x, const Source& s) { return x < s.amax_at; });
    return static_cast<size_t>(after - sources_.begin()) - 1;
  };
  std::vector<int> has_exchanged(sources_.size(), 0);
  for (uint64_t e : exchanged_)
    has_exchanged[source_of_block(e)] = 1;
  auto* grid = reinterpret_cast<float*>(device_amax_.data());
  std::vector<size_t> task_of_source(sources_.size());
  for (size_t k = 0; k < task_source_.size(); ++k) {
    const size_t i = task_source_[k];
    const Source& s = sources_[i];
    task_of_source[i] = k;
    bk::QuantTask t = bk::quantTaskOf(s.view, s.scaling);
    t.amax_in = has_exchanged[i] ? grid + s.amax_at : nullptr;
    t.scales = device_arena_.data() + s.scales_at;
    t.dst = device_arena_.data() + s.values_at;
    if (batches_.empty() || batches_.back().key != batch_key[i]) {
      Batch b;
      b.group = group[i];
      b.key = batch_key[i];
      b.first_task = k;
      batches_.push_back(b);
    }
    ++batches_.back().num_tasks;
    tasks_.push_back(t);
  }
  for (Batch& b : batches_) {
    std::vector<bk::QuantTask> slice(tasks_.begin() + static_cast<ptrdiff_t>(b.first_task),
                                     tasks_.begin() + static_cast<ptrdiff_t>(b.first_task) +
                                         static_cast<ptrdiff_t>(b.num_tasks));
    b.blocks = bk::numberQuantTasks(slice);
    std::copy(slice.begin(), slice.end(), tasks_.begin() + static_cast<ptrdiff_t>(b.first_task));
  }
  // the exchanged blocks as units of their batch, sorted per batch
  std::vector<std::vector<std::pair<uint64_t, size_t>>> units(batches_.size());
  for (size_t x = 0; x < exchanged_.size(); ++x) {
    const size_t i = source_of_block(exchanged_[x]);
    const size_t k = task_of_source[i];
    size_t batch = 0;
    while (k >= batches_[batch].first_task + batches_[batch].num_tasks)
      ++batch;
    units[batch].emplace_back(tasks_[k].first_tile + (exchanged_[x] - sources_[i].amax_at), x);
  }
  std::vector<uint64_t> unit_numbers;
  for (size_t batch = 0; batch < batches_.size(); ++batch) {
    std::sort(units[batch].begin(), units[batch].end());
    batches_[batch].first_unit = unit_numbers.size();
    batches_[batch].num_units = units[batch].size();
    for (const auto& [unit, x] : units[batch]) {
      unit_numbers.push_back(unit);
      unit_exchanged_.push_back(x);
    }
  }
  WSYNC_ASSIGN_OR_RETURN(
      device_tasks_, DeviceBuffer::allocate(tasks_.size() * sizeof(bk::QuantTask), cuda_device_));
  if (exchanged_.empty()) return Status::ok();
  const size_t n = exchanged_.size();
  partial_host_.resize(n);
  merged_host_.resize(n);
  WSYNC_ASSIGN_OR_RETURN(device_units_, DeviceBuffer::allocate(n * 8, cuda_device_));
  WSYNC_ASSIGN_OR_RETURN(device_partial_, DeviceBuffer::allocate(n * 4, cuda_device_));
  WSYNC_ASSIGN_OR_RETURN(device_exchanged_, DeviceBuffer::allocate(n * 8, cuda_device_));
  WSYNC_ASSIGN_OR_RETURN(device_merged_, DeviceBuffer::allocate(n * 4, cuda_device_));
  // once: the unit and grid indices, and a zero grid (blocks held alone merge with 0)
  WSYNC_RETURN_IF_ERROR(copyAsync(device_units_.data(), unit_numbers.data(), n * 8, nullptr));
  WSYNC_RETURN_IF_ERROR(copyAsync(device_exchanged_.data(), exchanged_.data(), n * 8, nullptr));
  const std::vector<float> zeros(grid_blocks_, 0.0f);
  WSYNC_RETURN_IF_ERROR(
      copyAsync(device_amax_.data(), zeros.data(), zeros.size() * sizeof(float), nullptr));
  return streamSync(nullptr, timeout_);
}

Status TrainerQuantizer::refreshTasks(const SourceOf& source, CudaStreamHandle stream,
                                      const std::vector<ValuesTarget>* targets) {
  bool changed = !tasks_uploaded_;
  for (size_t k = 0; k < tasks_.size(); ++k) {
    const size_t i = task_source_[k];
    bk::QuantTask& t = tasks_[k];
    const void* data = viewOf(sources_[i], source).data;
    changed |= t.g.data != data;
    t.g.data = data;
    if (targets == nullptr) continue;  // the maxima pass writes no values
    const ValuesTarget& target = targets->empty() ? ValuesTarget{} : (*targets)[i];
    uint8_t* dst =
        target.dst != nullptr ? target.dst : device_arena_.data() + sources_[i].values_at;
    const int64_t pitch = target.dst != nullptr ? target.pitch : t.g.extent[t.g.rank - 1];
    changed |= t.dst != dst || t.g.out_pitch != pitch;
    t.dst = dst;
    t.g.out_pitch = pitch;
  }
  if (!changed || tasks_.empty()) return Status::ok();
  WSYNC_RETURN_IF_ERROR(copyAsync(device_tasks_.data(), tasks_.data(),
                                  tasks_.size() * sizeof(bk::QuantTask), stream));
  tasks_uploaded_ = true;
  return streamSync(stream, timeout_);  // tasks_ may change before a later version's copy
}

Result<std::vector<uint8_t>> TrainerQuantizer::computeMaximaOnDevice(const SourceOf& source,
                                                                     CudaStreamHandle stream) {
  std::vector<uint8_t> partial;
  if (exchanged_.empty()) return partial;  // quantize computes every maximum in its pass
  WSYNC_RETURN_IF_ERROR(refreshTasks(source, stream, nullptr));
  const auto* tasks = reinterpret_cast<const bk::QuantTask*>(device_tasks_.data());
  const auto* units = reinterpret_cast<const uint64_t*>(device_units_.data());
  auto* out = reinterpret_cast<float*>(device_partial_.data());
  for (const Batch& b : batches_) {
    if (b.num_units == 0) continue;
    WSYNC_RETURN_IF_ERROR(blockQuantBatchAsync(tasks_.data() + b.first_task, tasks + b.first_task,
                                               static_cast<int64_t>(b.num_tasks), b.blocks, b.group,
                                               bk::QuantMode::kAmax, units + b.first_unit,
                                               b.num_units, out + b.first_unit, stream));
  }
  WSYNC_RETURN_IF_ERROR(copyAsync(partial_host_.data(), device_partial_.data(),
                                  partial_host_.size() * sizeof(float), stream));
  WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout_));
  partial.resize(exchanged_.size() * 4);
  for (size_t u = 0; u < unit_exchanged_.size(); ++u)
    std::memcpy(partial.data() + 4 * unit_exchanged_[u], &partial_host_[u], 4);
  return partial;
}

Status TrainerQuantizer::quantizeOnDevice(const std::vector<uint8_t>& merged,
                                          const SourceOf& source, CudaStreamHandle stream,
                                          const std::vector<ValuesTarget>& targets) {
  for (size_t i = 0; i < targets.size(); ++i) {
    const int64_t width = sources_[i].q.box.extent[sources_[i].q.box.rank() - 1];
    if (targets[i].dst != nullptr && targets[i].pitch < width) {
      return invalidArgument("block quantization in place: source " + std::to_string(i) +
                             "'s rows " + std::to_string(targets[i].pitch) +
                             " bytes apart, narrower than its " + std::to_string(width));
    }
  }
  WSYNC_RETURN_IF_ERROR(refreshTasks(source, stream, &targets));
  const size_t n = exchanged_.size();
  if (n > 0) {
    std::memcpy(merged_host_.data(), merged.data(), n * 4);
    WSYNC_RETURN_IF_ERROR(copyAsync(device_merged_.data(), merged_host_.data(), n * 4, stream));
    WSYNC_RETURN_IF_ERROR(scatterAmaxAsync(
        reinterpret_cast<const uint64_t*>(device_exchanged_.data()),
        reinterpret_cast<const float*>(device_merged_.data()), static_cast<int64_t>(n),
        reinterpret_cast<float*>(device_amax_.data()), stream));
  }
  const auto* tasks = reinterpret_cast<const bk::QuantTask*>(device_tasks_.data());
  for (const Batch& b : batches_) {
    WSYNC_RETURN_IF_ERROR(blockQuantBatchAsync(tasks_.data() + b.first_task, tasks + b.first_task,
                                               static_cast<int64_t>(b.num_tasks), b.blocks, b.group,
                                               bk::QuantMode::kFused, nullptr, 0, nullptr, stream));
  }
  // merged_host_ is read by the host-to-device copy above; keep it until the copy ran.
  if (n > 0) WSYNC_RETURN_IF_ERROR(streamSync(stream, timeout_));
  return Status::ok();
}

}  // namespace wsync
