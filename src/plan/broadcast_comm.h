// Broadcast communicators and what a broadcast backend needs of a job, as the coordinator maps a
// plan's groups onto communicators and chooses the backend, and every broadcast backend states and
// builds them: shared by the coordinator (which chooses and assigns), the protocol (which carries
// them), and the broadcast backends (transport/backend.h), so it lives below all three.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wsync {

// A broadcast communicator: the member set of broadcast groups, as world ranks of the chosen
// backend's world (BroadcastWorld). Created by every rank that creates it in increasing id order.
struct BroadcastComm {
  int32_t id = 0;
  std::vector<int32_t> world_ranks;  // sorted; the sender is one of them
};

// Whose world a broadcast backend's communicators are drawn from: how the coordinator numbers the
// ranks and which communicators each rank creates.
enum class BroadcastWorld : uint8_t {
  // The MPI job's world: world ranks are MPI world ranks, so only a job launched under MPI can
  // have it. A rank creates the communicators it belongs to.
  kMpiJob = 0,
  // A world of the job's own ranks, trainers first (trainer t is rank t, rollout r is rank
  // num_trainers + r). Creating a communicator is collective over the whole world, so every rank
  // creates every communicator.
  kJobRanks = 1,
};
inline constexpr BroadcastWorld kMaxBroadcastWorld = BroadcastWorld::kJobRanks;

// What a broadcast backend needs of a job before the coordinator may choose it. A backend's
// descriptor states it; every rank that can run the backend reports it with its offer.
struct BroadcastNeeds {
  BroadcastWorld world = BroadcastWorld::kMpiJob;
  bool one_gpu_per_rank = false;  // no two ranks of the job on one GPU (and every rank on a GPU)
  // Its world is made from bootstrap bytes (an opaque byte string) that the backend makes on
  // trainer 0 and the coordinator hands to every rank.
  bool world_token = false;
  bool operator==(const BroadcastNeeds&) const = default;
};

// A broadcast backend one rank can run on its memory, offered to the coordinator at Register.
struct BroadcastOffer {
  std::string name;  // the backend's registry name; opaque to the coordinator
  BroadcastNeeds needs;
  // Trainer 0 only, when needs.world_token: the token its backend made (empty when it could not).
  std::vector<uint8_t> world_token;
};

}  // namespace wsync
