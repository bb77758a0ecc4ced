// A trainer's write side of the data plane (docs/architecture.md, "Backends and the registry"):
// one transport per write backend, created as peers need one; every source memory (what writes
// read from) registered once with every transport, those created later included; the rollout
// ranks this trainer writes, each connected once with every slot attached. Publisher thread
// (commit: the committing thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "protocol/protocol.h"
#include "transport/backend.h"
#include "transport/write_transport.h"

namespace wsync {

class TrainerPeers {
 public:
  // Before anything else: the memory of this trainer's sources and how its transports are made.
  void setUp(MemoryKind memory, TransportSetup setup) {
    memory_ = memory;
    setup_ = setup;
  }
  // Memory writes read from, registered with every transport (existing and later ones). Memory
  // that is empty (null or 0 bytes) is skipped.
  Status addSource(const void* base, size_t bytes);

  // Connects rollout rank `p.rank` through the write backend that reaches its slots from this
  // trainer's memory, and attaches each of its slots; `also` (may be null) runs with its transport
  // before the rank counts as connected. Errors name the rank and its backend.
  Status connect(const PeerInfo& p, const std::function<Status(WriteTransport&)>& also);
  bool connected(int32_t rollout) const { return peerOf(rollout) != nullptr; }

  // Posts a 3-D write into `slot` of rollout `rollout`: `dst_offset` bytes from the start of its
  // buffer `dst_buffer` in the slot, with the destination pitches in bytes, from `src` (source
  // pitches in bytes): `planes` planes of `rows` rows of `row_bytes`. PROTOCOL for a rank or slot
  // that was never connected or attached.
  Status write(int32_t rollout, int32_t slot, int32_t dst_buffer, uint64_t dst_offset,
               uint64_t dst_pitch, uint64_t dst_plane_pitch, const uint8_t* src, size_t src_pitch,
               size_t src_plane_pitch, size_t row_bytes, size_t rows, size_t planes);
  // Where the transport reaching rollout `rollout` maps its memory into this process's device
  // address space (WriteTransport::remoteAddress): the device address of `bytes` bytes at
  // `dst_offset` into buffer `dst_buffer` of `slot`, for a kernel that writes them in place (the
  // caller synchronizes it before flush()); nullptr where the transport maps nothing.
  Result<uint8_t*> remoteAddress(int32_t rollout, int32_t slot, int32_t dst_buffer,
                                 uint64_t dst_offset, uint64_t bytes);
  // Completes every posted write on every transport.
  Status flush(std::chrono::milliseconds timeout);

 private:
  struct Backend {
    const WriteBackend* backend = nullptr;
    std::unique_ptr<WriteTransport> transport;
  };
  struct Peer {
    int32_t rollout = -1;
    WriteTransport* transport = nullptr;
    std::vector<RemoteMemoryId> slot_memory;  // per slot
    std::vector<uint64_t> buffer_byte_offsets;
  };
  struct Source {
    const void* base = nullptr;
    size_t bytes = 0;
  };
  struct Target {
    WriteTransport* transport = nullptr;
    RemoteMemoryId remote = -1;
    uint64_t offset = 0;  // bytes into the remote memory
  };
  Result<Target> targetOf(int32_t rollout, int32_t slot, int32_t dst_buffer,
                          uint64_t dst_offset) const;
  Result<WriteTransport*> transportFor(const WriteBackend* backend);
  const Peer* peerOf(int32_t rollout) const;

  MemoryKind memory_ = MemoryKind::kHost;
  TransportSetup setup_;
  std::vector<Backend> transports_;
  std::vector<int32_t> peer_of_rollout_;  // rollout rank -> index into peers_, -1 if none
  std::vector<Peer> peers_;
  std::vector<Source> sources_;
  // Declared after the transports: the registrations go first.
  std::vector<std::unique_ptr<SourceRegistration>> registrations_;
};

}  // namespace wsync
