// A rollout rank as the source of peer cold starts (docs/membership.md): it writes the version it
// holds into a joining replica's slots, rank to rank over the data plane, while its receiver thread
// goes on serving its own replica's versions.
//
// The receiver thread calls start() in the order of the coordinator's messages, so that a version
// the coordinator believes ready here is still held when its lease is taken; the cold fill thread
// (started with the first fill) does the rest, one fill at a time in order: per fill a transport
// per write backend the joiner's slots need (writerBackendFor the target's backend and this rank's
// memory, as a trainer's peers), the leased slot registered as the source, the joiner's ranks
// connected and their target slot attached; then the writes, one flush per transport, the lease
// released, and ColdFillDone. The transports live for one fill only: a joiner's connection and
// mapped slots are released with them (cold starts are rare; each one pays the transport's
// creation, measured in the time to first version). No sockets of its own: ColdFillDone goes out
// through the `send_done` callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "layout/registration.h"
#include "protocol/protocol.h"
#include "store/slot_store.h"
#include "transport/backend.h"
#include "transport/write_transport.h"

namespace wsync {

class ColdFiller {
 public:
  // This rank's slots as fills read them; every pointer outlives the filler.
  struct Source {
    int32_t rank = -1;
    MemoryKind memory = MemoryKind::kHost;
    const std::vector<LocalBuffer>* buffers = nullptr;           // the registered buffers
    const std::vector<uint64_t>* buffer_byte_offsets = nullptr;  // where each starts in a slot
    const std::vector<std::unique_ptr<ExposedMemory>>* slots = nullptr;  // by slot index
  };
  struct Settings {
    TransportSetup transport;                  // of each fill's transports
    std::chrono::milliseconds timeout{60000};  // each flush
    int debug_delay_ms = 0;     // WSYNC_DEBUG_COLD_FILL_DELAY_MS: hold the lease first
    bool debug_timing = false;  // WSYNC_DEBUG_TIMING: a fill's phases on stderr
  };
  // Sends ColdFillDone to the coordinator (from the receiver or the cold fill thread).
  using SendDone = std::function<Status(const ColdFillDoneMsg& done)>;
  // True once the rank stops (fills in progress end ABORTED).
  using Stopped = std::function<bool()>;

  ColdFiller(Source source, Settings settings, SendDone send_done, Stopped stopped)
      : source_(source),
        settings_(settings),
        send_done_(std::move(send_done)),
        stopped_(std::move(stopped)) {}
  ~ColdFiller() { stop(); }
  ColdFiller(const ColdFiller&) = delete;
  ColdFiller& operator=(const ColdFiller&) = delete;

  // Receiver thread: takes a lease on `fill`'s version in `store` and queues the fill; when the
  // version is no longer held (overwritten meanwhile), answers ColdFillDone with NOT_READY at once
  // (the coordinator retries with a newer version). An error only when that answer fails.
  Status start(ColdFillMsg fill, SlotStore& store);
  // Ends the cold fill thread after the fill it runs; queued fills release their leases
  // unanswered (the coordinator learns of this rank's end). Idempotent.
  void stop();
  // Writes this rank's part of `fill` from the slot `lease` holds; returns the bytes written.
  // Errors name the rank, the version, the joiner's rank and the tensor where they apply.
  Result<uint64_t> run(const ColdFillMsg& fill, const Lease& lease);

 private:
  struct Job {
    ColdFillMsg fill;
    Lease lease;
  };
  void loop();

  const Source source_;
  const Settings settings_;
  const SendDone send_done_;
  const Stopped stopped_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace wsync
