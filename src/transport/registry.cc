#include "transport/registry.h"

#include <algorithm>

#include "transport/builtin_backends.h"

namespace wsync {
namespace {

template <typename Backend>
std::vector<const Backend*> byPriority(std::vector<const Backend*> backends) {
  std::stable_sort(backends.begin(), backends.end(),
                   [](const Backend* a, const Backend* b) { return a->priority > b->priority; });
  return backends;
}

const WriteBackend* findWrite(std::string_view name) {
  for (const WriteBackend* b : writeBackends())
    if (name == b->name) return b;
  return nullptr;
}

}  // namespace

const std::vector<const WriteBackend*>& writeBackends() {
  static const std::vector<const WriteBackend*> backends = byPriority(builtinWriteBackends());
  return backends;
}

const std::vector<const BroadcastBackend*>& broadcastBackends() {
  static const std::vector<const BroadcastBackend*> backends = builtinBroadcastBackends();
  return backends;
}

std::string writeBackendNames() {
  std::string names;
  for (const WriteBackend* b : writeBackends())
    names += (names.empty() ? "" : ", ") + std::string(b->name);
  return names;
}

Result<const WriteBackend*> targetBackendFor(MemoryKind memory, DeviceTransport choice) {
  const bool device = memory == MemoryKind::kDevice;
  const std::string what =
      memoryKindName(memory) + std::string(" memory") +
      (device ? std::string(" with WSYNC_DEVICE_TRANSPORT=") + optionValueName(choice)
              : std::string());
  std::string why;
  for (const WriteBackend* b : writeBackends()) {
    if (!b->hosts(memory) || (device && !b->serves(choice))) continue;
    const Status viable = b->viable();
    if (viable.isOk()) return b;
    why += std::string(why.empty() ? "" : "; ") + b->name + ": " + viable.message();
  }
  if (why.empty()) {
    return Status(WSYNC_ERR_UNSUPPORTED, "no write backend of this build can expose " + what +
                                             " (it has: " + writeBackendNames() + ")");
  }
  return Status(WSYNC_ERR_UNSUPPORTED,
                "no write backend can expose " + what + " here (" + why + ")");
}

Result<const WriteBackend*> writerBackendFor(std::string_view target, MemoryKind source) {
  const WriteBackend* t = findWrite(target);
  if (t == nullptr) {
    return invalidArgument("a rollout's slots use write backend '" + std::string(target) +
                           "', which this build does not have (it has: " + writeBackendNames() +
                           ")");
  }
  std::vector<const WriteBackend*> candidates = {t};
  for (const WriteBackend* b : writeBackends())
    if (b != t && std::string_view(b->family) == t->family) candidates.push_back(b);
  std::string why;
  for (const WriteBackend* b : candidates) {
    if (!b->writes_from(source)) continue;
    const Status viable = b->viable();
    if (viable.isOk()) return b;
    why += std::string(why.empty() ? "" : "; ") + b->name + ": " + viable.message();
  }
  return Status(WSYNC_ERR_UNSUPPORTED, std::string("no write backend here reaches '") + t->name +
                                           "' slots from " + memoryKindName(source) + " memory" +
                                           (why.empty() ? std::string() : " (" + why + ")"));
}

Result<const BroadcastBackend*> broadcastBackendNamed(std::string_view name) {
  for (const BroadcastBackend* b : broadcastBackends()) {
    if (name != b->name) continue;
    const Status viable = b->viable();
    if (!viable.isOk()) {
      return viable.withContext(std::string("broadcast backend '") + b->name + "'");
    }
    return b;
  }
  return invalidArgument("no broadcast backend '" + std::string(name) + "' in this build");
}

std::vector<BroadcastOffer> broadcastOffers(MemoryKind memory, bool make_world_tokens) {
  std::vector<BroadcastOffer> offers;
  for (const BroadcastBackend* b : broadcastBackends()) {
    if (b->memory != memory || !b->viable().isOk()) continue;
    BroadcastOffer offer;
    offer.name = b->name;
    offer.needs.world = b->world;
    offer.needs.one_gpu_per_rank = b->one_gpu_per_rank;
    offer.needs.world_token = b->make_world_token != nullptr;
    if (make_world_tokens && offer.needs.world_token) {
      Result<std::vector<uint8_t>> token = b->make_world_token();
      if (token.isOk()) offer.world_token = std::move(token).value();
    }
    offers.push_back(std::move(offer));
  }
  return offers;
}

}  // namespace wsync
