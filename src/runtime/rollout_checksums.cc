// RolloutContext's checksum verification (runtime/rollout_context.h, docs/checksums.md): on
// Verify(v, slot), the rank sums the bytes each trainer delivered into the slot (its plan view's
// write regions and broadcast spans, keyed as the trainers keyed them) and answers Verified or
// ChecksumFailed, naming the trainers whose bytes differ and their tensors. Runs on the receiver
// thread, between Go and Ready; the slot stays WRITING (unreadable) throughout.
#include <algorithm>
#include <map>
#include <set>

#include "runtime/rollout_context.h"

namespace wsync {

// Every region this rank receives, relative to a slot's start, each adding to its trainer's sum.
Status RolloutContext::buildChecksums() {
  std::vector<ChecksumSpan> spans;
  for (const WriteOp& op : plan_.writes) {
    ChecksumSpan s = landingSpan(plan_.region(op), op.dst_buffer, op.dst_dtype,
                                 static_cast<uint32_t>(op.src_rank));
    s.src = buffer_byte_offsets_[static_cast<size_t>(op.dst_buffer)] + s.dst_offset;
    s.src_pitch = s.dst_pitch;
    s.src_plane_pitch = s.dst_plane_pitch;
    spans.push_back(s);
  }
  for (const BroadcastGroup& g : plan_.groups) {
    for (const BufferSpan& d : g.dst) {
      if (d.rank != rank()) continue;
      Region run;
      run.count[0] = g.num_elements;
      run.dst_offset = d.offset;
      ChecksumSpan s = landingSpan(run, d.buffer, g.dst_dtype, static_cast<uint32_t>(g.src.rank));
      s.src = buffer_byte_offsets_[static_cast<size_t>(d.buffer)] + s.dst_offset;
      spans.push_back(s);
    }
  }
  uint32_t outputs = 0;
  for (const ChecksumSpan& s : spans)
    outputs = std::max(outputs, s.output + 1);
  WSYNC_ASSIGN_OR_RETURN(checksums_, VersionChecksums::create(std::move(spans), outputs,
                                                              memoryKind(), options_.cuda_device));
  checksums_built_ = true;
  return Status::ok();
}

// The tensors trainer `trainer` delivers to this rank, for messages: up to 4 names, then a count.
std::string RolloutContext::tensorsFrom(int32_t trainer) const {
  std::set<int32_t> tensors;
  for (const WriteOp& op : plan_.writes) {
    if (op.src_rank == trainer) tensors.insert(op.tensor);
  }
  for (const BroadcastGroup& g : plan_.groups) {
    if (g.src.rank == trainer) tensors.insert(g.tensor);
  }
  std::string names;
  size_t listed = 0;
  for (int32_t t : tensors) {
    if (listed == 4) {
      names += " and " + std::to_string(tensors.size() - listed) + " more";
      break;
    }
    names += (listed++ == 0 ? "'" : ", '") + plan_.tensors[static_cast<size_t>(t)].name + "'";
  }
  return names;
}

Status RolloutContext::verifyVersion(const VerifyMsg& verify) {
  const std::string what =
      "rollout " + std::to_string(rank()) + ", version " + std::to_string(verify.version);
  if (verify.slot != prepared_slot_ || verify.version != prepared_version_ || draining_) {
    return protocolError("Verify for version " + std::to_string(verify.version) + " slot " +
                         std::to_string(verify.slot) + " but slot " +
                         std::to_string(prepared_slot_) + " was prepared for version " +
                         std::to_string(prepared_version_));
  }
  ExposedMemory& slot = *slots_[static_cast<size_t>(verify.slot)];
  landing_slot_ = -1;
  if (!landing_ranges_.empty()) {  // staged: move every byte to the device now (Ready will not)
    WSYNC_RETURN_IF_ERROR(slot.land(landing_ranges_, options_.timeout).withContext(what));
    WSYNC_RETURN_IF_ERROR(slot.beginLanding());  // a re-send's writes start a new round
    landed_version_ = verify.version;
  }
  // Delta versions: the patched ops are rebuilt from the base version first (rollout_delta.cc).
  const std::vector<std::pair<int32_t, std::string>> patch_failures =
      applyDeltas(verify.version, verify.slot);
  if (!checksums_built_) WSYNC_RETURN_IF_ERROR(buildChecksums());
  const std::vector<uint8_t> all(checksums_.numOutputs(), 1);
  WSYNC_ASSIGN_OR_RETURN(std::vector<uint64_t> sums,
                         checksums_.compute(static_cast<const uint8_t*>(slot.data()), all,
                                            broadcast_stream_.get(), options_.timeout));
  std::map<int32_t, uint64_t> expected;
  for (const RankChecksum& c : verify.sums)
    expected[c.rank] = c.sum;
  ChecksumFailedMsg failed{verify.version, {}, what + ":"};
  const int32_t trainers = std::max<int32_t>(static_cast<int32_t>(sums.size()),
                                             verify.sums.empty() ? 0 : verify.sums.back().rank + 1);
  for (int32_t t = 0; t < trainers; ++t) {
    const uint64_t got = static_cast<size_t>(t) < sums.size() ? sums[static_cast<size_t>(t)] : 0;
    const auto it = expected.find(t);
    const uint64_t want = it == expected.end() ? 0 : it->second;
    std::string patch_failure;
    for (const auto& [trainer, why] : patch_failures)
      if (trainer == t) patch_failure = why;
    if (got == want && patch_failure.empty()) continue;
    failed.trainers.push_back(t);
    failed.detail += " the bytes from trainer " + std::to_string(t) + " (" + tensorsFrom(t) + ") " +
                     (patch_failure.empty() ? "do not match their checksum;"
                                            : "could not be patched: " + patch_failure + ";");
  }
  if (failed.trainers.empty())
    return sendMessage(MessageType::kVerified, encode(VersionMsg{verify.version}));
  failed.detail.pop_back();
  return sendMessage(MessageType::kChecksumFailed, encode(failed));
}

}  // namespace wsync
