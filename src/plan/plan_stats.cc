#include <algorithm>
#include <numeric>

#include "plan/plan.h"

namespace wsync {

double PlanStats::senderImbalance() const {
  if (bytes_per_sender.empty()) return 1.0;
  const int64_t most = *std::max_element(bytes_per_sender.begin(), bytes_per_sender.end());
  if (most <= 0) return 1.0;
  const double total = std::accumulate(bytes_per_sender.begin(), bytes_per_sender.end(), 0.0);
  const double mean = total / static_cast<double>(bytes_per_sender.size());
  return static_cast<double>(most) / mean;
}

}  // namespace wsync
