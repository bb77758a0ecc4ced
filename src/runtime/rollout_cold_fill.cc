#include "runtime/rollout_cold_fill.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "codec/plan_codec.h"
#include "transport/registry.h"

namespace wsync {
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

Status ColdFiller::start(ColdFillMsg fill, SlotStore& store) {
  Result<Lease> lease = store.acquire(fill.version);
  if (!lease.isOk()) {  // overwritten meanwhile: the coordinator retries with a newer version
    const Status why =
        lease.status().withContext("rollout " + std::to_string(source_.rank) +
                                   " cannot copy version " + std::to_string(fill.version));
    return send_done_(ColdFillDoneMsg{fill.fill, why.code(), why.message(), 0});
  }
  std::lock_guard lock(mu_);
  queue_.push_back({std::move(fill), std::move(lease).value()});
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
  return Status::ok();
}

void ColdFiller::loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;  // queued fills release their leases unanswered
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Result<uint64_t> bytes = run(job.fill, job.lease);
    job.lease.release();  // the writes are flushed (or failed): the slot may be reused
    ColdFillDoneMsg done{job.fill.fill, WSYNC_SUCCESS, "", 0};
    if (bytes.isOk()) {
      done.bytes = *bytes;
    } else {
      done.code = bytes.status().code();
      done.message = bytes.status().message();
    }
    (void)send_done_(done);  // a dead channel: the job ends
    lock.lock();
  }
}

void ColdFiller::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    queue_.clear();  // their leases go back; the coordinator learns of this rank's end
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<uint64_t> ColdFiller::run(const ColdFillMsg& fill, const Lease& lease) {
  const std::string what = "rollout " + std::to_string(source_.rank) + ", cold fill of version " +
                           std::to_string(fill.version);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  WSYNC_ASSIGN_OR_RETURN(RankPlan plan,
                         decodeRankPlan(fill.rank_plan.data(), fill.rank_plan.size()));
  const std::vector<LocalBuffer>& buffers = *source_.buffers;
  const std::vector<uint64_t>& buffer_byte_offsets = *source_.buffer_byte_offsets;
  const ExposedMemory& source = *(*source_.slots)[static_cast<size_t>(lease.slot())];
  // Transports (declared before the registrations: those go first), one per backend.
  std::vector<std::pair<const WriteBackend*, std::unique_ptr<WriteTransport>>> transports;
  std::vector<std::unique_ptr<SourceRegistration>> registrations;
  std::vector<std::pair<int32_t, FillTarget>> targets;  // by joiner rank
  for (const PeerInfo& peer : fill.peers) {
    const std::string where =
        what + " into rollout " + std::to_string(peer.rank) + " (" + peer.transport + ")";
    Result<const WriteBackend*> backend = writerBackendFor(peer.transport, source_.memory);
    if (!backend.isOk()) return backend.status().withContext(where);
    auto it = std::find_if(transports.begin(), transports.end(),
                           [&](const auto& t) { return t.first == *backend; });
    if (it == transports.end()) {
      WSYNC_ASSIGN_OR_RETURN(auto transport, (*backend)->create(settings_.transport));
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
  const auto hold_until = Clock::now() + std::chrono::milliseconds(settings_.debug_delay_ms);
  while (Clock::now() < hold_until && !stopped_())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  uint64_t bytes = 0;
  for (const WriteOp& op : plan.writes) {
    if (stopped_()) return Status(WSYNC_ERR_ABORTED, what + ": stopped");
    const std::string tensor = static_cast<size_t>(op.tensor) < plan.tensors.size()
                                   ? plan.tensors[static_cast<size_t>(op.tensor)].name
                                   : "?";
    const auto target = std::find_if(targets.begin(), targets.end(),
                                     [&](const auto& t) { return t.first == op.dst_rank; });
    const Region r = plan.region(op);
    const bool source_ok = op.src_buffer >= 0 &&
                           static_cast<size_t>(op.src_buffer) < buffers.size() &&
                           buffers[static_cast<size_t>(op.src_buffer)].dtype == op.src_dtype &&
                           sourceEnd(r) <= buffers[static_cast<size_t>(op.src_buffer)].num_elements;
    if (op.converts() || !source_ok || target == targets.end() || op.dst_buffer < 0 ||
        static_cast<size_t>(op.dst_buffer) >= target->second.buffer_byte_offsets.size()) {
      return protocolError(what + ": a write of tensor '" + tensor + "' to rollout " +
                           std::to_string(op.dst_rank) +
                           " does not fit this rank's buffers or the joiner's");
    }
    const size_t sz = dtypeSize(op.src_dtype);
    const FillTarget& t = target->second;
    const uint8_t* src = static_cast<const uint8_t*>(source.data()) +
                         buffer_byte_offsets[static_cast<size_t>(op.src_buffer)] +
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
    WSYNC_RETURN_IF_ERROR(transport->flush(settings_.timeout).withContext(what));
  if (settings_.debug_timing) {
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(stderr,
                 "[wsync rollout %d] cold fill %llu: %llu bytes; transports and peers %.3f ms, "
                 "posting %.3f ms, flush %.3f ms\n",
                 source_.rank, static_cast<unsigned long long>(fill.fill),
                 static_cast<unsigned long long>(bytes), ms(started, connected),
                 ms(connected, posted), ms(posted, Clock::now()));
  }
  return bytes;
}

}  // namespace wsync
