// RolloutMembership without sockets: heartbeats go out every interval until stopped or a send
// fails; Leave is answered by Left, or ends with the receiver (the context's failure named), or
// times out naming the wait; a failed Leave send is returned.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/rollout_membership.h"

namespace wsync {
namespace {

using namespace std::chrono_literals;

// What the membership sent, and what each send answers.
struct Channel {
  std::mutex mu;
  std::vector<MessageType> sent;
  int fail_from = -1;  // sends from this index on fail (-1: none)

  RolloutMembership::Send sender() {
    return [this](MessageType type) {
      std::lock_guard lock(mu);
      sent.push_back(type);
      if (fail_from >= 0 && static_cast<int>(sent.size()) > fail_from)
        return remoteError("the control channel is closed");
      return Status::ok();
    };
  }
  size_t count(MessageType type) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (MessageType t : sent)
      n += t == type;
    return n;
  }
};

// Polls `done` for up to 10 s (the test machine may be loaded).
template <class F>
bool eventually(F done) {
  for (int i = 0; i < 1000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

TEST(RolloutMembership, HeartbeatsGoOutEveryIntervalUntilStopped) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  membership.startHeartbeats(1ms);
  EXPECT_TRUE(eventually([&] { return channel.count(MessageType::kHeartbeat) >= 3; }));
  membership.stopHeartbeats();
  const size_t after_stop = channel.count(MessageType::kHeartbeat);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(channel.count(MessageType::kHeartbeat), after_stop);
  membership.stopHeartbeats();  // idempotent
}

TEST(RolloutMembership, StopWakesAHeartbeatThreadThatWaitsALongInterval) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  membership.startHeartbeats(std::chrono::hours(1));
  membership.stopHeartbeats();  // returns without waiting out the hour
  EXPECT_EQ(channel.count(MessageType::kHeartbeat), 0u);
}

TEST(RolloutMembership, NoIntervalSendsNoHeartbeats) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  membership.startHeartbeats(0ms);
  std::this_thread::sleep_for(10ms);
  membership.stopHeartbeats();
  EXPECT_EQ(channel.count(MessageType::kHeartbeat), 0u);
}

TEST(RolloutMembership, AFailedHeartbeatEndsTheHeartbeats) {
  Channel channel;
  channel.fail_from = 2;  // the third send fails
  RolloutMembership membership(channel.sender());
  membership.startHeartbeats(1ms);
  EXPECT_TRUE(eventually([&] { return channel.count(MessageType::kHeartbeat) >= 3; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(channel.count(MessageType::kHeartbeat), 3u) << "heartbeats went on after a failure";
  membership.stopHeartbeats();
}

TEST(RolloutMembership, LeaveReturnsOnceTheCoordinatorAnswersLeft) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  std::thread receiver([&] {
    EXPECT_TRUE(eventually([&] { return channel.count(MessageType::kLeave) == 1; }));
    membership.onLeft();
  });
  const Status left = membership.leave(60s, [] { return Status::ok(); });
  receiver.join();
  EXPECT_TRUE(left.isOk()) << left.toString();
  EXPECT_EQ(channel.count(MessageType::kLeave), 1u);
}

TEST(RolloutMembership, LeaveAfterTheReceiverEndedNamesTheContextsFailure) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  membership.onReceiverEnded();
  const Status failed =
      membership.leave(60s, [] { return protocolError("rollout 3: unexpected Go"); });
  EXPECT_EQ(failed.code(), WSYNC_ERR_PROTOCOL) << failed.toString();
  EXPECT_NE(failed.message().find("unexpected Go"), std::string::npos) << failed.toString();
  // With no failure recorded, the channel's end is what is named.
  const Status ended = membership.leave(60s, [] { return Status::ok(); });
  EXPECT_EQ(ended.code(), WSYNC_ERR_REMOTE) << ended.toString();
  EXPECT_NE(ended.message().find("control channel ended"), std::string::npos) << ended.toString();
}

TEST(RolloutMembership, LeaveUnansweredTimesOutNamingTheWait) {
  Channel channel;
  RolloutMembership membership(channel.sender());
  const Status s = membership.leave(20ms, [] { return Status::ok(); });
  EXPECT_EQ(s.code(), WSYNC_ERR_TIMEOUT) << s.toString();
  EXPECT_NE(s.message().find("did not answer Leave within 20 ms"), std::string::npos)
      << s.toString();
}

TEST(RolloutMembership, AFailedLeaveSendIsReturned) {
  Channel channel;
  channel.fail_from = 0;
  RolloutMembership membership(channel.sender());
  const Status s = membership.leave(60s, [] { return Status::ok(); });
  EXPECT_EQ(s.code(), WSYNC_ERR_REMOTE) << s.toString();
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s.toString();
}

}  // namespace
}  // namespace wsync
