// TrainerContext's checksums (runtime/trainer_context.h, docs/checksums.md): the checksum spans of
// everything this trainer sends (its plan's writes and broadcasts, and joined replicas' writes),
// the per-rollout-rank sums sent with Sent, re-sends when the coordinator asks (a Go of the same
// version while Delivered is awaited), and the debug hook that corrupts a byte in flight.
// Everything here runs on the publisher thread.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/trainer_context.h"

namespace wsync {
namespace {

uint64_t addressOf(const void* p) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
}

}  // namespace

// The span of write op `op` of `plan` as sent: from its converted, packed staging, or from its
// (strided) source region.
ChecksumSpan TrainerContext::sentSpan(const RankPlan& plan, const WriteOp& op,
                                      const uint8_t* staged) const {
  const Region r = plan.region(op);
  ChecksumSpan s = landingSpan(r, op.dst_buffer, op.dst_dtype, static_cast<uint32_t>(op.dst_rank));
  if (op.converts()) {
    s.src = addressOf(staged);  // packed: landingSpan's pitches
  } else {
    const size_t ssz = dtypeSize(op.src_dtype);
    s.src = addressOf(sourceOf(op.src_buffer)) + static_cast<uint64_t>(r.src_offset) * ssz;
    s.src_pitch = static_cast<uint64_t>(r.src_stride[0]) * ssz;
    s.src_plane_pitch = static_cast<uint64_t>(r.src_stride[1]) * ssz;
  }
  return s;
}

// Every span this trainer sends, each adding to its destination rollout rank's sum; rebuilt when
// replicas joined (their writes are extensions_).
Status TrainerContext::buildChecksums() {
  std::vector<ChecksumSpan> spans;
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    spans.push_back(
        sentSpan(plan_, op, op.converts() ? stagingAt(write_staging_offsets_[i]) : nullptr));
  }
  for (size_t i = 0; i < plan_.groups.size(); ++i) {
    const BroadcastGroup& g = plan_.groups[i];
    const uint8_t* data =
        g.src_dtype != g.dst_dtype
            ? stagingAt(group_staging_offsets_[i])
            : sourceOf(g.src.buffer) + static_cast<size_t>(g.src.offset) * dtypeSize(g.src_dtype);
    for (const BufferSpan& d : g.dst) {
      Region run;  // the group's elements, one contiguous run at the receiver's span
      run.count[0] = g.num_elements;
      run.dst_offset = d.offset;
      ChecksumSpan s = landingSpan(run, d.buffer, g.dst_dtype, static_cast<uint32_t>(d.rank));
      s.src = addressOf(data);
      spans.push_back(s);
    }
  }
  for (const auto& part : extensions_) {
    for (size_t i = 0; i < part->plan.writes.size(); ++i) {
      const WriteOp& op = part->plan.writes[i];
      spans.push_back(sentSpan(part->plan, op, part->stagingAt(part->staging_offsets[i])));
    }
  }
  uint32_t outputs = 0;
  for (const ChecksumSpan& s : spans)
    outputs = std::max(outputs, s.output + 1);
  WSYNC_ASSIGN_OR_RETURN(checksums_, VersionChecksums::create(std::move(spans), outputs, memory_,
                                                              options_.cuda_device));
  checksum_extensions_ = extensions_.size();
  return Status::ok();
}

// Sent(version) for the Go just transferred; with checksums, SentChecksums carrying the sum of
// what this trainer sent each rollout rank whose replica took this Go.
Status TrainerContext::sendSent(const GoMsg& go) {
  if (!job_.welcome.checksums)
    return sendMessage(MessageType::kSent, encode(VersionMsg{go.version}));
  if (checksum_extensions_ != extensions_.size()) WSYNC_RETURN_IF_ERROR(buildChecksums());
  std::vector<uint8_t> active(checksums_.numOutputs(), 0);
  for (uint32_t r = 0; r < active.size(); ++r)
    active[r] = checksums_.outputsWithSpans()[r] != 0 && slotFor(go, static_cast<int32_t>(r)) >= 0;
  WSYNC_ASSIGN_OR_RETURN(
      std::vector<uint64_t> sums,
      checksums_.compute(nullptr, active, onDevice() ? stream_.get() : nullptr, options_.timeout));
  SentChecksumsMsg sent{go.version, {}, delta_.wire_bytes, delta_.full_bytes};
  for (uint32_t r = 0; r < active.size(); ++r) {
    if (active[r] != 0) sent.sums.push_back({static_cast<int32_t>(r), sums[r]});
  }
  return sendMessage(MessageType::kSentChecksums, encode(sent));
}

// After Sent: Delivered(version), or first a Go of the same version: a late Go (a busy replica,
// held by awaitGo when it came before BlockMaxima) or one that re-sends it to the
// replicas whose checksums failed (transfer again, Sent again).
Result<DeliveredMsg> TrainerContext::awaitDelivered(uint64_t version) {
  const std::string what = "version " + std::to_string(version);
  std::vector<GoMsg> held = std::move(held_gos_);  // late Gos that came before BlockMaxima
  held_gos_.clear();
  for (size_t next_held = 0;; ++next_held) {
    GoMsg go;
    if (next_held < held.size()) {
      go = std::move(held[next_held]);
    } else {
      WSYNC_ASSIGN_OR_RETURN(
          Frame frame, nextFrame(MessageType::kDelivered, options_.timeout + kCoordinatorReplyGrace,
                                 MessageType::kGo));
      if (static_cast<MessageType>(frame.type) == MessageType::kDelivered) {
        DeliveredMsg d;
        WSYNC_RETURN_IF_ERROR(decode(frame.payload, d));
        if (d.version != version)
          return protocolError("delivered " + std::to_string(d.version) + " while waiting for " +
                               what);
        return d;
      }
      WSYNC_RETURN_IF_ERROR(decode(frame.payload, go));
    }
    if (go.version != version) {
      return protocolError("Go for version " + std::to_string(go.version) +
                           " while waiting for the delivery of " + what);
    }
    ++transfer_attempt_;
    const Status s = transfer(go);
    if (!s.isOk()) {
      (void)sendError(s.withContext(what).withContext("trainer " + std::to_string(rank())));
      return s.withContext(what);
    }
    WSYNC_RETURN_IF_ERROR(sendSent(go));
  }
}

// WSYNC_DEBUG_CORRUPT_EVERY, trainer 0: the memory the flipped byte is written from (registered
// with every transport like the other sources).
Status TrainerContext::allocateCorruptByte() {
  if (options_.settings.debug_corrupt_every <= 0 || rank() != 0) return Status::ok();
  if (onDevice()) {
    WSYNC_ASSIGN_OR_RETURN(device_corrupt_byte_, DeviceBuffer::allocate(8, options_.cuda_device));
  } else {
    corrupt_byte_.assign(8, 0);
  }
  return Status::ok();
}

// WSYNC_DEBUG_CORRUPT_EVERY: on trainer 0, in the first send of every N-th version, after its
// writes were flushed, overwrites the first byte of its first write to a taking replica with the
// byte flipped (the checksums, computed from the source, then disagree with the slot).
Status TrainerContext::corruptOneWrite(const GoMsg& go) {
  const int every = options_.settings.debug_corrupt_every;
  if (every <= 0 || rank() != 0 || transfer_attempt_ != 0 ||
      go.version % static_cast<uint64_t>(every) != 0)
    return Status::ok();
  WSYNC_ASSIGN_OR_RETURN(const bool patch_corrupted, corruptOnePatch(go));
  if (patch_corrupted) return Status::ok();  // a patched op's slot bytes are the rank's to write
  for (size_t i = 0; i < plan_.writes.size(); ++i) {
    const WriteOp& op = plan_.writes[i];
    const int32_t slot = slotFor(go, op.dst_rank);
    if (slot < 0 || plan_.numElements(op) == 0) continue;
    if (i < delta_.ops.size() && delta_.ops[i].patched) continue;  // the rank writes it
    const ChecksumSpan sent =
        sentSpan(plan_, op, op.converts() ? stagingAt(write_staging_offsets_[i]) : nullptr);
    const auto* first = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sent.src));
    uint8_t byte = 0;
    if (onDevice()) {
      WSYNC_RETURN_IF_ERROR(copyAsync(&byte, first, 1, stream_.get()));
      WSYNC_RETURN_IF_ERROR(streamSync(stream_.get(), options_.timeout));
    } else {
      byte = *first;
    }
    byte ^= 0xFF;
    if (onDevice()) {
      WSYNC_RETURN_IF_ERROR(copyAsync(device_corrupt_byte_.data(), &byte, 1, stream_.get()));
      WSYNC_RETURN_IF_ERROR(streamSync(stream_.get(), options_.timeout));
    } else {
      corrupt_byte_[0] = byte;
    }
    const Peer& peer =
        peers_[static_cast<size_t>(peer_of_rollout_[static_cast<size_t>(op.dst_rank)])];
    const uint64_t at =
        peer.buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] + sent.dst_offset;
    const uint8_t* from = onDevice() ? device_corrupt_byte_.data() : corrupt_byte_.data();
    WSYNC_RETURN_IF_ERROR(peer.transport->write3d(peer.slot_memory[static_cast<size_t>(slot)], at,
                                                  1, 1, from, 1, 1, 1, 1, 1));
    std::fprintf(stderr,
                 "[wsync trainer 0] debug: version %llu: corrupted byte %llu of rollout %d's slot "
                 "%d (tensor '%s')\n",
                 static_cast<unsigned long long>(go.version), static_cast<unsigned long long>(at),
                 op.dst_rank, slot, plan_.tensors[static_cast<size_t>(op.tensor)].name.c_str());
    return flushWrites();
  }
  return Status::ok();
}

}  // namespace wsync
