// transport/registry.h: targetBackendFor(memory, choice) answers from the descriptors'
// WriteBackend::serves, so the runtime passes the WSYNC_DEVICE_TRANSPORT enum and never names a
// backend; broadcastOffers(memory) is what a rank offers the coordinator for the broadcast choice.
// Runs on machines without a GPU (device backends then report themselves not viable).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "options/options.h"
#include "transport/backend.h"
#include "transport/registry.h"

namespace wsync {
namespace {

TEST(TransportRegistry, HostMemoryIgnoresTheDeviceChoice) {
  for (const OptionChoice<DeviceTransport>& choice : kDeviceTransportChoices) {
    const Result<const WriteBackend*> backend = targetBackendFor(MemoryKind::kHost, choice.value);
    ASSERT_TRUE(backend.isOk()) << choice.name << ": " << backend.status().toString();
    EXPECT_TRUE(backend.value()->hosts(MemoryKind::kHost)) << choice.name;
  }
}

TEST(TransportRegistry, OnlyDeviceHostsServeDeviceChoicesAtMostOneEach) {
  for (const OptionChoice<DeviceTransport>& choice : kDeviceTransportChoices) {
    int serving = 0;
    for (const WriteBackend* b : writeBackends()) {
      ASSERT_NE(b->serves, nullptr) << b->name;
      if (!b->serves(choice.value)) continue;
      EXPECT_TRUE(b->hosts(MemoryKind::kDevice)) << b->name << " serves " << choice.name;
      ++serving;
    }
    // A CUDA build has a backend for every choice; a build without CUDA has none.
    EXPECT_LE(serving, 1) << choice.name;
  }
}

TEST(TransportRegistry, DeviceChoiceTheRegistryCannotServeIsNamed) {
  for (const OptionChoice<DeviceTransport>& choice : kDeviceTransportChoices) {
    const Result<const WriteBackend*> backend = targetBackendFor(MemoryKind::kDevice, choice.value);
    if (backend.isOk()) {
      // A GPU is present: the backend hosts device memory and serves the choice.
      EXPECT_TRUE(backend.value()->hosts(MemoryKind::kDevice)) << choice.name;
      EXPECT_TRUE(backend.value()->serves(choice.value)) << choice.name;
      continue;
    }
    EXPECT_EQ(backend.status().code(), WSYNC_ERR_UNSUPPORTED) << backend.status().toString();
    EXPECT_NE(backend.status().message().find(std::string("WSYNC_DEVICE_TRANSPORT=") + choice.name),
              std::string::npos)
        << backend.status().message();
  }
}

// What a rank offers the coordinator is the registry's descriptors as they stand: only viable
// backends on the rank's memory, in registry order, each with the needs its descriptor states.
TEST(TransportRegistry, BroadcastOffersAreTheViableDescriptorsOfThatMemory) {
  for (const MemoryKind memory : {MemoryKind::kHost, MemoryKind::kDevice}) {
    const std::vector<BroadcastOffer> offers = broadcastOffers(memory, /*make_world_tokens=*/false);
    size_t next = 0;
    for (const BroadcastBackend* b : broadcastBackends()) {
      if (b->memory != memory || !b->viable().isOk()) continue;
      ASSERT_LT(next, offers.size()) << b->name;
      const BroadcastOffer& offer = offers[next++];
      EXPECT_EQ(offer.name, b->name);
      EXPECT_EQ(offer.needs.world, b->world) << b->name;
      EXPECT_EQ(offer.needs.one_gpu_per_rank, b->one_gpu_per_rank) << b->name;
      EXPECT_EQ(offer.needs.world_token, b->make_world_token != nullptr) << b->name;
      EXPECT_TRUE(offer.world_token.empty()) << b->name << ": tokens are made on request only";
    }
    EXPECT_EQ(next, offers.size()) << memoryKindName(memory);
  }
}

// A backend whose writes cross nodes exposes host memory for its targets' delta patches
// (WriteTransport::allocateExposedHost): the owner reads it in data() with no landing, and a
// writer of the backend reaches it from host sources. Others may refuse, naming themselves. Each
// viable backend writes into its own memory (no second process).
TEST(TransportRegistry, BackendsThatCrossNodesExposeHostMemory) {
  constexpr size_t kBytes = 64 << 10;
  for (const WriteBackend* b : writeBackends()) {
    if (!b->viable().isOk()) continue;
    Result<std::unique_ptr<WriteTransport>> created = b->create(TransportSetup{});
    ASSERT_TRUE(created.isOk()) << b->name << ": " << created.status().toString();
    WriteTransport& t = *created.value();
    Result<std::unique_ptr<ExposedMemory>> area = t.allocateExposedHost(kBytes);
    if (!area.isOk()) {
      EXPECT_FALSE(b->crosses_nodes) << b->name << ": " << area.status().toString();
      EXPECT_EQ(area.status().code(), WSYNC_ERR_UNSUPPORTED) << b->name;
      EXPECT_NE(area.status().message().find(t.name()), std::string::npos)
          << area.status().message();
      continue;
    }
    ExposedMemory& memory = *area.value();
    ASSERT_GE(memory.size(), kBytes) << b->name;
    EXPECT_FALSE(memory.needsLanding()) << b->name;
    std::memset(memory.data(), 0xA5, kBytes);
    ASSERT_TRUE(t.connect(0, t.localAddress()).isOk()) << b->name;
    Result<RemoteMemoryId> id = t.attach(0, memory.descriptor());
    ASSERT_TRUE(id.isOk()) << b->name << ": " << id.status().toString();
    std::vector<uint8_t> source(kBytes);
    for (size_t i = 0; i < kBytes; ++i)
      source[i] = static_cast<uint8_t>(i * 31 + 7);
    ASSERT_TRUE(t.write(id.value(), 100, source.data(), 30000).isOk()) << b->name;
    ASSERT_TRUE(t.write(id.value(), 40000, source.data() + 1000, 2000).isOk()) << b->name;
    const Status flushed = t.flush(std::chrono::seconds(60));
    ASSERT_TRUE(flushed.isOk()) << b->name << ": " << flushed.toString();
    std::vector<uint8_t> want(kBytes, 0xA5);
    std::memcpy(want.data() + 100, source.data(), 30000);
    std::memcpy(want.data() + 40000, source.data() + 1000, 2000);
    EXPECT_EQ(std::memcmp(memory.data(), want.data(), kBytes), 0) << b->name;
  }
}

}  // namespace
}  // namespace wsync
