// The checksum verification of the version in flight (SequencerOptions::job.checksums; the flow is
// in coordinator/version_sequencer.h), as a pure component the version sequencer owns and calls.
// It owns, per replica: what each trainer says it sent each rollout rank of the current attempt
// (the trainers' SentChecksums), the ranks that answered Verify and whether one failed, and the
// version's failed verifications and re-sends; and the version's rejected replicas. It decides
// (verified, re-send, reject) and writes the notes; the sequencer keeps the stages and sends (the
// Verify it builds here, Ready, the re-send's Go, the skip's Go). No sockets, no clock, not
// thread-safe (the sequencer's owner's thread).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/protocol.h"

namespace wsync {

class ChecksumVerification {
 public:
  // What a replica's attempt comes to once its ranks answered Verify.
  enum class Verdict {
    kPending,   // ranks still owe their answer
    kVerified,  // every rank verified: the replica is ready
    kResend,    // a rank failed, a re-send is left: the attempt is sent again (a retry counted)
    kReject,    // a rank failed after the last re-send: the replica skips the version (rejected)
  };
  // One answer's outcome: the verdict and log lines (a mismatch, then the re-send or the skip).
  struct Step {
    Verdict verdict = Verdict::kPending;
    std::vector<std::string> notes;
  };
  // The version's counts for its outcome (VersionOutcome), by replica id; only replicas in the job
  // with a failure (a re-send); rejected: increasing, also those removed since.
  struct Tally {
    std::map<int32_t, uint32_t> failures;  // failed verifications, one per failed attempt
    std::map<int32_t, uint32_t> retries;   // re-sends
    std::vector<int32_t> rejected;         // failed after the last re-send
  };

  // `checksum_retries`: JobSettings::checksum_retries, re-sends per replica and version (< 0: 0).
  explicit ChecksumVerification(int32_t checksum_retries) : checksum_retries_(checksum_retries) {}

  // Version `version` (>= 1) starts: everything about the previous one is forgotten.
  void startVersion(uint64_t version);
  // The replica left the job: its sums, answers and counts are forgotten; it stays rejected if it
  // was.
  void removeReplica(int32_t replica);

  // A trainer's Sent of the replica's current attempt, `sums` per rollout rank; sums of ranks not
  // in `ranks` (the replica's) are ignored.
  void recordSent(int32_t replica, const std::vector<int32_t>& ranks, int32_t trainer,
                  const std::vector<RankChecksum>& sums);
  // The replica's attempt landed in `slot`: the Verify for each of `ranks`, in that order, with
  // what each trainer said it sent that rank (increasing trainer; none when no trainer did). The
  // replica now awaits one answer from each of `ranks`.
  std::vector<VerifyMsg> verify(int32_t replica, const std::vector<int32_t>& ranks, int32_t slot);

  // Rank `rollout` of `replica` verified its Verify, or failed it (ChecksumFailed's `detail`).
  // PROTOCOL (nothing changes) when no Verify of the replica awaits the rank's answer or it
  // answered already.
  Result<Step> verified(int32_t replica, int32_t rollout);
  Result<Step> failed(int32_t replica, int32_t rollout, const std::string& detail);

  size_t answered(int32_t replica) const;  // ranks that answered its Verify awaiting answers
  uint32_t failures(int32_t replica) const;
  uint32_t retries(int32_t replica) const;
  Tally tally() const;

 private:
  // One replica's part in the version.
  struct Checks {
    std::vector<int32_t> ranks;                               // those asked by verify()
    std::map<int32_t, std::map<int32_t, uint64_t>> expected;  // rollout rank -> trainer -> sum
    bool awaiting = false;                                    // a Verify awaits answers
    std::set<int32_t> answered;
    bool failed = false;  // a rank of the current attempt failed
    uint32_t failures = 0;
    uint32_t retries = 0;
  };

  Result<Step> answer(int32_t replica, int32_t rollout, const std::string* failure);
  void decide(int32_t replica, Checks& checks, Step& step);  // every rank answered

  int32_t checksum_retries_;
  uint64_t version_ = 0;
  std::map<int32_t, Checks> replicas_;  // by replica id
  std::vector<int32_t> rejected_;
};

}  // namespace wsync
