// RolloutContext as the source of a peer cold start (runtime/rollout_context.h): it writes the
// version it holds into a joining replica's slots, rank to rank over the data plane, while its
// receiver thread goes on serving its own replica's versions.
//
// The receiver thread takes the lease (in the order of the coordinator's messages, so that a
// version the coordinator believes ready here is still held), the cold fill thread does the rest:
// for each fill a transport per write backend the joiner's slots need (writerBackendFor the
// target's backend and this rank's memory, as a trainer's connectPeer), this rank's leased slot
// registered as the source, the joiner's ranks connected and their target slot attached; then the
// writes, one flush per transport, and ColdFillDone. The transports live for one fill only: a
// joiner's connection and mapped slots are released with them (cold starts are rare; each one
// pays the transport's creation, measured in the time to first version).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "codec/plan_codec.h"
#include "runtime/rollout_context.h"
#include "transport/registry.h"

namespace wsync {

Status RolloutContext::startColdFill(const Frame& frame) {
  ColdFillMsg fill;
  WSYNC_RETURN_IF_ERROR(decode(frame.payload, fill));
  Result<Lease> lease = store_->acquire(fill.version);
  if (!lease.isOk()) {  // overwritten meanwhile: the coordinator retries with a newer version
    const Status why =
        lease.status().withContext("rollout " + std::to_string(rank()) + " cannot copy version " +
                                   std::to_string(fill.version));
    return sendMessage(MessageType::kColdFillDone,
                       encode(ColdFillDoneMsg{fill.fill, why.code(), why.message(), 0}));
  }
  std::lock_guard lock(fill_mu_);
  fill_queue_.push_back({std::move(fill), std::move(lease).value()});
  if (!cold_filler_.joinable()) cold_filler_ = std::thread([this] { coldFillLoop(); });
  fill_cv_.notify_all();
  return Status::ok();
}

void RolloutContext::coldFillLoop() {
  std::unique_lock lock(fill_mu_);
  while (true) {
    fill_cv_.wait(lock, [this] { return fill_stopping_ || !fill_queue_.empty(); });
    if (fill_stopping_) return;  // queued fills release their leases unanswered
    ColdFillJob job = std::move(fill_queue_.front());
    fill_queue_.pop_front();
    lock.unlock();
    Result<uint64_t> bytes = runColdFill(job.fill, job.lease);
    job.lease.release();  // the writes are flushed (or failed): the slot may be reused
    ColdFillDoneMsg done{job.fill.fill, WSYNC_SUCCESS, "", 0};
    if (bytes.isOk()) {
      done.bytes = *bytes;
    } else {
      done.code = bytes.status().code();
      done.message = bytes.status().message();
    }
    (void)sendMessage(MessageType::kColdFillDone, encode(done));  // a dead channel: the job ends
    lock.lock();
  }
}

namespace {

// A joiner rank as this fill writes it.
struct FillTarget {
  WriteTransport* transport = nullptr;
  RemoteMemoryId slot = -1;
  std::vector<uint64_t> buffer_byte_offsets;
};

// The highest element (+1) of `region`'s source side: it must lie inside the source buffer.
int64_t sourceEnd(const Region& r) {
  if (r.numElements() == 0) return 0;
  return r.src_offset + (r.count[0] - 1) + (r.count[1] - 1) * r.src_stride[0] +
         (r.count[2] - 1) * r.src_stride[1] + 1;
}

}  // namespace

Result<uint64_t> RolloutContext::runColdFill(const ColdFillMsg& fill, const Lease& lease) {
  const std::string what = "rollout " + std::to_string(rank()) + ", cold fill of version " +
                           std::to_string(fill.version);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  WSYNC_ASSIGN_OR_RETURN(RankPlan plan,
                         decodeRankPlan(fill.rank_plan.data(), fill.rank_plan.size()));
  const ExposedMemory& source = *slots_[static_cast<size_t>(lease.slot())];
  // Transports (declared before the registrations: those go first), one per backend.
  std::vector<std::pair<const WriteBackend*, std::unique_ptr<WriteTransport>>> transports;
  std::vector<std::unique_ptr<SourceRegistration>> registrations;
  std::vector<std::pair<int32_t, FillTarget>> targets;  // by joiner rank
  for (const PeerInfo& peer : fill.peers) {
    const std::string where =
        what + " into rollout " + std::to_string(peer.rank) + " (" + peer.transport + ")";
    Result<const WriteBackend*> backend = writerBackendFor(peer.transport, memoryKind());
    if (!backend.isOk()) return backend.status().withContext(where);
    auto it = std::find_if(transports.begin(), transports.end(),
                           [&](const auto& t) { return t.first == *backend; });
    if (it == transports.end()) {
      WSYNC_ASSIGN_OR_RETURN(auto transport, (*backend)->create(transportSetup(-1)));
      WSYNC_ASSIGN_OR_RETURN(auto reg, transport->registerSource(source.data(), source.size()));
      registrations.push_back(std::move(reg));
      transports.emplace_back(*backend, std::move(transport));
      it = transports.end() - 1;
    }
    WriteTransport& transport = *it->second;
    if ((*backend)->reaches != nullptr) {
      const Status reach = (*backend)->reaches(transport.localAddress(), peer.transport_address);
      if (!reach.isOk()) return reach.withContext(where);
    }
    WSYNC_RETURN_IF_ERROR(transport.connect(peer.rank, peer.transport_address).withContext(where));
    FillTarget target{&transport, -1, peer.buffer_byte_offsets};
    WSYNC_ASSIGN_OR_RETURN(
        target.slot,
        transport.attach(peer.rank, peer.slot_descriptors[static_cast<size_t>(fill.target_slot)]));
    targets.emplace_back(peer.rank, std::move(target));
  }
  const Clock::time_point connected = Clock::now();
  // Debug: hold the lease a while before writing (a test kills this rank meanwhile).
  const auto hold_until = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(options_.settings.debug_cold_fill_delay_ms);
  while (std::chrono::steady_clock::now() < hold_until && !stopping_ && !failedOrAborted())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  uint64_t bytes = 0;
  for (const WriteOp& op : plan.writes) {
    if (stopping_ || failedOrAborted()) return Status(WSYNC_ERR_ABORTED, what + ": stopped");
    const std::string tensor = static_cast<size_t>(op.tensor) < plan.tensors.size()
                                   ? plan.tensors[static_cast<size_t>(op.tensor)].name
                                   : "?";
    const auto target = std::find_if(targets.begin(), targets.end(),
                                     [&](const auto& t) { return t.first == op.dst_rank; });
    const Region r = plan.region(op);
    const bool source_ok =
        op.src_buffer >= 0 && op.src_buffer < numBuffers() &&
        registration_.buffers[static_cast<size_t>(op.src_buffer)].dtype == op.src_dtype &&
        sourceEnd(r) <= registration_.buffers[static_cast<size_t>(op.src_buffer)].num_elements;
    if (op.converts() || !source_ok || target == targets.end() || op.dst_buffer < 0 ||
        static_cast<size_t>(op.dst_buffer) >= target->second.buffer_byte_offsets.size()) {
      return protocolError(what + ": a write of tensor '" + tensor + "' to rollout " +
                           std::to_string(op.dst_rank) +
                           " does not fit this rank's buffers or the joiner's");
    }
    const size_t sz = dtypeSize(op.src_dtype);
    const FillTarget& t = target->second;
    const uint8_t* src = static_cast<const uint8_t*>(source.data()) +
                         buffer_byte_offsets_[static_cast<size_t>(op.src_buffer)] +
                         static_cast<size_t>(r.src_offset) * sz;
    const Status posted = t.transport->write3d(
        t.slot, t.buffer_byte_offsets[static_cast<size_t>(op.dst_buffer)] + r.dst_offset * sz,
        static_cast<uint64_t>(r.dst_stride[0]) * sz, static_cast<uint64_t>(r.dst_stride[1]) * sz,
        src, static_cast<size_t>(r.src_stride[0]) * sz, static_cast<size_t>(r.src_stride[1]) * sz,
        static_cast<size_t>(r.count[0]) * sz, static_cast<size_t>(r.count[1]),
        static_cast<size_t>(r.count[2]));
    if (!posted.isOk()) return posted.withContext(what + ", tensor '" + tensor + "'");
    bytes += static_cast<uint64_t>(r.numElements()) * sz;
  }
  const Clock::time_point posted = Clock::now();
  for (auto& [backend, transport] : transports)
    WSYNC_RETURN_IF_ERROR(transport->flush(options_.timeout).withContext(what));
  if (options_.settings.debug_timing) {  // WSYNC_DEBUG_TIMING: the fill's phases on stderr
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(stderr,
                 "[wsync rollout %d] cold fill %llu: %llu bytes; transports and peers %.3f ms, "
                 "posting %.3f ms, flush %.3f ms\n",
                 rank(), static_cast<unsigned long long>(fill.fill),
                 static_cast<unsigned long long>(bytes), ms(started, connected),
                 ms(connected, posted), ms(posted, Clock::now()));
  }
  return bytes;
}

void RolloutContext::stopColdFills() {
  {
    std::lock_guard lock(fill_mu_);
    fill_stopping_ = true;
    fill_queue_.clear();  // their leases go back; the coordinator learns of this rank's end
  }
  fill_cv_.notify_all();
  if (cold_filler_.joinable()) cold_filler_.join();
}

}  // namespace wsync
