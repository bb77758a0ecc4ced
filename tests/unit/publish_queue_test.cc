// The queue between a trainer's publish calls and its publisher thread (runtime/publish_queue.h),
// without sockets: versions must increase and a refused publish changes nothing; in snapshot mode
// a publish waits until the previous version left the snapshot, or the job failed, or its timeout;
// the publisher thread idles until a request comes and sees none once stopped.
#include "runtime/publish_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace wsync {
namespace {

using std::chrono::milliseconds;

Status ok() {
  return Status::ok();
}

TEST(PublishQueue, VersionsStartAtOneAndIncreaseARefusedPublishChangesNothing) {
  PublishQueue queue(ok);
  int firsts = 0;
  const auto first = [&] {
    ++firsts;
    return Status::ok();
  };
  Result<std::shared_ptr<PublishRequest>> zero = queue.push(0, false, milliseconds(10), first, {});
  ASSERT_FALSE(zero.isOk());
  EXPECT_EQ(zero.status().code(), WSYNC_ERR_INVALID_USAGE);
  EXPECT_NE(zero.status().message().find("versions start at 1"), std::string::npos);

  Result<std::shared_ptr<PublishRequest>> two =
      queue.push(2, false, milliseconds(10), first, {0.5f, 2.0f});
  ASSERT_TRUE(two.isOk()) << two.status().message();
  EXPECT_EQ((*two)->version(), 2u);
  EXPECT_EQ((*two)->scales(), (std::vector<float>{0.5f, 2.0f}));

  for (uint64_t stale : {uint64_t{2}, uint64_t{1}}) {
    Result<std::shared_ptr<PublishRequest>> r =
        queue.push(stale, false, milliseconds(10), first, {});
    ASSERT_FALSE(r.isOk());
    EXPECT_EQ(r.status().code(), WSYNC_ERR_INVALID_USAGE);
    EXPECT_NE(r.status().message().find("version " + std::to_string(stale) +
                                        " is not greater than the last published version 2"),
              std::string::npos)
        << r.status().message();
  }
  EXPECT_EQ(firsts, 1) << "a refused publish runs nothing";
}

TEST(PublishQueue, AFailedFirstStepQueuesNothingAndKeepsTheLastVersion) {
  PublishQueue queue(ok);
  Result<std::shared_ptr<PublishRequest>> failed =
      queue.push(1, false, milliseconds(10),
                 [] { return invalidArgument("tensor 'w' is not registered"); }, {});
  ASSERT_FALSE(failed.isOk());
  EXPECT_EQ(failed.status().message(), "tensor 'w' is not registered");
  // The same version may be published again, and it is the only request queued.
  Result<std::shared_ptr<PublishRequest>> again = queue.push(1, false, milliseconds(10), ok, {});
  ASSERT_TRUE(again.isOk()) << again.status().message();
  std::shared_ptr<PublishRequest> head = queue.next(milliseconds(1), [] {});
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head, *again);
  queue.pop();
  queue.stop();
  EXPECT_EQ(queue.next(milliseconds(1), [] {}), nullptr);
}

TEST(PublishQueue, SnapshotPublishWaitsUntilThePreviousVersionLeftTheSnapshot) {
  PublishQueue queue(ok);
  ASSERT_TRUE(queue.push(1, true, milliseconds(10), ok, {}).isOk());

  Result<std::shared_ptr<PublishRequest>> early = queue.push(2, true, milliseconds(20), ok, {});
  ASSERT_FALSE(early.isOk());
  EXPECT_EQ(early.status().code(), WSYNC_ERR_TIMEOUT);
  EXPECT_NE(early.status().message().find("publish 2"), std::string::npos);
  EXPECT_NE(early.status().message().find("snapshot"), std::string::npos);

  std::atomic<bool> popped{false};
  std::thread publisher([&] {
    std::this_thread::sleep_for(milliseconds(30));
    popped = true;
    queue.pop();  // version 1 was delivered: the snapshot is free
  });
  bool copied_after_pop = false;
  Result<std::shared_ptr<PublishRequest>> second = queue.push(2, true, milliseconds(20000),
                                                              [&] {
                                                                copied_after_pop = popped.load();
                                                                return Status::ok();
                                                              },
                                                              {});
  publisher.join();
  ASSERT_TRUE(second.isOk()) << second.status().message();
  EXPECT_TRUE(copied_after_pop) << "the snapshot was copied into while version 1 still used it";
}

TEST(PublishQueue, TheSnapshotStaysBusyWhileThePreviousVersionIsQueued) {
  PublishQueue queue(ok);
  ASSERT_TRUE(queue.push(1, true, milliseconds(10), ok, {}).isOk());
  queue.snapshotFree();  // version 1's transfer left the snapshot; its delivery is still pending
  // A publish copies into the snapshot only once no earlier version is queued: not yet.
  EXPECT_FALSE(queue.push(2, true, milliseconds(10), ok, {}).isOk());
  queue.pop();
  EXPECT_TRUE(queue.push(2, true, milliseconds(10), ok, {}).isOk());
}

TEST(PublishQueue, AFailedJobEndsASnapshotWaitWithItsError) {
  std::atomic<bool> failed{false};
  PublishQueue queue(
      [&] { return failed ? Status(WSYNC_ERR_REMOTE, "rollout 3 was lost") : Status::ok(); });
  ASSERT_TRUE(queue.push(1, true, milliseconds(10), ok, {}).isOk());
  std::thread failer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    failed = true;
    queue.wake();
  });
  int firsts = 0;
  Result<std::shared_ptr<PublishRequest>> r = queue.push(2, true, milliseconds(20000),
                                                         [&] {
                                                           ++firsts;
                                                           return Status::ok();
                                                         },
                                                         {});
  failer.join();
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), WSYNC_ERR_REMOTE);
  EXPECT_EQ(r.status().message(), "rollout 3 was lost");
  EXPECT_EQ(firsts, 0) << "nothing is copied for a failed job";
}

TEST(PublishQueue, ThePublisherIdlesUntilARequestComesAndSeesNoneOnceStopped) {
  PublishQueue queue(ok);
  std::atomic<int> idles{0};
  std::thread caller([&] {
    while (idles < 3)
      std::this_thread::sleep_for(milliseconds(1));
    ASSERT_TRUE(queue.push(1, false, milliseconds(10), ok, {}).isOk());
  });
  std::shared_ptr<PublishRequest> request = queue.next(milliseconds(1), [&] { ++idles; });
  caller.join();
  ASSERT_NE(request, nullptr);
  EXPECT_EQ(request->version(), 1u);
  EXPECT_GE(idles.load(), 3);
  // It stays queued until pop(): the publisher sees it again.
  EXPECT_EQ(queue.next(milliseconds(1), [] {}), request);
  queue.pop();
  queue.stop();
  EXPECT_EQ(queue.next(milliseconds(1), [] {}), nullptr);
  queue.drain(milliseconds(10));  // empty: returns at once
}

}  // namespace
}  // namespace wsync
