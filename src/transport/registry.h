// The registry of data-plane backends: every backend this build has, in priority order (the list
// is generated from the backend folders' registrations; see transport/CMakeLists.txt). The
// runtime asks it which backend fits a memory kind and a peer; it never names a backend itself.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/backend.h"

namespace wsync {

// Every registered backend, highest priority first (viable or not).
const std::vector<const WriteBackend*>& writeBackends();
const std::vector<const BroadcastBackend*>& broadcastBackends();

// The backend that exposes a target's (a rollout's slots) `memory`: the viable one of highest
// priority that hosts it and, for device memory, serves the device-transport option's `choice`
// (WriteBackend::serves; the choice is ignored for host memory). UNSUPPORTED naming the choice
// when no backend of this build serves it, or listing why each one that does cannot run here.
Result<const WriteBackend*> targetBackendFor(MemoryKind memory, DeviceTransport choice);

// The backend a writer whose sources are `source` memory uses to reach a target exposed by
// backend `target`: the target's own backend when it writes from `source`, else the viable one of
// highest priority in the target's family that does. INVALID_ARGUMENT for an unknown target name,
// UNSUPPORTED when none fits.
Result<const WriteBackend*> writerBackendFor(std::string_view target, MemoryKind source);

// A broadcast backend by name (the coordinator's choice): INVALID_ARGUMENT when unknown,
// UNSUPPORTED when not viable here.
Result<const BroadcastBackend*> broadcastBackendNamed(std::string_view name);

// What a rank whose memory is `memory` offers the coordinator (RegisterMsg::broadcast_offers):
// every viable broadcast backend on that memory, in registry order, with its needs. With
// `make_world_tokens` (trainer 0), each offer whose backend needs a world token carries one
// (empty when making it failed: the coordinator then rules that backend out and says why).
std::vector<BroadcastOffer> broadcastOffers(MemoryKind memory, bool make_world_tokens);

// Registered names, for messages: "ucx, cuda_ipc, ucx_staged".
std::string writeBackendNames();

}  // namespace wsync
