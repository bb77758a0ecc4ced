#include "runtime/trainer_peers.h"

#include <string>
#include <utility>

#include "transport/registry.h"

namespace wsync {

Status TrainerPeers::addSource(const void* base, size_t bytes) {
  if (bytes == 0 || base == nullptr) return Status::ok();
  sources_.push_back({base, bytes});
  for (const Backend& b : transports_) {
    WSYNC_ASSIGN_OR_RETURN(auto reg, b.transport->registerSource(base, bytes));
    registrations_.push_back(std::move(reg));
  }
  return Status::ok();
}

// The transport of `backend`, created (and given every source to register) on first use.
Result<WriteTransport*> TrainerPeers::transportFor(const WriteBackend* backend) {
  for (const Backend& b : transports_)
    if (b.backend == backend) return b.transport.get();
  WSYNC_ASSIGN_OR_RETURN(std::unique_ptr<WriteTransport> transport, backend->create(setup_));
  for (const Source& s : sources_) {
    WSYNC_ASSIGN_OR_RETURN(auto reg, transport->registerSource(s.base, s.bytes));
    registrations_.push_back(std::move(reg));
  }
  transports_.push_back({backend, std::move(transport)});
  return transports_.back().transport.get();
}

Status TrainerPeers::connect(const PeerInfo& p,
                             const std::function<Status(WriteTransport&)>& also) {
  const std::string where = "rollout " + std::to_string(p.rank) + " (" + p.transport + ")";
  if (p.rank < 0) return protocolError(where + ": not a rollout rank");
  Result<const WriteBackend*> backend = writerBackendFor(p.transport, memory_);
  if (!backend.isOk()) return backend.status().withContext(where);
  WSYNC_ASSIGN_OR_RETURN(WriteTransport * transport, transportFor(*backend));
  if ((*backend)->reaches != nullptr) {
    const Status reach = (*backend)->reaches(transport->localAddress(), p.transport_address);
    if (!reach.isOk()) return reach.withContext(where);
  }
  WSYNC_RETURN_IF_ERROR(transport->connect(p.rank, p.transport_address).withContext(where));
  Peer peer;
  peer.rollout = p.rank;
  peer.transport = transport;
  for (const auto& descriptor : p.slot_descriptors) {
    Result<RemoteMemoryId> id = transport->attach(p.rank, descriptor);
    if (!id.isOk()) {
      return id.status().withContext(where + ", slot " + std::to_string(peer.slot_memory.size()));
    }
    peer.slot_memory.push_back(*id);
  }
  peer.buffer_byte_offsets = p.buffer_byte_offsets;
  if (also) WSYNC_RETURN_IF_ERROR(also(*transport).withContext(where));
  if (peer_of_rollout_.size() <= static_cast<size_t>(p.rank))
    peer_of_rollout_.resize(static_cast<size_t>(p.rank) + 1, -1);
  peer_of_rollout_[static_cast<size_t>(p.rank)] = static_cast<int32_t>(peers_.size());
  peers_.push_back(std::move(peer));
  return Status::ok();
}

const TrainerPeers::Peer* TrainerPeers::peerOf(int32_t rollout) const {
  if (rollout < 0 || static_cast<size_t>(rollout) >= peer_of_rollout_.size()) return nullptr;
  const int32_t index = peer_of_rollout_[static_cast<size_t>(rollout)];
  return index < 0 ? nullptr : &peers_[static_cast<size_t>(index)];
}

// The peer, remote memory and byte offset of `dst_offset` bytes into buffer `dst_buffer` of `slot`
// of rollout `rollout`; PROTOCOL for a rank, slot or buffer never connected or attached.
Result<TrainerPeers::Target> TrainerPeers::targetOf(int32_t rollout, int32_t slot,
                                                    int32_t dst_buffer, uint64_t dst_offset) const {
  const Peer* peer = peerOf(rollout);
  if (peer == nullptr) {
    return protocolError("a write targets rollout " + std::to_string(rollout) +
                         " with no peer information");
  }
  if (slot < 0 || static_cast<size_t>(slot) >= peer->slot_memory.size()) {
    return protocolError("slot " + std::to_string(slot) + " of rollout " + std::to_string(rollout) +
                         " is unknown");
  }
  if (dst_buffer < 0 || static_cast<size_t>(dst_buffer) >= peer->buffer_byte_offsets.size()) {
    return protocolError("buffer " + std::to_string(dst_buffer) + " of rollout " +
                         std::to_string(rollout) + " is unknown");
  }
  return Target{peer->transport, peer->slot_memory[static_cast<size_t>(slot)],
                peer->buffer_byte_offsets[static_cast<size_t>(dst_buffer)] + dst_offset};
}

Status TrainerPeers::write(int32_t rollout, int32_t slot, int32_t dst_buffer, uint64_t dst_offset,
                           uint64_t dst_pitch, uint64_t dst_plane_pitch, const uint8_t* src,
                           size_t src_pitch, size_t src_plane_pitch, size_t row_bytes, size_t rows,
                           size_t planes) {
  WSYNC_ASSIGN_OR_RETURN(const Target t, targetOf(rollout, slot, dst_buffer, dst_offset));
  return t.transport->write3d(t.remote, t.offset, dst_pitch, dst_plane_pitch, src, src_pitch,
                              src_plane_pitch, row_bytes, rows, planes);
}

Result<uint8_t*> TrainerPeers::remoteAddress(int32_t rollout, int32_t slot, int32_t dst_buffer,
                                             uint64_t dst_offset, uint64_t bytes) {
  WSYNC_ASSIGN_OR_RETURN(const Target t, targetOf(rollout, slot, dst_buffer, dst_offset));
  Result<void*> address = t.transport->remoteAddress(t.remote, t.offset, bytes);
  if (!address.isOk() && address.status().code() == WSYNC_ERR_UNSUPPORTED)
    return static_cast<uint8_t*>(nullptr);
  WSYNC_RETURN_IF_ERROR(address.status().withContext("rollout " + std::to_string(rollout)));
  return static_cast<uint8_t*>(*address);
}

Status TrainerPeers::flush(std::chrono::milliseconds timeout) {
  for (const Backend& b : transports_)
    WSYNC_RETURN_IF_ERROR(b.transport->flush(timeout));
  return Status::ok();
}

}  // namespace wsync
