// wsync-sync-bench: the model and its layouts (see the header).
#include "sync_bench_model.h"

namespace wsync_bench {

std::vector<wsync_demo::TensorSpec> benchTensors(const Options& opt, wsync_dtype_t trainer_dtype) {
  if (opt.model == "llama3-8b") return wsync_demo::policyTensors(wsync_demo::llama3_8b());
  // policyShapeForBytes counts float32.
  const int64_t element_bytes = static_cast<int64_t>(wsync_demo::dtypeBytes(trainer_dtype));
  const int64_t f32_bytes = element_bytes == 4 ? opt.bytes : opt.bytes / element_bytes * 4;
  return wsync_demo::policyTensors(wsync_demo::policyShapeForBytes(f32_bytes));
}

std::vector<wsync_demo::BufferSpec> rankLayout(const std::vector<wsync_demo::TensorSpec>& tensors,
                                               const Options& opt, const Roles& roles) {
  return roles.trainer ? wsync_demo::trainerLayout(tensors, roles.trainers, roles.role_rank)
                       : wsync_demo::rolloutLayout(tensors, opt.layout, roles.tp, roles.tp_rank);
}

uint64_t layoutBytes(const std::vector<wsync_demo::BufferSpec>& layout, size_t element_bytes) {
  uint64_t bytes = 0;
  for (const wsync_demo::BufferSpec& b : layout)
    bytes += static_cast<uint64_t>(b.num_elements) * element_bytes;
  return bytes;
}

LayoutSizes exchangeLayoutSizes(uint64_t my_bytes, bool trainer, MPI_Comm comm) {
  LayoutSizes sizes;
  sizes.mine = my_bytes;
  uint64_t mine[3] = {trainer ? my_bytes : 0, trainer ? 0 : my_bytes, trainer ? 0 : my_bytes};
  uint64_t maxes[2] = {0, 0};
  MPI_Allreduce(mine, maxes, 2, MPI_UINT64_T, MPI_MAX, comm);
  MPI_Allreduce(&mine[2], &sizes.delivered, 1, MPI_UINT64_T, MPI_SUM, comm);
  sizes.params_bytes = maxes[0];
  sizes.slot_bytes = maxes[1];
  return sizes;
}

}  // namespace wsync_bench
