#include "coordinator/broadcast_choice.h"

#include <map>

namespace wsync {
namespace {

std::string placeOf(const RankBroadcastFacts& rank) {
  return rank.device_id.empty() ? "host memory" : "GPU " + rank.device_id;
}

std::string offeredNames(const RankBroadcastFacts& rank) {
  std::string names;
  for (const BroadcastOffer& o : rank.offers)
    names += (names.empty() ? "" : ", ") + o.name;
  return names.empty() ? "none" : names;
}

const BroadcastOffer* findOffer(const RankBroadcastFacts& rank, const std::string& name) {
  for (const BroadcastOffer& o : rank.offers)
    if (o.name == name) return &o;
  return nullptr;
}

std::string describeNeeds(const BroadcastNeeds& needs) {
  std::string text =
      needs.world == BroadcastWorld::kMpiJob ? "the MPI job's world" : "a world of the job's ranks";
  if (needs.one_gpu_per_rank) text += ", one GPU per rank";
  if (needs.world_token) text += ", trainer 0's world token";
  return text;
}

// Why `candidate` (one of ranks[0]'s offers) cannot carry this job's broadcasts; empty when it can.
std::string whyNot(const BroadcastOffer& candidate, const std::vector<RankBroadcastFacts>& ranks,
                   bool mpi_job) {
  for (const RankBroadcastFacts& r : ranks) {
    const BroadcastOffer* offer = findOffer(r, candidate.name);
    if (offer == nullptr) {
      return r.rank_name + " does not offer it (" + placeOf(r) + "; it offers " + offeredNames(r) +
             ")";
    }
    if (offer->needs != candidate.needs) {
      return r.rank_name + " states other needs for it than " + ranks[0].rank_name +
             " (ranks of different builds?)";
    }
  }
  const BroadcastNeeds& needs = candidate.needs;
  if (needs.world == BroadcastWorld::kMpiJob && !mpi_job) {
    return "it needs a job launched under MPI; this job was bootstrapped explicitly";
  }
  if (needs.one_gpu_per_rank) {
    std::map<std::string, const RankBroadcastFacts*> owner_of_device;
    for (const RankBroadcastFacts& r : ranks) {
      if (r.device_id.empty()) return r.rank_name + " holds no GPU (it needs one GPU per rank)";
      const auto [it, inserted] = owner_of_device.emplace(r.device_id, &r);
      if (!inserted) {
        return it->second->rank_name + " and " + r.rank_name + " share GPU " + r.device_id +
               " (it needs one GPU per rank)";
      }
    }
  }
  if (needs.world_token && candidate.world_token.empty()) {
    return ranks[0].rank_name + " sent no world token for it (its backend could not make one)";
  }
  return "";
}

}  // namespace

BroadcastChoice chooseBroadcastBackend(const std::vector<RankBroadcastFacts>& ranks, bool mpi_job) {
  if (ranks.empty()) return {std::nullopt, "the job has no rank"};
  const RankBroadcastFacts& first = ranks.front();
  if (first.offers.empty()) {
    return {std::nullopt,
            first.rank_name + " can run no broadcast backend here (" + placeOf(first) + ")"};
  }
  std::string why;
  for (const BroadcastOffer& candidate : first.offers) {
    const std::string ruled_out = whyNot(candidate, ranks, mpi_job);
    if (ruled_out.empty()) {
      return {candidate, "every rank offers it; it needs " + describeNeeds(candidate.needs)};
    }
    why += (why.empty() ? "" : "; ") + candidate.name + ": " + ruled_out;
  }
  return {std::nullopt, why};
}

std::string describeBroadcastChoice(const BroadcastChoice& choice) {
  return (choice.backend ? choice.backend->name : std::string("none (writes only)")) + " (" +
         choice.reason + ")";
}

}  // namespace wsync
