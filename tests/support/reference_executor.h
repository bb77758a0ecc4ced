// Reference executor for plans: runs a Plan with plain loops over host byte buffers, one set per
// rank of both roles, and checks the outcome element by element against the global tensors. It is
// the independent oracle of the planner tests; it shares no code with the planner or the data
// plane beyond the plan types.
//
// Values: element i (row-major flat index in the global shape) of tensor T is
// referenceValueBits(T, i, d) in a trainer buffer of dtype d (a hash of T and i; for floating
// types a finite normal number in about [2^-7, 2^8) in magnitude, rounded to d by Eigen). A
// rollout buffer of dtype e must hold that value converted to e (through float with Eigen's
// round-to-nearest-even), bit for bit.
// Supported dtypes: float32, bfloat16, float16 (converting among themselves) and the integer and
// bool types (same dtype only). float8 buffers are refused (INVALID_ARGUMENT), as are tensors that
// trainers hold in more than one dtype.
// Not thread-safe; the registrations must outlive the executor.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "plan/plan.h"

namespace wsync {

// Raw bits (in the low dtypeSize(dtype) bytes) of element `index` of tensor `tensor` as a trainer
// holding it in `dtype` stores it. float8 dtypes are not supported (returns 0).
uint64_t referenceValueBits(std::string_view tensor, int64_t index, DType dtype);

class ReferenceExecutor {
 public:
  // Allocates every rank's buffers (num_elements * dtype size bytes), fills the trainer pieces with
  // the reference values (other trainer bytes with a poison pattern) and the rollout buffers with
  // another pattern.
  static Result<ReferenceExecutor> create(const std::vector<Registration>& trainers,
                                          const std::vector<Registration>& rollouts);

  // Runs the plan's groups, then its writes. Every access is bounds-checked against the buffers;
  // a plan naming a missing rank/buffer, an out-of-range region or a dtype other than the
  // buffer's gives INVALID_ARGUMENT naming the group or op.
  Status execute(const Plan& plan);

  // Checks every element of every rollout piece: written exactly once and equal to the expected
  // value; and that nothing outside the pieces was written. MISMATCH naming the first wrong
  // element: rank, buffer, tensor, global index, got, want (and the write count).
  Status verify() const;

  // The bytes of rollout `rank`'s buffer `buffer` (for tests that tamper with a result).
  std::vector<uint8_t>& rolloutBytes(int32_t rank, int32_t buffer) {
    return rollout_bytes_[static_cast<size_t>(rank)][static_cast<size_t>(buffer)];
  }

 private:
  ReferenceExecutor(const std::vector<Registration>& trainers,
                    const std::vector<Registration>& rollouts)
      : trainers_(&trainers), rollouts_(&rollouts) {}

  const std::vector<Registration>* trainers_;
  const std::vector<Registration>* rollouts_;
  std::unordered_map<std::string, DType> trainer_dtype_;  // tensor name -> the trainers' dtype
  std::vector<std::vector<std::vector<uint8_t>>> trainer_bytes_;  // [rank][buffer]
  std::vector<std::vector<std::vector<uint8_t>>> rollout_bytes_;
  std::vector<std::vector<std::vector<uint8_t>>> write_count_;  // [rank][buffer][element]
};

// OK when the plans are equal field by field; otherwise INTERNAL naming the first difference
// ("writes[12].region.dst_offset: 40 vs 48").
Status comparePlans(const Plan& a, const Plan& b);

// create + execute + verify.
Status executeAndVerify(const std::vector<Registration>& trainers,
                        const std::vector<Registration>& rollouts, const Plan& plan);

}  // namespace wsync
