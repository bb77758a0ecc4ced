#include "coordinator/checksum_verification.h"

#include <algorithm>

#include "coordinator/version_sequencer_names.h"

namespace wsync {

using sequencer_names::rolloutName;
using sequencer_names::versionName;

void ChecksumVerification::startVersion(uint64_t version) {
  version_ = version;
  replicas_.clear();
  rejected_.clear();
}

void ChecksumVerification::removeReplica(int32_t replica) {
  replicas_.erase(replica);
}

void ChecksumVerification::recordSent(int32_t replica, const std::vector<int32_t>& ranks,
                                      int32_t trainer, const std::vector<RankChecksum>& sums) {
  Checks& checks = replicas_[replica];
  for (const RankChecksum& c : sums) {
    if (std::find(ranks.begin(), ranks.end(), c.rank) != ranks.end())
      checks.expected[c.rank][trainer] = c.sum;
  }
}

std::vector<VerifyMsg> ChecksumVerification::verify(int32_t replica,
                                                    const std::vector<int32_t>& ranks,
                                                    int32_t slot) {
  Checks& checks = replicas_[replica];
  checks.ranks = ranks;
  checks.awaiting = true;
  checks.answered.clear();
  checks.failed = false;
  std::vector<VerifyMsg> verifies;
  verifies.reserve(ranks.size());
  for (int32_t r : ranks) {
    VerifyMsg verify{version_, slot, {}};
    auto it = checks.expected.find(r);
    if (it != checks.expected.end()) {
      for (const auto& [trainer, sum] : it->second)
        verify.sums.push_back({trainer, sum});
    }
    verifies.push_back(std::move(verify));
  }
  return verifies;
}

Result<ChecksumVerification::Step> ChecksumVerification::verified(int32_t replica,
                                                                  int32_t rollout) {
  return answer(replica, rollout, nullptr);
}

Result<ChecksumVerification::Step> ChecksumVerification::failed(int32_t replica, int32_t rollout,
                                                                const std::string& detail) {
  return answer(replica, rollout, &detail);
}

Result<ChecksumVerification::Step> ChecksumVerification::answer(int32_t replica, int32_t rollout,
                                                                const std::string* failure) {
  const std::string message = rolloutName(rollout) +
                              (failure ? " failed the checksum of " : " verified ") +
                              versionName(version_);
  auto it = replicas_.find(replica);
  if (it == replicas_.end() || !it->second.awaiting ||
      std::find(it->second.ranks.begin(), it->second.ranks.end(), rollout) ==
          it->second.ranks.end()) {
    return protocolError(message + " but no Verify of it awaits an answer");
  }
  Checks& checks = it->second;
  if (!checks.answered.insert(rollout).second) return protocolError(message + " twice");
  Step step;
  if (failure != nullptr) {
    checks.failed = true;
    step.notes.push_back(versionName(version_) + ": checksum mismatch on " + rolloutName(rollout) +
                         ": " + *failure);
  }
  if (checks.answered.size() == checks.ranks.size()) decide(replica, checks, step);
  return step;
}

// Every rank answered: verified, re-sent, or (out of re-sends) rejected.
void ChecksumVerification::decide(int32_t replica, Checks& checks, Step& step) {
  checks.awaiting = false;
  if (!checks.failed) {
    step.verdict = Verdict::kVerified;
    return;
  }
  ++checks.failures;
  const std::string what = versionName(version_) + ": replica " + std::to_string(replica);
  if (checks.retries >= static_cast<uint32_t>(std::max(0, checksum_retries_))) {
    step.verdict = Verdict::kReject;
    rejected_.push_back(replica);
    step.notes.push_back(what + " skips the version: its checksums failed " +
                         std::to_string(checks.failures) + " times");
    return;
  }
  ++checks.retries;
  checks.expected.clear();  // the re-send's Sent brings the sums of the new attempt
  step.verdict = Verdict::kResend;
  step.notes.push_back(what + " re-sent (checksum retry " + std::to_string(checks.retries) +
                       " of " + std::to_string(checksum_retries_) + ")");
}

size_t ChecksumVerification::answered(int32_t replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() || !it->second.awaiting ? 0 : it->second.answered.size();
}

uint32_t ChecksumVerification::failures(int32_t replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? 0 : it->second.failures;
}

uint32_t ChecksumVerification::retries(int32_t replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? 0 : it->second.retries;
}

ChecksumVerification::Tally ChecksumVerification::tally() const {
  Tally tally;
  for (const auto& [id, checks] : replicas_) {
    if (checks.failures > 0) tally.failures[id] = checks.failures;
    if (checks.retries > 0) tally.retries[id] = checks.retries;
  }
  tally.rejected = rejected_;
  std::sort(tally.rejected.begin(), tally.rejected.end());
  return tally;
}

}  // namespace wsync
