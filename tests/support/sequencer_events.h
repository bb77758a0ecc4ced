// Helpers of the tests that drive a VersionSequencer (coordinator/version_sequencer.h) by hand:
// time as an argument, rank references, the messages of one type, and unwrapping an event's
// result (a failure fails the test).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "coordinator/version_sequencer.h"

namespace wsync::sequencer_events {

inline const SequencerTime kT0{};
inline SequencerTime at(int ms) {
  return kT0 + std::chrono::milliseconds(ms);
}

inline RankRef trainer(int32_t r) {
  return {Role::kTrainer, r};
}
inline RankRef rollout(int32_t r) {
  return {Role::kRollout, r};
}

// The messages of `type`, in order.
inline std::vector<OutgoingMessage> ofType(const SequencerOutput& out, MessageType type) {
  std::vector<OutgoingMessage> found;
  for (const OutgoingMessage& m : out.messages) {
    if (m.type == type) found.push_back(m);
  }
  return found;
}

// Unwraps a successful event; fails the test (and returns an empty output) otherwise.
inline SequencerOutput ok(Result<SequencerOutput> r) {
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? std::move(r).value() : SequencerOutput{};
}

// A failed event's status; fails the test when the event succeeded.
inline Status failure(const Result<SequencerOutput>& r) {
  EXPECT_FALSE(r.isOk()) << "the event was accepted";
  return r.status();
}

}  // namespace wsync::sequencer_events
