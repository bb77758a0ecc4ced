// The coordinator's checksum verification (coordinator/checksum_verification.h) by hand, no
// sequencer and no sockets: the trainers' sums become each rank's Verify, a matching set verifies,
// a mismatch names the rollout rank and counts one failure per attempt, re-sends stop at
// checksum_retries with the skip, a replica that leaves mid-verification is forgotten, a new
// version starts clean, and answers out of order are refused without changing anything.
#include "coordinator/checksum_verification.h"

#include <gtest/gtest.h>

namespace wsync {
namespace {

using Verdict = ChecksumVerification::Verdict;
using Step = ChecksumVerification::Step;

const std::vector<int32_t> kReplica0{0, 1};  // replica 0: rollout ranks 0 and 1
const std::vector<int32_t> kReplica1{2, 3};  // replica 1: rollout ranks 2 and 3

// What trainer t sends rollout rank r in attempt a: distinct per (t, r, a).
uint64_t sumOf(int32_t t, int32_t r, int a = 0) {
  return 1000u * static_cast<uint64_t>(a + 1) + 10u * static_cast<uint64_t>(t) +
         static_cast<uint64_t>(r);
}
// Trainer t's SentChecksums: a sum for every rank of both replicas.
std::vector<RankChecksum> sentBy(int32_t t, int a = 0) {
  std::vector<RankChecksum> sums;
  for (int32_t r = 0; r < 4; ++r)
    sums.push_back({r, sumOf(t, r, a)});
  return sums;
}

Step step(Result<Step> r) {
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? std::move(r).value() : Step{};
}

// Version 1, two trainers, 2 re-sends per replica.
class ChecksumVerificationTest : public ::testing::Test {
 protected:
  ChecksumVerificationTest() : checks_(2) { checks_.startVersion(1); }

  // Attempt `a` of `replica` sent by both trainers and landed: its ranks' Verify.
  std::vector<VerifyMsg> land(int32_t replica, const std::vector<int32_t>& ranks, int a = 0) {
    checks_.recordSent(replica, ranks, 0, sentBy(0, a));
    checks_.recordSent(replica, ranks, 1, sentBy(1, a));
    return checks_.verify(replica, ranks, /*slot=*/1);
  }
  // Rank 0 fails, rank 1 verifies: the step of the last answer.
  Step failAttempt() {
    const Step mismatch = step(checks_.failed(0, 0, "trainer 1's bytes"));
    EXPECT_EQ(mismatch.verdict, Verdict::kPending);
    return step(checks_.verified(0, 1));
  }

  ChecksumVerification checks_;
};

TEST_F(ChecksumVerificationTest, MatchingSumsVerify) {
  const std::vector<VerifyMsg> verifies = land(0, kReplica0);
  ASSERT_EQ(verifies.size(), 2u);
  for (size_t i = 0; i < verifies.size(); ++i) {
    const int32_t rank = kReplica0[i];
    EXPECT_EQ(verifies[i].version, 1u);
    EXPECT_EQ(verifies[i].slot, 1);
    // Each trainer's sum for this rank only, in trainer order; the other replica's ignored.
    EXPECT_EQ(verifies[i].sums,
              (std::vector<RankChecksum>{{0, sumOf(0, rank)}, {1, sumOf(1, rank)}}));
  }
  const Step first = step(checks_.verified(0, 1));
  EXPECT_EQ(first.verdict, Verdict::kPending);
  EXPECT_TRUE(first.notes.empty());
  EXPECT_EQ(checks_.answered(0), 1u);
  const Step last = step(checks_.verified(0, 0));
  EXPECT_EQ(last.verdict, Verdict::kVerified);
  EXPECT_TRUE(last.notes.empty());
  EXPECT_EQ(checks_.answered(0), 0u) << "no Verify awaits answers any more";
  const ChecksumVerification::Tally tally = checks_.tally();
  EXPECT_TRUE(tally.failures.empty());
  EXPECT_TRUE(tally.retries.empty());
  EXPECT_TRUE(tally.rejected.empty());
}

TEST_F(ChecksumVerificationTest, AMismatchNamesTheRankAndCountsOneFailurePerAttempt) {
  land(0, kReplica0);
  const Step mismatch = step(checks_.failed(0, 1, "trainer 0's bytes"));
  EXPECT_EQ(mismatch.verdict, Verdict::kPending) << "rank 0 has not answered";
  EXPECT_EQ(mismatch.notes, std::vector<std::string>{
                                "version 1: checksum mismatch on rollout 1: trainer 0's bytes"});
  EXPECT_EQ(checks_.failures(0), 0u) << "counted once the attempt is over";
  const Step both = step(checks_.failed(0, 0, "trainer 1's bytes"));
  EXPECT_EQ(both.verdict, Verdict::kResend);
  EXPECT_EQ(both.notes, (std::vector<std::string>{
                            "version 1: checksum mismatch on rollout 0: trainer 1's bytes",
                            "version 1: replica 0 re-sent (checksum retry 1 of 2)"}));
  EXPECT_EQ(checks_.failures(0), 1u) << "two ranks failed, one attempt";
  EXPECT_EQ(checks_.retries(0), 1u);

  // The re-send's Verify carries its own sums (the first attempt's are forgotten) and verifies.
  const std::vector<VerifyMsg> again = land(0, kReplica0, /*a=*/1);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].sums, (std::vector<RankChecksum>{{0, sumOf(0, 0, 1)}, {1, sumOf(1, 0, 1)}}));
  step(checks_.verified(0, 0));
  EXPECT_EQ(step(checks_.verified(0, 1)).verdict, Verdict::kVerified);
  const ChecksumVerification::Tally tally = checks_.tally();
  EXPECT_EQ(tally.failures, (std::map<int32_t, uint32_t>{{0, 1}}));
  EXPECT_EQ(tally.retries, (std::map<int32_t, uint32_t>{{0, 1}}));
  EXPECT_TRUE(tally.rejected.empty());
}

TEST_F(ChecksumVerificationTest, ResendsStopAtChecksumRetriesWithTheSkip) {
  land(1, kReplica1);
  step(checks_.verified(1, 2));
  EXPECT_EQ(step(checks_.verified(1, 3)).verdict, Verdict::kVerified);  // replica 1 is fine
  for (int a = 0; a < 2; ++a) {
    land(0, kReplica0, a);
    const Step resend = failAttempt();
    EXPECT_EQ(resend.verdict, Verdict::kResend);
    EXPECT_EQ(resend.notes.back(),
              "version 1: replica 0 re-sent (checksum retry " + std::to_string(a + 1) + " of 2)");
  }
  land(0, kReplica0, 2);
  const Step skip = failAttempt();
  EXPECT_EQ(skip.verdict, Verdict::kReject);
  EXPECT_EQ(skip.notes,
            std::vector<std::string>{"version 1: replica 0 skips the version: its checksums "
                                     "failed 3 times"});
  const ChecksumVerification::Tally tally = checks_.tally();
  EXPECT_EQ(tally.failures, (std::map<int32_t, uint32_t>{{0, 3}}));
  EXPECT_EQ(tally.retries, (std::map<int32_t, uint32_t>{{0, 2}}));
  EXPECT_EQ(tally.rejected, std::vector<int32_t>{0});
  EXPECT_EQ(checks_.verified(0, 0).status().code(), WSYNC_ERR_PROTOCOL) << "nothing awaits";
}

TEST(ChecksumVerification, NoRetriesRejectTheFirstFailure) {
  for (int retries : {0, -1}) {  // below 0 counts as 0
    ChecksumVerification checks(retries);
    checks.startVersion(4);
    checks.recordSent(2, {5}, 0, {{5, 7}});
    checks.verify(2, {5}, 0);
    const Step skip = step(checks.failed(2, 5, "bad"));
    EXPECT_EQ(skip.verdict, Verdict::kReject);
    EXPECT_EQ(skip.notes, (std::vector<std::string>{
                              "version 4: checksum mismatch on rollout 5: bad",
                              "version 4: replica 2 skips the version: its checksums failed 1 "
                              "times"}));
    EXPECT_EQ(checks.tally().rejected, std::vector<int32_t>{2});
    EXPECT_TRUE(checks.tally().retries.empty());
  }
}

TEST_F(ChecksumVerificationTest, AReplicaThatLeavesMidVerificationIsForgotten) {
  // Replica 1 verified; replica 0 failed once and, re-sent, leaves with one rank's answer in.
  land(1, kReplica1);
  step(checks_.failed(1, 2, "x"));
  EXPECT_EQ(step(checks_.verified(1, 3)).verdict, Verdict::kResend);
  land(0, kReplica0);
  EXPECT_EQ(failAttempt().verdict, Verdict::kResend);
  land(0, kReplica0, 1);
  step(checks_.verified(0, 0));
  EXPECT_EQ(checks_.answered(0), 1u);

  checks_.removeReplica(0);
  EXPECT_EQ(checks_.answered(0), 0u);
  EXPECT_EQ(checks_.failures(0), 0u);
  EXPECT_EQ(checks_.verified(0, 1).status().message(),
            "rollout 1 verified version 1 but no Verify of it awaits an answer");
  ChecksumVerification::Tally tally = checks_.tally();
  EXPECT_EQ(tally.failures, (std::map<int32_t, uint32_t>{{1, 1}})) << "replica 0's are gone";
  EXPECT_EQ(tally.retries, (std::map<int32_t, uint32_t>{{1, 1}}));

  // The same id joining again starts clean: the first attempt's sums are not its.
  const std::vector<VerifyMsg> fresh = checks_.verify(0, kReplica0, 0);
  EXPECT_TRUE(fresh[0].sums.empty());
  step(checks_.verified(0, 0));
  EXPECT_EQ(step(checks_.verified(0, 1)).verdict, Verdict::kVerified);
}

TEST(ChecksumVerification, ARejectedReplicaThatLeavesStaysRejected) {
  ChecksumVerification checks(0);
  checks.startVersion(3);
  checks.verify(1, kReplica1, 0);
  step(checks.failed(1, 2, "x"));
  EXPECT_EQ(step(checks.verified(1, 3)).verdict, Verdict::kReject);
  checks.removeReplica(1);
  const ChecksumVerification::Tally tally = checks.tally();
  EXPECT_EQ(tally.rejected, std::vector<int32_t>{1});
  EXPECT_TRUE(tally.failures.empty());
}

TEST_F(ChecksumVerificationTest, ANewVersionStartsClean) {
  land(0, kReplica0);
  EXPECT_EQ(failAttempt().verdict, Verdict::kResend);
  land(0, kReplica0, 1);
  checks_.startVersion(2);
  EXPECT_EQ(checks_.answered(0), 0u);
  EXPECT_EQ(checks_.retries(0), 0u);
  EXPECT_TRUE(checks_.tally().failures.empty());
  EXPECT_EQ(checks_.verified(0, 0).status().code(), WSYNC_ERR_PROTOCOL) << "the old Verify";
  const std::vector<VerifyMsg> verifies = land(0, kReplica0, 2);
  EXPECT_EQ(verifies[1].version, 2u);
  EXPECT_EQ(verifies[1].sums,
            (std::vector<RankChecksum>{{0, sumOf(0, 1, 2)}, {1, sumOf(1, 1, 2)}}));
  EXPECT_EQ(failAttempt().notes.back(), "version 2: replica 0 re-sent (checksum retry 1 of 2)");
}

TEST_F(ChecksumVerificationTest, AnswersOutOfOrderAreRefusedAndChangeNothing) {
  EXPECT_EQ(checks_.verified(0, 0).status().message(),
            "rollout 0 verified version 1 but no Verify of it awaits an answer");
  land(0, kReplica0);
  EXPECT_EQ(checks_.failed(0, 2, "d").status().message(),
            "rollout 2 failed the checksum of version 1 but no Verify of it awaits an answer")
      << "rank 2 is not replica 0's";
  step(checks_.failed(0, 0, "d"));
  const Result<Step> twice = checks_.verified(0, 0);
  EXPECT_EQ(twice.status().code(), WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(twice.status().message(), "rollout 0 verified version 1 twice");
  EXPECT_EQ(checks_.failed(0, 0, "d").status().message(),
            "rollout 0 failed the checksum of version 1 twice");
  EXPECT_EQ(checks_.answered(0), 1u);
  EXPECT_EQ(step(checks_.verified(0, 1)).verdict, Verdict::kResend) << "rank 0's failure stands";
}

}  // namespace
}  // namespace wsync
