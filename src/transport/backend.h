// Backends of the data plane, as the registry (transport/registry.h) knows them: each backend
// folder defines one descriptor and registers it with one line in its CMakeLists.txt
// (wsync_transport_backend); the runtime chooses among them through the registry and holds only
// the interfaces (WriteTransport, Broadcaster). No backend is named outside its folder.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "layout/dtype.h"
#include "options/options.h"
#include "transport/broadcaster.h"
#include "transport/write_transport.h"

namespace wsync {

// What creating a write backend may use; the runtime fills it from its options. A backend reads
// the fields that concern it and ignores the rest.
struct TransportSetup {
  int cuda_device = 0;       // device backends: the GPU of the streams and allocations
  int32_t writer_rank = -1;  // writers: this trainer's rank (staged progress logs); -1 for targets
  std::chrono::milliseconds timeout{60000};
  // The device-transport option (WSYNC_DEVICE_TRANSPORT) as resolved: a backend that serves
  // several values (see WriteBackend::serves) reads which one was asked for.
  DeviceTransport device_transport = DeviceTransport::kCudaIpc;
  CudaIpcExport cuda_ipc_export = CudaIpcExport::kVmm;  // CUDA IPC targets: how slots are shared
  bool batch_device_copies = true;  // CUDA IPC writers: one batched kernel per flush
  bool time_device_copies = false;  // CUDA IPC writers: time the batched kernel (debug)
  bool early_landing = true;        // staged UCX writers: report writes as they complete
};

// A backend of one-sided writes (WriteTransport).
struct WriteBackend {
  const char* name;  // unique; travels in the protocol (the backend of a rollout's slots)
  // Backends of one family understand each other's addresses and memory descriptors (a host
  // writer reaches staged landing areas with plain UCX).
  const char* family;
  int priority;  // the higher wins when several fit
  // Its writes may cross a network link, so a rollout on it takes delta patches (docs/delta.md);
  // false for backends confined to one node, whose copies run as fast as a patch applies.
  bool crosses_nodes;
  // OK when this build and machine can run it; UNSUPPORTED saying why otherwise.
  Status (*viable)();
  bool (*hosts)(MemoryKind memory);        // can expose target memory of this kind
  bool (*writes_from)(MemoryKind memory);  // can write from sources of this kind
  // Whether it serves device-memory targets when the device-transport option asks for `choice`
  // (the registry's targetBackendFor); false for every choice when it hosts no device memory.
  bool (*serves)(DeviceTransport choice);
  // Whether a process whose localAddress() is `local` can reach one whose address is `remote`:
  // the same answer on both sides (a pure function of the two addresses). OK, or UNSUPPORTED
  // naming both ends. Null: always.
  Status (*reaches)(const std::vector<uint8_t>& local, const std::vector<uint8_t>& remote);
  Result<std::unique_ptr<WriteTransport>> (*create)(const TransportSetup& setup);
};

// A backend of broadcast groups (Broadcaster). A rank offers the viable ones on its memory to the
// coordinator (the registry's broadcastOffers), which chooses one by their needs alone.
struct BroadcastBackend {
  const char* name;   // unique; travels in the protocol (ranks offer it, the coordinator picks)
  MemoryKind memory;  // the memory its broadcasts read and write: only ranks on it offer it
  // Whose world its communicators come from (plan/broadcast_comm.h), hence where it is eligible.
  BroadcastWorld world;
  bool one_gpu_per_rank;  // it refuses two ranks of the job on one GPU
  Status (*viable)();
  // Backends whose world needs bootstrap bytes (an opaque token made on trainer 0 and handed to
  // every rank by the coordinator as BroadcastSetup::world_token). Null: none.
  Result<std::vector<uint8_t>> (*make_world_token)();
  Result<std::unique_ptr<Broadcaster>> (*create)(const BroadcastSetup& setup);
};

}  // namespace wsync
