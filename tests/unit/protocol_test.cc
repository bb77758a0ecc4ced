// The coordinator protocol's codecs (protocol/protocol.h): round trips of the messages that
// carry registrations and plan assignments, broadcast offers and worlds included, and clean
// failures on truncated or inconsistent input.
#include <gtest/gtest.h>

#include <set>

#include "fuzz/protocol_sample.h"
#include "protocol/protocol.h"

namespace wsync {
namespace {

RegisterMsg sampleRegister() {
  RegisterMsg m;
  m.registration = {1, 2, 3, 4};
  m.transport = "ucx_staged";
  m.transport_address = {9, 8, 7};
  m.device_id = "node-a/GPU-0123";
  m.slot_descriptors = {{1, 1}, {2, 2, 2}};
  m.buffer_byte_offsets = {0, 256, 1024};
  BroadcastOfferRecord offer;
  offer.name = "nccl";
  offer.needs = {BroadcastWorld::kJobRanks, true, true};
  offer.world_token = std::vector<uint8_t>(128, 0xab);
  m.broadcast_offers = {offer};
  return m;
}

PlanAssignmentMsg sampleAssignment() {
  PlanAssignmentMsg m;
  m.rank_plan = {5, 6, 7};
  m.peers.push_back({3, "cuda_ipc", {4, 4}, {{1}, {2}}, {0, 512}});
  m.comms = {{0, {0, 2, 3}}, {1, {1, 4, 5}}};
  m.group_comm = {1, 0, 1};
  m.replica_of_rollout = {0, 0, 1, 1};
  m.broadcast.backend = "nccl";
  m.broadcast.world_token = std::vector<uint8_t>(128, 0xcd);
  m.broadcast.world_rank = 4;
  m.broadcast.world_size = 6;
  m.broadcast.root_ranks = {0, 1};
  return m;
}

TEST(Protocol, RegisterRoundTripsWithItsBroadcastOffers) {
  const RegisterMsg m = sampleRegister();
  RegisterMsg d;
  ASSERT_TRUE(decode(encode(m), d).isOk());
  EXPECT_EQ(d.registration, m.registration);
  EXPECT_EQ(d.transport, m.transport);
  EXPECT_EQ(d.transport_address, m.transport_address);
  EXPECT_EQ(d.device_id, m.device_id);
  EXPECT_EQ(d.slot_descriptors, m.slot_descriptors);
  EXPECT_EQ(d.buffer_byte_offsets, m.buffer_byte_offsets);
  ASSERT_EQ(d.broadcast_offers.size(), 1u);
  EXPECT_EQ(d.broadcast_offers[0].name, "nccl");
  EXPECT_EQ(d.broadcast_offers[0].needs, m.broadcast_offers[0].needs);
  EXPECT_EQ(d.broadcast_offers[0].world_token, m.broadcast_offers[0].world_token);
  // A rank that can run no broadcast backend offers none.
  RegisterMsg none;
  RegisterMsg none_decoded;
  none_decoded.broadcast_offers.resize(1);
  ASSERT_TRUE(decode(encode(none), none_decoded).isOk());
  EXPECT_TRUE(none_decoded.broadcast_offers.empty());
}

TEST(Protocol, PlanAssignmentRoundTripsWithTheNcclWorld) {
  const PlanAssignmentMsg m = sampleAssignment();
  PlanAssignmentMsg d;
  ASSERT_TRUE(decode(encode(m), d).isOk());
  EXPECT_EQ(d.rank_plan, m.rank_plan);
  ASSERT_EQ(d.peers.size(), 1u);
  EXPECT_EQ(d.peers[0].rank, 3);
  EXPECT_EQ(d.peers[0].slot_descriptors, m.peers[0].slot_descriptors);
  ASSERT_EQ(d.comms.size(), 2u);
  EXPECT_EQ(d.comms[1].id, 1);
  EXPECT_EQ(d.comms[1].world_ranks, m.comms[1].world_ranks);
  EXPECT_EQ(d.group_comm, m.group_comm);
  EXPECT_EQ(d.replica_of_rollout, m.replica_of_rollout);
  EXPECT_EQ(d.broadcast.backend, "nccl");
  EXPECT_EQ(d.broadcast.world_token, m.broadcast.world_token);
  EXPECT_EQ(d.broadcast.world_rank, 4);
  EXPECT_EQ(d.broadcast.world_size, 6);
  EXPECT_EQ(d.broadcast.root_ranks, m.broadcast.root_ranks);
}

TEST(Protocol, PlanAssignmentWithoutNcclWorldRoundTrips) {
  PlanAssignmentMsg m = sampleAssignment();
  m.broadcast = BroadcastWorldAssignment{};
  m.comms.clear();
  m.group_comm.clear();
  PlanAssignmentMsg d;
  ASSERT_TRUE(decode(encode(m), d).isOk());
  EXPECT_TRUE(d.broadcast.backend.empty());
  EXPECT_TRUE(d.broadcast.world_token.empty());
  EXPECT_EQ(d.broadcast.world_rank, -1);
  EXPECT_EQ(d.broadcast.world_size, 0);
}

TEST(Protocol, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> reg = encode(sampleRegister());
  const std::vector<uint8_t> plan = encode(sampleAssignment());
  for (size_t n = 0; n < reg.size(); ++n) {
    RegisterMsg d;
    const Status s = decode(std::vector<uint8_t>(reg.begin(), reg.begin() + n), d);
    EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << "Register truncated to " << n << " bytes";
  }
  for (size_t n = 0; n < plan.size(); ++n) {
    PlanAssignmentMsg d;
    const Status s = decode(std::vector<uint8_t>(plan.begin(), plan.begin() + n), d);
    EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << "PlanAssignment truncated to " << n << " bytes";
  }
}

TEST(Protocol, NcclRanksOutsideTheWorldAreRejected) {
  const auto rejected = [](const PlanAssignmentMsg& m) {
    PlanAssignmentMsg d;
    const Status s = decode(encode(m), d);
    return s.code() == WSYNC_ERR_PROTOCOL &&
           s.message().find("world of 6 ranks") != std::string::npos;
  };
  PlanAssignmentMsg m = sampleAssignment();
  m.broadcast.world_rank = 6;
  EXPECT_TRUE(rejected(m));
  m = sampleAssignment();
  m.broadcast.root_ranks = {0, -1};
  EXPECT_TRUE(rejected(m));
  m = sampleAssignment();
  m.comms[0].world_ranks = {0, 2, 6};
  EXPECT_TRUE(rejected(m));
}

TEST(Protocol, BroadcastCommunicatorsWithoutABackendAreRejected) {
  PlanAssignmentMsg m = sampleAssignment();
  m.broadcast.backend.clear();
  PlanAssignmentMsg d;
  const Status s = decode(encode(m), d);
  EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_NE(s.message().find("without a broadcast backend"), std::string::npos) << s.toString();
}

TEST(Protocol, OversizedOrUnknownBroadcastOffersAreRejected) {
  RegisterMsg m = sampleRegister();
  m.broadcast_offers[0].world_token.assign(4096, 1);
  RegisterMsg d;
  EXPECT_EQ(decode(encode(m), d).code(), WSYNC_ERR_PROTOCOL);
  m = sampleRegister();
  m.broadcast_offers[0].needs.world = static_cast<BroadcastWorld>(7);
  EXPECT_EQ(decode(encode(m), d).code(), WSYNC_ERR_PROTOCOL);
  m = sampleRegister();
  const BroadcastOfferRecord offer = m.broadcast_offers[0];
  m.broadcast_offers.resize(protocol_limits::kMaxBroadcastOffers + 1, offer);
  EXPECT_EQ(decode(encode(m), d).code(), WSYNC_ERR_PROTOCOL);
}

ColdFillMsg sampleColdFill() {
  ColdFillMsg m;
  m.fill = 7;
  m.version = 12;
  m.target_slot = 1;
  m.rank_plan = {5, 6, 7};
  m.peers.push_back({4, "ucx", {9, 9}, {{1}, {2}}, {0, 256}});
  m.peers.push_back({5, "ucx", {8}, {{3}, {4}}, {0, 512}});
  return m;
}

TEST(Protocol, ColdFillAndItsAnswerRoundTrip) {
  const ColdFillMsg m = sampleColdFill();
  ColdFillMsg d;
  ASSERT_TRUE(decode(encode(m), d).isOk());
  EXPECT_EQ(d.fill, 7u);
  EXPECT_EQ(d.version, 12u);
  EXPECT_EQ(d.target_slot, 1);
  EXPECT_EQ(d.rank_plan, m.rank_plan);
  ASSERT_EQ(d.peers.size(), 2u);
  EXPECT_EQ(d.peers[1].rank, 5);
  EXPECT_EQ(d.peers[1].slot_descriptors, m.peers[1].slot_descriptors);
  EXPECT_EQ(d.peers[1].buffer_byte_offsets, m.peers[1].buffer_byte_offsets);
  const std::vector<uint8_t> bytes = encode(m);
  for (size_t n = 0; n < bytes.size(); ++n) {
    ColdFillMsg t;
    const Status s = decode(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n), t);
    EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << "ColdFill truncated to " << n << " bytes";
  }

  ColdFillDoneMsg done{7, WSYNC_ERR_NOT_READY, "rollout 0: version 12 is no longer held", 0};
  ColdFillDoneMsg e;
  ASSERT_TRUE(decode(encode(done), e).isOk());
  EXPECT_EQ(e.fill, 7u);
  EXPECT_EQ(e.code, WSYNC_ERR_NOT_READY);
  EXPECT_EQ(e.message, done.message);
  done = {8, WSYNC_SUCCESS, "", 1u << 30};
  ASSERT_TRUE(decode(encode(done), e).isOk());
  EXPECT_EQ(e.code, WSYNC_SUCCESS);
  EXPECT_EQ(e.bytes, 1u << 30);
  const std::vector<uint8_t> answer = encode(done);
  for (size_t n = 0; n < answer.size(); ++n) {
    ColdFillDoneMsg t;
    EXPECT_EQ(decode(std::vector<uint8_t>(answer.begin(), answer.begin() + n), t).code(),
              WSYNC_ERR_PROTOCOL);
  }
}

TEST(Protocol, ColdFillWithoutAVersionOrTheTargetSlotIsRejected) {
  ColdFillMsg m = sampleColdFill();
  m.version = 0;
  ColdFillMsg d;
  EXPECT_EQ(decode(encode(m), d).message(), "ColdFill: version 0");
  m = sampleColdFill();
  m.target_slot = 2;  // the peers have 2 slots
  EXPECT_EQ(decode(encode(m), d).message(), "ColdFill: rollout 4 has no slot 2");
  m.target_slot = -1;
  EXPECT_EQ(decode(encode(m), d).code(), WSYNC_ERR_PROTOCOL);
  m = sampleColdFill();
  m.peers[0].rank = -3;
  EXPECT_EQ(decode(encode(m), d).message(), "ColdFill: negative rollout rank");
}

// Every message of the table: a type id of its own, a name, and a payload whose populated
// instance (and default one, unless its checks refuse it) round-trips, and every strict prefix of
// which fails as PROTOCOL.
TEST(ProtocolTable, EveryMessageRoundTripsAndRejectsItsPrefixes) {
  std::set<uint16_t> ids;
  for (const MessageInfo& info : kMessages) {
    EXPECT_TRUE(ids.insert(static_cast<uint16_t>(info.type)).second) << info.name;
    EXPECT_STREQ(messageTypeName(info.type), info.name);
    const bool known = withPayloadOf(info.type, [&](auto t) {
      using Payload = typename decltype(t)::type;
      for (const bool populated : {false, true}) {
        const Payload m = populated ? test::samplePayload<Payload>() : Payload{};
        const std::vector<uint8_t> bytes = encode(m);
        Payload d;
        const Status s = decode(bytes, d);
        // A default ColdFill (version 0) or PlanExtension (replica -1) fails its own checks.
        if (!populated && !s.isOk()) {
          EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL) << info.name;
          continue;
        }
        ASSERT_TRUE(s.isOk()) << info.name << ": " << s.toString();
        EXPECT_EQ(encode(d), bytes) << info.name;
        for (size_t n = 0; n < bytes.size(); ++n) {
          // Delivered's stats block is optional: its lists alone decode.
          if (info.type == MessageType::kDelivered) break;
          Payload p;
          EXPECT_EQ(decode(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n), p).code(),
                    WSYNC_ERR_PROTOCOL)
              << info.name << " cut to " << n << " bytes";
        }
      }
    });
    EXPECT_TRUE(known) << info.name;
  }
  EXPECT_STREQ(messageTypeName(static_cast<MessageType>(999)), "Unknown");
}

// A rank of another protocol version is refused at Hello, naming both versions, whatever the
// rest of its Hello looks like.
TEST(ProtocolTable, HelloOfAnotherProtocolVersionNamesBoth) {
  HelloMsg hello;
  hello.protocol_version = kProtocolVersion + 1;
  std::vector<uint8_t> bytes = encode(hello);
  bytes.push_back(0x7f);  // a newer Hello may carry more
  HelloMsg d;
  const Status s = decode(bytes, d);
  EXPECT_EQ(s.code(), WSYNC_ERR_PROTOCOL);
  EXPECT_EQ(
      s.message().find("protocol version " + std::to_string(kProtocolVersion + 1) +
                       " of the rank, " + std::to_string(kProtocolVersion) + " of the coordinator"),
      0u)
      << s.message();
}

}  // namespace
// The table's sender column: what a rank may send and what only the coordinator sends.
TEST(Protocol, TheSenderColumnSaysWhoMaySendEachMessage) {
  using wsync::MessageType;
  using wsync::Sender;
  EXPECT_TRUE(wsync::maySend(Sender::kRank, MessageType::kHello));
  EXPECT_FALSE(wsync::maySend(Sender::kCoordinator, MessageType::kHello));
  EXPECT_TRUE(wsync::maySend(Sender::kCoordinator, MessageType::kGo));
  EXPECT_FALSE(wsync::maySend(Sender::kRank, MessageType::kGo));
  EXPECT_TRUE(wsync::maySend(Sender::kRank, MessageType::kPartialMaxima));
  EXPECT_FALSE(wsync::maySend(Sender::kRank, MessageType::kBlockMaxima));
  EXPECT_FALSE(wsync::maySend(Sender::kRank, static_cast<MessageType>(0xfff0)));
  for (const wsync::MessageInfo& m : wsync::kMessages) {  // every message has exactly its senders
    EXPECT_EQ(wsync::maySend(Sender::kRank, m.type), m.sender != Sender::kCoordinator) << m.name;
    EXPECT_EQ(wsync::maySend(Sender::kCoordinator, m.type), m.sender != Sender::kRank) << m.name;
  }
}

}  // namespace wsync
