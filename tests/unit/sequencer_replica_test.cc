// One replica as the version sequencer sees it (coordinator/sequencer_replica.h), by hand: the
// specs it refuses, which slot the next version takes, when a slot may be prepared ahead, and a
// version's start and Ready.
#include "coordinator/sequencer_replica.h"

#include <gtest/gtest.h>

#include <map>

#include "support/sequencer_events.h"

namespace wsync {
namespace {

using sequencer_events::at;

Status refusal(const ReplicaSpec& spec, const std::map<int32_t, int32_t>& others = {},
               uint64_t last_started = 10) {
  return SequencerReplica::make(spec, others, last_started).status();
}

TEST(SequencerReplica, RefusesBadSpecs) {
  EXPECT_EQ(refusal({-1, {0}, 2}).message(), "replica -1: a replica id must be >= 0");
  EXPECT_EQ(refusal({1, {}, 2}).message(), "replica 1 has no rank");
  EXPECT_EQ(refusal({1, {0}, 1}).message(), "replica 1 has 1 slots; at least 2 are needed");
  EXPECT_EQ(refusal({1, {0, 0}, 2}).message(), "replica 1 lists rollout 0 twice");
  EXPECT_EQ(refusal({1, {3}, 2}, {{3, 0}}).message(),
            "replica 1: rollout 3 is already in replica 0");
  EXPECT_EQ(refusal({1, {0}, 2, 4, 2}).code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(refusal({1, {0}, 2, 11, 0}).message(),
            "replica 1 holds version 11, but only version 10 started");
  EXPECT_TRUE(refusal({1, {0}, 2, 10, 1}).isOk());
}

// The next version never goes to the newest ready slot: an empty one first, else the oldest.
TEST(SequencerReplica, NextSlotAndReady) {
  Result<SequencerReplica> made = SequencerReplica::make({0, {0, 1}, 3, 4, 1}, {}, 4);
  ASSERT_TRUE(made.isOk());
  SequencerReplica replica = std::move(made).value();
  EXPECT_EQ(replica.nextSlot(), 0);
  EXPECT_EQ(replica.rankRefs(), (std::vector<RankRef>{{Role::kRollout, 0}, {Role::kRollout, 1}}));

  EXPECT_FALSE(replica.startVersion(5, at(3)));
  EXPECT_EQ(replica.stage, SequencerReplica::Stage::kPreparing);
  EXPECT_EQ(replica.asked, at(3));
  EXPECT_TRUE(replica.waitsOn(/*go_sent=*/false));
  replica.target_slot = replica.nextSlot();
  replica.ready(5);
  EXPECT_EQ(replica.ready_version, 5u);
  EXPECT_EQ(replica.ready_slot, 0);
  EXPECT_EQ(replica.slot_version, (std::vector<uint64_t>{5, 4, 0}));
  EXPECT_EQ(replica.nextSlot(), 2);
  EXPECT_FALSE(replica.waitsOn(true));
}

// Prepare ahead keeps the newest version but one readable: with 2 slots only while one is empty.
TEST(SequencerReplica, AheadSlotKeepsTheVersionBeforeTheNewest) {
  SequencerReplica two = SequencerReplica::make({0, {0}, 2, 1, 0}, {}, 1).value();
  EXPECT_EQ(two.aheadSlot(), std::optional<int32_t>(1));  // empty
  two.target_slot = 1;
  two.ready(2);
  EXPECT_EQ(two.aheadSlot(), std::nullopt);  // slot 0 holds version 1, the one before the newest

  SequencerReplica three = SequencerReplica::make({0, {0}, 3}, {}, 0).value();
  for (uint64_t v = 1; v <= 3; ++v) {
    three.target_slot = three.nextSlot();
    three.ready(v);
  }
  EXPECT_EQ(three.aheadSlot(), std::optional<int32_t>(0));  // version 1, older than 2
  three.ahead_version = 4;
  EXPECT_TRUE(three.startVersion(4, at(1)));  // prepared ahead for it
  EXPECT_EQ(three.ahead_version, 0u);
}

}  // namespace
}  // namespace wsync
