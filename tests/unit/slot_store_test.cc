// SlotStore: state transitions, every error, lease/write exclusion, waits, abort, and a
// writer/readers stress test over a shared fake slot memory (run it under TSan too).
#include "store/slot_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

namespace wsync {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr milliseconds kLong{10000};  // a wait that must not time out in a passing test

std::unique_ptr<SlotStore> makeStore(int slots) {
  Result<std::unique_ptr<SlotStore>> r = SlotStore::create(slots);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? std::move(r).value() : nullptr;
}

// beginWrite + markReady with no leases in the way.
::testing::AssertionResult writeVersion(SlotStore& store, int slot, uint64_t version) {
  if (Status s = store.beginWrite(slot, version, milliseconds(0)); !s.isOk()) {
    return ::testing::AssertionFailure() << "beginWrite: " << s.toString();
  }
  if (Status s = store.markReady(slot, version); !s.isOk()) {
    return ::testing::AssertionFailure() << "markReady: " << s.toString();
  }
  return ::testing::AssertionSuccess();
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_STATUS(expr, want_code, ...)                                     \
  do {                                                                          \
    const ::wsync::Status st_ = (expr);                                         \
    EXPECT_EQ(st_.code(), want_code) << st_.toString();                         \
    for (const char* part_ : std::initializer_list<const char*>{__VA_ARGS__}) { \
      EXPECT_TRUE(contains(st_.message(), part_))                               \
          << "missing '" << part_ << "' in: " << st_.message();                 \
    }                                                                           \
  } while (0)

TEST(SlotStore, CreateChecksSlotCount) {
  EXPECT_STATUS(SlotStore::create(1).status(), WSYNC_ERR_INVALID_ARGUMENT, "1 slots");
  EXPECT_STATUS(SlotStore::create(SlotStore::kMaxSlots + 1).status(), WSYNC_ERR_INVALID_ARGUMENT,
                "65 slots");
  auto store = makeStore(3);
  ASSERT_TRUE(store);
  EXPECT_EQ(store->numSlots(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(store->slotInfo(i)->state, SlotState::kEmpty);
    EXPECT_EQ(store->leasesHeld(i), 0);
  }
  EXPECT_FALSE(store->slotInfo(3).has_value());
  EXPECT_EQ(store->leasesHeld(-1), -1);
}

TEST(SlotStore, EmptyStoreHasNothingToRead) {
  auto store = makeStore(2);
  EXPECT_FALSE(store->newestReady().has_value());
  EXPECT_STATUS(store->acquire().status(), WSYNC_ERR_NOT_READY, "no version is ready");
  EXPECT_STATUS(store->acquire(0).status(), WSYNC_ERR_NOT_READY, "version 0");
  Result<int> pick = store->pickSlotForWrite();
  ASSERT_TRUE(pick.isOk());
  EXPECT_EQ(*pick, 0);
}

TEST(SlotStore, StateTransitionsAndLeases) {
  auto store = makeStore(2);
  ASSERT_TRUE(store->beginWrite(0, 1, milliseconds(0)).isOk());
  EXPECT_EQ(store->slotInfo(0)->state, SlotState::kWriting);
  EXPECT_EQ(store->slotInfo(0)->version, 1u);
  EXPECT_STATUS(store->acquire().status(), WSYNC_ERR_NOT_READY, "slot 0: WRITING v1");
  EXPECT_STATUS(store->acquire(1).status(), WSYNC_ERR_NOT_READY, "version 1", "slot 0: WRITING v1");
  EXPECT_FALSE(store->newestReady().has_value());

  ASSERT_TRUE(store->markReady(0, 1).isOk());
  EXPECT_EQ(store->slotInfo(0)->state, SlotState::kReady);
  EXPECT_EQ(store->newestReady(), 1u);

  Result<Lease> a = store->acquire();
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  EXPECT_TRUE(a->valid());
  EXPECT_EQ(a->slot(), 0);
  EXPECT_EQ(a->version(), 1u);
  Result<Lease> b = store->acquire(1);
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b->slot(), 0);
  EXPECT_EQ(store->leasesHeld(0), 2);
  EXPECT_EQ(store->describe(), "slot 0: READY v1 (2 leases), slot 1: EMPTY");

  a->release();
  EXPECT_FALSE(a->valid());
  EXPECT_EQ(a->version(), 1u);  // keeps its last values for logging
  EXPECT_EQ(store->leasesHeld(0), 1);
  a->release();  // double release is harmless
  EXPECT_EQ(store->leasesHeld(0), 1);

  // Moves transfer the hold; a moved-from lease releases nothing.
  Lease moved = std::move(*b);
  EXPECT_FALSE(b->valid());
  EXPECT_TRUE(moved.valid());
  b->release();
  EXPECT_EQ(store->leasesHeld(0), 1);
  {
    Lease scoped = std::move(moved);
    EXPECT_EQ(store->leasesHeld(0), 1);
  }  // destructor releases
  EXPECT_EQ(store->leasesHeld(0), 0);

  // Move-assigning onto a held lease releases the old hold first.
  Lease x = std::move(store->acquire()).value();
  Lease y = std::move(store->acquire()).value();
  EXPECT_EQ(store->leasesHeld(0), 2);
  x = std::move(y);
  EXPECT_EQ(store->leasesHeld(0), 1);
  x.release();
  EXPECT_EQ(store->leasesHeld(0), 0);

  // abandonWrite: WRITING -> EMPTY.
  ASSERT_TRUE(store->beginWrite(1, 2, milliseconds(0)).isOk());
  ASSERT_TRUE(store->abandonWrite(1).isOk());
  EXPECT_EQ(store->slotInfo(1)->state, SlotState::kEmpty);
  EXPECT_STATUS(store->acquire(2).status(), WSYNC_ERR_NOT_READY, "version 2");
  EXPECT_EQ(store->pickSlotForWrite().value(), 1);
  EXPECT_EQ(store->newestReady(), 1u);
}

TEST(SlotStore, EveryErrorNamesSlotAndVersion) {
  auto store = makeStore(3);
  ASSERT_TRUE(writeVersion(*store, 0, 5));

  EXPECT_STATUS(store->beginWrite(3, 6, milliseconds(0)), WSYNC_ERR_INVALID_ARGUMENT,
                "slot 3 is out of range [0, 3)");
  EXPECT_STATUS(store->beginWrite(-1, 6, milliseconds(0)), WSYNC_ERR_INVALID_ARGUMENT, "slot -1");
  EXPECT_STATUS(store->markReady(7, 6), WSYNC_ERR_INVALID_ARGUMENT, "markReady", "slot 7");
  EXPECT_STATUS(store->abandonWrite(7), WSYNC_ERR_INVALID_ARGUMENT, "abandonWrite", "slot 7");
  EXPECT_STATUS(store->beginWrite(1, kNewestVersion, milliseconds(0)), WSYNC_ERR_INVALID_ARGUMENT,
                "reserved");

  // The newest READY slot is never written.
  EXPECT_STATUS(store->beginWrite(0, 6, milliseconds(0)), WSYNC_ERR_INVALID_USAGE,
                "slot 0 holds the newest ready v5");
  // A version must be newer than the newest ready one.
  EXPECT_STATUS(store->beginWrite(1, 5, milliseconds(0)), WSYNC_ERR_INVALID_USAGE,
                "beginWrite(slot 1, v5)", "not newer than the newest ready v5 (slot 0)");
  EXPECT_STATUS(store->beginWrite(1, 4, milliseconds(0)), WSYNC_ERR_INVALID_USAGE,
                "not newer than the newest ready v5");
  EXPECT_EQ(store->slotInfo(1)->state, SlotState::kEmpty);  // refused calls change nothing

  // One version goes into one slot.
  ASSERT_TRUE(store->beginWrite(1, 6, milliseconds(0)).isOk());
  EXPECT_STATUS(store->beginWrite(2, 6, milliseconds(0)), WSYNC_ERR_INVALID_USAGE,
                "v6 is already being written into slot 1");

  // markReady needs WRITING of exactly that version.
  EXPECT_STATUS(store->markReady(1, 7), WSYNC_ERR_INVALID_USAGE,
                "slot 1 is WRITING v6, not WRITING v7");
  EXPECT_STATUS(store->markReady(2, 7), WSYNC_ERR_INVALID_USAGE, "slot 2 is EMPTY, not WRITING v7");
  EXPECT_STATUS(store->markReady(0, 5), WSYNC_ERR_INVALID_USAGE, "slot 0 is READY v5");
  EXPECT_STATUS(store->abandonWrite(0), WSYNC_ERR_INVALID_USAGE, "slot 0 is READY v5, not WRITING");
  EXPECT_STATUS(store->abandonWrite(2), WSYNC_ERR_INVALID_USAGE, "slot 2 is EMPTY");

  // All slots but the newest WRITING: nothing to pick.
  ASSERT_TRUE(store->beginWrite(2, 7, milliseconds(0)).isOk());
  EXPECT_STATUS(store->pickSlotForWrite().status(), WSYNC_ERR_INVALID_USAGE,
                "every slot other than the newest ready one is WRITING",
                "slot 1: WRITING v6, slot 2: WRITING v7");
  ASSERT_TRUE(store->markReady(2, 7).isOk());
  ASSERT_TRUE(store->markReady(1, 6).isOk());
  EXPECT_EQ(store->newestReady(), 7u);
}

TEST(SlotStore, LeaseBlocksBeginWriteUntilReleased) {
  auto store = makeStore(2);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  ASSERT_TRUE(writeVersion(*store, 1, 2));
  Result<Lease> old = store->acquire(1);
  ASSERT_TRUE(old.isOk());
  Result<Lease> old2 = store->acquire(1);
  ASSERT_TRUE(old2.isOk());
  ASSERT_EQ(store->pickSlotForWrite().value(), 0);

  // Timeout path: the slot stays WRITING, no new lease on it, the old version is gone.
  const auto t0 = Clock::now();
  EXPECT_STATUS(store->beginWrite(0, 3, milliseconds(50)), WSYNC_ERR_TIMEOUT,
                "2 lease(s) still held on slot 0", "after 50 ms");
  EXPECT_GE(Clock::now() - t0, milliseconds(45));
  EXPECT_EQ(store->slotInfo(0)->state, SlotState::kWriting);
  EXPECT_EQ(store->leasesHeld(0), 2);
  EXPECT_STATUS(store->acquire(1).status(), WSYNC_ERR_NOT_READY, "version 1");
  // A write whose beginWrite did not succeed cannot be published.
  EXPECT_STATUS(store->markReady(0, 3), WSYNC_ERR_INVALID_USAGE, "has not succeeded", "2 lease(s)");
  old2->release();

  // Retry: blocks until the last lease is released, then succeeds.
  std::atomic<bool> released{false};
  std::atomic<bool> beganBeforeRelease{false};
  Status writerStatus;
  std::thread writer([&] {
    writerStatus = store->beginWrite(0, 3, kLong);
    if (!released.load()) beganBeforeRelease = true;
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(store->slotInfo(0)->leases, 1);
  released = true;
  old->release();
  writer.join();
  EXPECT_TRUE(writerStatus.isOk()) << writerStatus.toString();
  EXPECT_FALSE(beganBeforeRelease.load()) << "beginWrite returned while a lease was held";
  ASSERT_TRUE(store->markReady(0, 3).isOk());
  EXPECT_EQ(store->newestReady(), 3u);
}

TEST(SlotStore, AcquireDuringWriteReturnsPreviousVersionImmediately) {
  auto store = makeStore(3);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  ASSERT_TRUE(writeVersion(*store, 1, 2));
  // A reader holds v1 so that the writer blocks inside beginWrite on slot 0.
  Result<Lease> held = store->acquire(1);
  ASSERT_TRUE(held.isOk());
  ASSERT_TRUE(store->beginWrite(2, 3, milliseconds(0)).isOk());  // slot 2 WRITING, not blocked
  Status writerStatus;
  std::thread writer([&] { writerStatus = store->beginWrite(0, 4, kLong); });
  while (store->slotInfo(0)->state != SlotState::kWriting)
    std::this_thread::yield();

  const auto t0 = Clock::now();
  for (int i = 0; i < 100; ++i) {
    Result<Lease> l = store->acquire();
    ASSERT_TRUE(l.isOk()) << l.status().toString();
    EXPECT_EQ(l->version(), 2u);
    EXPECT_EQ(l->slot(), 1);
  }
  EXPECT_LT(Clock::now() - t0, milliseconds(50)) << "acquire waited for a writer";
  EXPECT_STATUS(store->acquire(3).status(), WSYNC_ERR_NOT_READY, "slot 2: WRITING v3");

  held->release();
  writer.join();
  EXPECT_TRUE(writerStatus.isOk()) << writerStatus.toString();
  ASSERT_TRUE(store->markReady(2, 3).isOk());
  ASSERT_TRUE(store->markReady(0, 4).isOk());
  EXPECT_EQ(store->acquire()->version(), 4u);
}

TEST(SlotStore, NewestWinsAndPickPrefersEmptyThenOldestFree) {
  auto store = makeStore(3);
  ASSERT_TRUE(store->beginWrite(0, 5, milliseconds(0)).isOk());
  ASSERT_TRUE(store->beginWrite(1, 6, milliseconds(0)).isOk());
  ASSERT_TRUE(store->markReady(1, 6).isOk());
  ASSERT_TRUE(store->markReady(0, 5).isOk());  // completes late: ready, but not the newest
  EXPECT_EQ(store->newestReady(), 6u);
  Result<Lease> newest = store->acquire();
  ASSERT_TRUE(newest.isOk());
  EXPECT_EQ(newest->version(), 6u);
  EXPECT_EQ(newest->slot(), 1);
  Result<Lease> older = store->acquire(5);
  ASSERT_TRUE(older.isOk());
  EXPECT_EQ(older->slot(), 0);

  EXPECT_EQ(store->pickSlotForWrite().value(), 2);  // EMPTY first
  ASSERT_TRUE(writeVersion(*store, 2, 7));
  EXPECT_EQ(store->acquire()->slot(), 2);
  // Both older slots leased: the oldest (slot 0, v5); beginWrite will wait for its lease.
  EXPECT_EQ(store->pickSlotForWrite().value(), 0);
  // Oldest READY is slot 0 (v5) but it is leased: the free one (slot 1, v6) is preferred.
  newest->release();
  EXPECT_EQ(store->pickSlotForWrite().value(), 1);
  older->release();
  EXPECT_EQ(store->pickSlotForWrite().value(), 0);  // oldest, now free
}

TEST(SlotStore, OverwrittenVersionIsNotReady) {
  auto store = makeStore(2);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  ASSERT_TRUE(writeVersion(*store, 1, 2));
  ASSERT_EQ(store->pickSlotForWrite().value(), 0);
  ASSERT_TRUE(writeVersion(*store, 0, 3));
  EXPECT_STATUS(store->acquire(1).status(), WSYNC_ERR_NOT_READY,
                "version 1 is not ready on this rank", "slot 0: READY v3", "slot 1: READY v2");
  EXPECT_EQ(store->acquire(2)->slot(), 1);
  EXPECT_EQ(store->acquire()->version(), 3u);
  ASSERT_EQ(store->pickSlotForWrite().value(), 1);
}

TEST(SlotStore, WaitForNewerWakesAndTimesOut) {
  auto store = makeStore(2);
  // Nothing ready: times out after about the timeout, message names the versions.
  auto t0 = Clock::now();
  EXPECT_STATUS(store->waitForNewer(0, milliseconds(60)).status(), WSYNC_ERR_TIMEOUT,
                "no version newer than 0", "60 ms", "newest ready: none");
  EXPECT_GE(Clock::now() - t0, milliseconds(55));
  EXPECT_STATUS(store->waitForAny(milliseconds(0)).status(), WSYNC_ERR_TIMEOUT, "at all");

  // Wakes on markReady from another thread.
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(writeVersion(*store, 0, 0));  // version 0 is a real version
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(writeVersion(*store, 1, 1));
  });
  Result<uint64_t> first = store->waitForAny(kLong);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ(*first, 0u);
  t0 = Clock::now();
  Result<uint64_t> next = store->waitForNewer(0, kLong);
  ASSERT_TRUE(next.isOk()) << next.status().toString();
  EXPECT_EQ(*next, 1u);
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));
  writer.join();

  // Already newer: immediate. Not newer: times out naming the newest.
  EXPECT_EQ(store->waitForNewer(0, milliseconds(0)).value(), 1u);
  EXPECT_STATUS(store->waitForNewer(1, milliseconds(10)).status(), WSYNC_ERR_TIMEOUT,
                "newer than 1", "newest ready: v1");
}

TEST(SlotStore, TrainersDoneEndsWaitsUntilANewerVersionIsReady) {
  auto store = makeStore(2);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  Status waiterStatus;
  std::thread waiter([&] { waiterStatus = store->waitForNewer(1, kLong).status(); });
  std::this_thread::sleep_for(milliseconds(50));
  const auto t0 = Clock::now();
  store->trainersDone(3);  // versions 2 and 3 went elsewhere: none newer comes here
  waiter.join();
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));
  EXPECT_STATUS(waiterStatus, WSYNC_ERR_TRAINERS_DONE, "finished at version 3", "newer than 1");
  EXPECT_STATUS(store->waitForNewer(1, kLong).status(), WSYNC_ERR_TRAINERS_DONE);
  // A READY version the wait asks for is still returned; reads keep working.
  Result<uint64_t> any = store->waitForAny(kLong);
  ASSERT_TRUE(any.isOk());
  EXPECT_EQ(*any, 1u);
  // Restarted trainers deliver a newer version: waits wait again.
  ASSERT_TRUE(writeVersion(*store, 1, 4));
  EXPECT_STATUS(store->waitForNewer(4, milliseconds(10)).status(), WSYNC_ERR_TIMEOUT);
}

TEST(SlotStore, AbortWakesEveryWaiterAndKeepsReadsWorking) {
  auto store = makeStore(2);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  ASSERT_TRUE(writeVersion(*store, 1, 2));
  Result<Lease> held = store->acquire(1);
  ASSERT_TRUE(held.isOk());

  Status writerStatus;
  Status waiterStatus;
  std::thread writer([&] { writerStatus = store->beginWrite(0, 3, kLong); });
  std::thread waiter([&] { waiterStatus = store->waitForNewer(2, kLong).status(); });
  while (store->slotInfo(0)->state != SlotState::kWriting)
    std::this_thread::yield();
  std::this_thread::sleep_for(milliseconds(50));
  const auto t0 = Clock::now();
  store->abort();
  writer.join();
  waiter.join();
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));
  EXPECT_STATUS(writerStatus, WSYNC_ERR_ABORTED, "beginWrite(slot 0, v3)", "1 lease(s)");
  EXPECT_STATUS(waiterStatus, WSYNC_ERR_ABORTED, "newer than 2");
  EXPECT_TRUE(store->aborted());

  // Reads of what is ready keep working; later blocking calls fail at once.
  Result<Lease> l = store->acquire();
  ASSERT_TRUE(l.isOk());
  EXPECT_EQ(l->version(), 2u);
  EXPECT_EQ(store->newestReady(), 2u);
  EXPECT_STATUS(store->waitForNewer(2, kLong).status(), WSYNC_ERR_ABORTED);
  EXPECT_STATUS(store->waitForAny(kLong).status(), WSYNC_ERR_ABORTED);
  EXPECT_STATUS(store->beginWrite(0, 3, kLong), WSYNC_ERR_ABORTED);
  EXPECT_STATUS(store->pickSlotForWrite().status(), WSYNC_ERR_ABORTED);
  EXPECT_STATUS(store->markReady(0, 3), WSYNC_ERR_ABORTED);
  EXPECT_TRUE(store->abandonWrite(0).isOk());
  held->release();
  EXPECT_EQ(store->leasesHeld(0), 0);
}

TEST(SlotStore, OnReadyRunsOutsideTheLockWithEachVersion) {
  auto store = makeStore(3);
  std::vector<uint64_t> seen;
  std::vector<uint64_t> acquiredInCallback;
  store->setOnReady([&](uint64_t v) {
    seen.push_back(v);
    // Re-entering the store would deadlock if the callback ran under its lock.
    Result<Lease> l = store->acquire();
    if (l.isOk()) acquiredInCallback.push_back(l->version());
  });
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  ASSERT_TRUE(store->beginWrite(1, 2, milliseconds(0)).isOk());
  ASSERT_TRUE(store->beginWrite(2, 3, milliseconds(0)).isOk());
  ASSERT_TRUE(store->markReady(2, 3).isOk());
  ASSERT_TRUE(store->markReady(1, 2).isOk());
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 3, 2}));
  EXPECT_EQ(acquiredInCallback, (std::vector<uint64_t>{1, 3, 3}));
  // Failed calls do not notify; an empty function removes the callback.
  EXPECT_FALSE(store->markReady(1, 2).isOk());
  store->setOnReady(nullptr);
  ASSERT_TRUE(writeVersion(*store, 0, 4));
  EXPECT_EQ(seen.size(), 3u);
}

TEST(SlotStore, AcquireReleaseIsCheapUncontended) {
  auto store = makeStore(2);
  ASSERT_TRUE(writeVersion(*store, 0, 1));
  constexpr int kIters = 200000;
  uint64_t sum = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < kIters; ++i) {
    Result<Lease> l = store->acquire();
    sum += l.isOk() ? l->version() : 0;
  }
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kIters;
  EXPECT_EQ(sum, static_cast<uint64_t>(kIters));
  EXPECT_EQ(store->leasesHeld(0), 0);
  std::printf("acquire+release, uncontended: %.1f ns per pair%s\n", ns,
              kSanitized ? " (sanitized build, no bound checked)" : "");
  if (!kSanitized) EXPECT_LT(ns, 1000.0);
}

// One writer cycles pick/beginWrite/fill/markReady through `versions` versions; readers lease
// the newest (one also follows with waitForNewer, one also asks for older versions by number)
// and check every element of the slot equals the lease's version and that versions never go
// backwards. A torn read or a write into a leased slot shows up as a wrong element (and, under
// TSan, as a data race on the fake memory).
void runStress(int numSlots, uint64_t versions, int readers) {
  // The CI machines are small and shared: stop early after a time budget, but only after a
  // meaningful number of versions went through.
  constexpr auto kBudget = std::chrono::seconds(3);
  constexpr uint64_t kMinVersions = 200;
  auto store = makeStore(numSlots);
  ASSERT_TRUE(store);
  constexpr size_t kElems = 4096;
  std::vector<std::vector<uint64_t>> memory(static_cast<size_t>(numSlots),
                                            std::vector<uint64_t>(kElems, ~uint64_t{0}));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0};
  std::atomic<uint64_t> backwards{0};
  std::atomic<uint64_t> readerErrors{0};
  std::atomic<int> readersStarted{0};  // readers that completed a first checked read
  std::vector<uint64_t> checks(static_cast<size_t>(readers), 0);
  Status writerStatus;
  uint64_t writerWaits = 0;
  std::atomic<uint64_t> written{0};
  std::atomic<uint64_t> maxSeen{0};  // the newest version any reader has checked

  std::thread writer([&] {
    Clock::time_point stopAt = Clock::time_point::max();
    for (uint64_t v = 1; v <= versions && (v <= kMinVersions || Clock::now() < stopAt); ++v) {
      Result<int> slot = store->pickSlotForWrite();
      if (!slot.isOk()) {
        writerStatus = slot.status();
        break;
      }
      if (store->leasesHeld(*slot) > 0) ++writerWaits;
      if (Status s = store->beginWrite(*slot, v, kLong); !s.isOk()) {
        writerStatus = s;
        break;
      }
      std::vector<uint64_t>& m = memory[static_cast<size_t>(*slot)];
      for (size_t e = 0; e < kElems; ++e)
        m[e] = v;  // element by element
      if (Status s = store->markReady(*slot, v); !s.isOk()) {
        writerStatus = s;
        break;
      }
      written = v;
      // Pace the writer so that reads and writes interleave on every version whatever the
      // scheduler does: wait until some reader has checked v (at v == 1: every reader has
      // started). Slower readers keep leases on older slots, which beginWrite must wait out.
      const auto deadline = Clock::now() + kLong;
      while ((maxSeen.load() < v || (v == 1 && readersStarted.load() < readers)) &&
             Clock::now() < deadline) {
        std::this_thread::yield();
      }
      if (maxSeen.load() < v) {
        writerStatus = timeoutError("no reader checked v" + std::to_string(v) + " within 10 s");
        break;
      }
      if (v == 1) stopAt = Clock::now() + kBudget;
    }
    done = true;
  });

  auto check = [&](const Lease& l) {
    const std::vector<uint64_t>& m = memory[static_cast<size_t>(l.slot())];
    for (size_t e = 0; e < kElems; ++e) {
      if (m[e] != l.version()) {
        ++torn;
        return;
      }
    }
  };

  std::vector<std::thread> pool;
  for (int r = 0; r < readers; ++r) {
    pool.emplace_back([&, r] {
      uint64_t last = 0;
      while (!done.load()) {
        if (r == 0) {  // a follower: wait for each newer version, then lease the newest
          Result<uint64_t> nv = store->waitForNewer(last, milliseconds(20));
          if (!nv.isOk() && nv.status().code() != WSYNC_ERR_TIMEOUT) ++readerErrors;
        }
        Result<Lease> l = store->acquire();
        if (!l.isOk()) {
          if (l.status().code() != WSYNC_ERR_NOT_READY || last != 0) ++readerErrors;
          std::this_thread::yield();
          continue;
        }
        if (l->version() < last) ++backwards;
        last = l->version();
        check(*l);
        if (checks[static_cast<size_t>(r)]++ == 0) ++readersStarted;
        for (uint64_t seen = maxSeen.load();
             seen < last && !maxSeen.compare_exchange_weak(seen, last);) {
        }
        if (r == 2) {  // a slow reader: keeps the lease across a reschedule, then checks again
          std::this_thread::yield();
          check(*l);
        }
        if (r == 3) {  // a lagging reader: holds its version until a newer one is published,
          // so the writer's next beginWrite on this slot must wait for this lease
          const auto deadline = Clock::now() + kLong;
          while (written.load() <= last && !done.load() && Clock::now() < deadline) {
            std::this_thread::yield();
          }
          std::this_thread::yield();
          check(*l);
        }
        l->release();
        std::this_thread::yield();  // a real reader runs a decode step between leases
        if (r == 1) {               // versions by number (the previous one, the one being written):
          // complete, or NOT_READY
          for (uint64_t want : {last - 1, last + 1}) {
            Result<Lease> o = store->acquire(want);
            if (o.isOk()) {
              check(*o);
            } else if (o.status().code() != WSYNC_ERR_NOT_READY) {
              ++readerErrors;
            }
          }
        }
      }
      // After the writer finished, the newest is the last version, intact.
      Result<Lease> l = store->acquire();
      if (!l.isOk() || l->version() != written.load()) {
        ++readerErrors;
      } else {
        check(*l);
      }
    });
  }
  writer.join();
  for (std::thread& t : pool)
    t.join();

  EXPECT_TRUE(writerStatus.isOk()) << writerStatus.toString();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(backwards.load(), 0u);
  EXPECT_EQ(readerErrors.load(), 0u);
  uint64_t total = 0;
  for (int r = 0; r < readers; ++r) {
    EXPECT_GT(checks[static_cast<size_t>(r)], 0u) << "reader " << r << " never read";
    total += checks[static_cast<size_t>(r)];
  }
  for (int i = 0; i < numSlots; ++i)
    EXPECT_EQ(store->leasesHeld(i), 0);
  EXPECT_GE(written.load(), std::min(versions, kMinVersions));
  std::printf("%d slots: %llu versions, %llu checked reads, %llu writes found leases to drain\n",
              numSlots, static_cast<unsigned long long>(written.load()),
              static_cast<unsigned long long>(total), static_cast<unsigned long long>(writerWaits));
}

TEST(SlotStoreStress, TwoSlotsOneWriterFourReaders) {
  runStress(2, 10000, 4);
}
TEST(SlotStoreStress, ThreeSlotsOneWriterFourReaders) {
  runStress(3, 5000, 4);
}

}  // namespace
}  // namespace wsync
