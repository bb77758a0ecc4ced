// The delivery gate (coordinator/delivery_gate.h): which ranks still owe the confirmation of a
// Ready, and which of them are overdue past a bound.
#include "coordinator/delivery_gate.h"

#include <gtest/gtest.h>

#include "support/sequencer_events.h"

namespace wsync {
namespace {

using std::chrono::milliseconds;
using namespace sequencer_events;  // NOLINT(google-build-using-namespace): test helpers

// The delivery gate names the ranks whose confirmation of a Ready is overdue past a bound.
TEST(DeliveryGateOverdue, RanksPastTheBoundInOrder) {
  DeliveryGate gate;
  gate.readySent(1, 3, at(0));
  gate.readySent(1, 2, at(0));
  gate.readySent(2, 5, at(500));
  EXPECT_TRUE(gate.overdueRanks(at(999), milliseconds(1000)).empty());
  EXPECT_EQ(gate.overdueRanks(at(1000), milliseconds(1000)), (std::vector<int32_t>{2, 3}));
  ASSERT_TRUE(gate.readied(1, 2).isOk());
  EXPECT_EQ(gate.overdueRanks(at(1500), milliseconds(1000)), (std::vector<int32_t>{3, 5}));
  (void)gate.forget(3);
  EXPECT_EQ(gate.overdueRanks(at(1500), milliseconds(1000)), (std::vector<int32_t>{5}));
}

}  // namespace
}  // namespace wsync
