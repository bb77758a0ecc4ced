// Writes the seed corpus of every fuzz target: real encodings of valid registrations, plans (from
// the planner), rank plans, coordinator messages, control frames and CUDA IPC wire formats, one
// file per input, into <corpus root>/<target>/. Deterministic: running it again rewrites the
// same bytes. Usage: wsync_fuzz_make_seeds <corpus root>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "control/frame_channel.h"
#include "coordinator/protocol.h"
#include "layout/builders.h"
#include "plan/planner.h"
#ifdef WSYNC_FUZZ_CUDA_IPC
#include "transport/cuda_ipc/cuda_ipc_encoding.h"
#endif

namespace wsync {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

class SeedWriter {
 public:
  explicit SeedWriter(fs::path root) : root_(std::move(root)) {}
  void write(const std::string& target, const std::string& name, const Bytes& bytes) {
    fs::create_directories(root_ / target);
    std::ofstream out(root_ / target / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    ok_ = ok_ && out.good();
  }
  // A seed for a target whose first input byte selects what the rest is.
  void writeTagged(const std::string& target, const std::string& name, uint8_t selector,
                   const Bytes& bytes) {
    Bytes tagged{selector};
    tagged.insert(tagged.end(), bytes.begin(), bytes.end());
    write(target, name, tagged);
  }
  // A codec record twice: whole (mode byte 1) and as its payload alone (mode byte 0; the target
  // frames it with a valid header and checksum).
  void writeRecord(const std::string& target, const std::string& name, const Bytes& record) {
    writeTagged(target, name + "-record", 1, record);
    writeTagged(target, name + "-payload", 0,
                Bytes(record.begin() + codec_detail::kHeaderSize, record.end()));
  }
  bool ok() const { return ok_; }

 private:
  fs::path root_;
  bool ok_ = true;
};

bool check(const Status& s, const char* what) {
  if (!s.isOk()) std::fprintf(stderr, "make_seeds: %s: %s\n", what, s.message().c_str());
  return s.isOk();
}

// Two TP trainers; rollout replica 0 split over two ranks in bf16 device memory, replica 1 one
// rank holding everything (so the planner makes both writes and broadcast groups).
bool makeRegistrations(std::vector<Registration>& trainers, std::vector<Registration>& rollouts) {
  const Dims w{64, 32}, b{32}, e{16, 8};
  for (int t = 0; t < 2; ++t) {
    Registration r;
    r.role = Role::kTrainer;
    r.rank = t;
    if (!check(addSplit(r, "w", w, DType::kFloat32, 0, 2, t).status(), "trainer split") ||
        !check(addReplicated(r, "b", b, DType::kFloat32).status(), "trainer replicated") ||
        !check(addFlatRange(r, "e", e, DType::kFloat32, t * 64, t * 64 + 64).status(),
               "trainer flat range")) {
      return false;
    }
    trainers.push_back(std::move(r));
  }
  for (int k = 0; k < 3; ++k) {
    Registration r;
    r.role = Role::kRollout;
    r.rank = k;
    r.replica = k < 2 ? 0 : 1;
    const MemoryKind mem = k < 2 ? MemoryKind::kDevice : MemoryKind::kHost;
    const Status s =
        k < 2 ? addSplit(r, "w", w, DType::kBFloat16, 1, 2, k, SplitRule::kBalanced, mem).status()
              : addReplicated(r, "w", w, DType::kFloat32, mem).status();
    if (!check(s, "rollout w") ||
        !check(addReplicated(r, "b", b, DType::kBFloat16, mem).status(), "rollout b") ||
        !check(addReplicated(r, "e", e, DType::kFloat32, mem).status(), "rollout e")) {
      return false;
    }
    rollouts.push_back(std::move(r));
  }
  return true;
}

void writeProtocolSeeds(SeedWriter& out, const Bytes& registration, const Bytes& rank_plan) {
  const std::string t = "protocol";
  HelloMsg hello;
  out.writeTagged(t, "hello-trainer", 0, encode(hello));
  hello.role = Role::kRollout;
  hello.role_rank = 2;
  hello.replica = 1;
  hello.host = "node-b";
  out.writeTagged(t, "hello-rollout", 0, encode(hello));
  WelcomeMsg welcome{1, 2, 3, {0, 1}, {2, 3, 4}};
  out.writeTagged(t, "welcome", 1, encode(welcome));
  RegisterMsg reg;
  reg.registration = registration;
  reg.transport = "cuda_ipc";
  reg.transport_address = {1, 2, 3, 4};
  reg.device_id = "node-a/GPU-0123";
  reg.nccl_unique_id = Bytes(128, 0xab);
  reg.slot_descriptors = {{1, 1}, {2, 2, 2}};
  reg.buffer_byte_offsets = {0, 4096, 4160};
  out.writeTagged(t, "register", 2, encode(reg));
  PlanAssignmentMsg pa;
  pa.rank_plan = rank_plan;
  pa.peers.push_back({1, "ucx", {4, 4}, {{1}, {2}}, {0, 512}});
  pa.comms = {{0, {0, 2, 3}}, {1, {1, 4}}};
  pa.group_comm = {1, 0};
  pa.replica_of_rollout = {0, 0, 1};
  out.writeTagged(t, "plan-assignment-mpi", 3, encode(pa));
  pa.broadcast.backend = "nccl";
  pa.broadcast.world_token = Bytes(128, 0xcd);
  pa.broadcast.world_rank = 4;
  pa.broadcast.world_size = 5;
  pa.broadcast.root_ranks = {0, 1};
  out.writeTagged(t, "plan-assignment-nccl", 3, encode(pa));
  out.writeTagged(t, "version", 4, encode(VersionMsg{42}));
  out.writeTagged(t, "slot", 5, encode(SlotMsg{42, 1}));
  out.writeTagged(t, "go", 6, encode(GoMsg{42, {0, -1, 1}}));
  out.writeTagged(t, "error", 7, encode(ErrorMsg{WSYNC_ERR_PROTOCOL, "bad registration"}));
  DeliveredMsg delivered;
  delivered.version = 42;
  delivered.ready_replicas = {0, 2};
  delivered.skipped_replicas = {1};
  delivered.lost_replicas = {3};
  out.writeTagged(t, "delivered-bare", 8, encode(delivered));
  delivered.has_stats = true;
  delivered.stats = {1 << 20, 1500, 2, 1, 1, 2, 2};
  out.writeTagged(t, "delivered-stats", 8, encode(delivered));
  out.writeTagged(t, "replica-dropped", 9, encode(ReplicaMsg{1, {2, 3}}));
  PlanExtensionMsg extension;
  extension.replica = 2;
  extension.ranks = {4, 5};
  extension.rank_plan = rank_plan;
  extension.peers.push_back({4, "ucx", {4, 4}, {{1}, {2}}, {0, 512}});
  out.writeTagged(t, "plan-extension", 10, encode(extension));
  ColdFillMsg fill;
  fill.fill = 7;
  fill.version = 42;
  fill.target_slot = 1;
  fill.rank_plan = rank_plan;
  fill.peers.push_back({4, "cuda_ipc", {9, 9}, {{1}, {2}}, {0, 512}});
  out.writeTagged(t, "cold-fill", 11, encode(fill));
  out.writeTagged(t, "cold-fill-done", 12,
                  encode(ColdFillDoneMsg{7, WSYNC_ERR_REMOTE, "rollout 3 lost", 4096}));
  out.writeTagged(t, "sent-checksums", 13,
                  encode(SentChecksumsMsg{42, {{0, 0x0123456789abcdefULL}, {2, 17}}}));
  out.writeTagged(t, "verify", 14, encode(VerifyMsg{42, 1, {{0, 5}, {1, 0xffffffffffffffffULL}}}));
  out.writeTagged(t, "checksum-failed", 15,
                  encode(ChecksumFailedMsg{42, {0, 1}, "rollout 2: tensor w differs"}));
}

void writeFrameSeeds(SeedWriter& out, const Bytes& registration) {
  namespace cw = control_wire;
  cw::Nonce server{}, client{};
  for (size_t i = 0; i < server.size(); ++i) {
    server[i] = static_cast<uint8_t>(i);
    client[i] = static_cast<uint8_t>(0xf0 - i);
  }
  const cw::AuthKey key = cw::deriveAuthKey("fuzz secret");
  Bytes handshake;
  for (const Bytes& f :
       {cw::serverHelloFrame(server),
        cw::clientAuthFrame(client, cw::clientTag(key, server, client)),
        cw::welcomeFrame(cw::serverTag(key, server, client)), cw::refusedFrame("wrong secret")}) {
    handshake.insert(handshake.end(), f.begin(), f.end());
  }
  // Mode byte: bit 0 handshake limits, bits 1-7 the write size minus one.
  out.writeTagged("frame_reader", "handshake-whole", 1 | (127 << 1), handshake);
  out.writeTagged("frame_reader", "handshake-by-5", 1 | (4 << 1), handshake);
  // A busy server: kBusy instead of the hello, then a refusal.
  Bytes busy = cw::busyFrame("busy: 32 connections already in the handshake from 10.0.0.7");
  const Bytes refused = cw::refusedFrame("did not finish the handshake within 10000 ms");
  busy.insert(busy.end(), refused.begin(), refused.end());
  out.writeTagged("frame_reader", "handshake-busy", 1 | (127 << 1), busy);
  Bytes app;
  const Bytes go = encode(GoMsg{7, {0, 1}});
  for (const auto& [type, payload] :
       {std::pair<uint16_t, Bytes>{10, go}, {3, registration}, {16, {}}}) {
    const auto header = cw::encodeHeader(type, 0, static_cast<uint32_t>(payload.size()));
    app.insert(app.end(), header.begin(), header.end());
    app.insert(app.end(), payload.begin(), payload.end());
  }
  out.writeTagged("frame_reader", "application-whole", 127 << 1, app);
  out.writeTagged("frame_reader", "application-by-7", 6 << 1, app);
}

#ifdef WSYNC_FUZZ_CUDA_IPC
void writeCudaIpcSeeds(SeedWriter& out) {
  CudaIpcProcessInfo info;
  info.host = "node-a/0b8d6f4e-3c1a-4e52-9d0c-7f3b2a1e5c9d";
  info.pid = 4242;
  info.nonce = 0x1234567890abcdefULL;
  info.device = 3;
  for (size_t i = 0; i < info.device_uuid.size(); ++i)
    info.device_uuid[i] = static_cast<uint8_t>(0xa0 + i);
  out.writeTagged("cuda_ipc", "address", 0, encodeCudaIpcAddress(info));
  CudaIpcDescriptor d;
  for (size_t i = 0; i < sizeof(d.handle.reserved); ++i)
    d.handle.reserved[i] = static_cast<char>(i);
  d.size = 1 << 20;
  d.base = 0x7f0000000000ULL;
  d.pid = 4242;
  d.nonce = info.nonce;
  d.device = 3;
  out.writeTagged("cuda_ipc", "descriptor-ipc-handle", 1, encodeCudaIpcDescriptor(d));
  d.kind = CudaIpcExportKind::kVmm;
  d.fd_server = "wsync-fd-4242-1";
  d.offer_id = 7;
  d.offer_token = 0xfeedfacecafebeefULL;
  d.mapped_size = 2 << 20;
  out.writeTagged("cuda_ipc", "descriptor-vmm", 1, encodeCudaIpcDescriptor(d));
}
#endif

int run(const char* root) {
  SeedWriter out(root);
  std::vector<Registration> trainers, rollouts;
  if (!makeRegistrations(trainers, rollouts)) return 1;
  for (const Registration& r : trainers)
    out.writeRecord("registration", "trainer-" + std::to_string(r.rank), encodeRegistration(r));
  for (const Registration& r : rollouts)
    out.writeRecord("registration", "rollout-" + std::to_string(r.rank), encodeRegistration(r));
  Bytes some_rank_plan;
  for (const bool broadcast : {true, false}) {
    Result<Plan> plan = makePlan(trainers, rollouts, PlannerOptions{broadcast});
    if (!check(plan.status(), "makePlan")) return 1;
    const std::string kind = broadcast ? "broadcast" : "writes-only";
    out.writeRecord("plan", kind, encodePlan(*plan));
    for (const Role role : {Role::kTrainer, Role::kRollout}) {
      const int32_t ranks = role == Role::kTrainer ? 2 : 3;
      for (int32_t rank = 0; rank < ranks; ++rank) {
        const Bytes bytes = encodeRankPlan(rankView(*plan, role, rank));
        if (some_rank_plan.empty() && role == Role::kRollout) some_rank_plan = bytes;
        out.writeRecord(
            "rank_plan",
            kind + (role == Role::kTrainer ? "-trainer-" : "-rollout-") + std::to_string(rank),
            bytes);
      }
    }
  }
  const Bytes registration = encodeRegistration(rollouts[0]);
  writeProtocolSeeds(out, registration, some_rank_plan);
  writeFrameSeeds(out, registration);
#ifdef WSYNC_FUZZ_CUDA_IPC
  writeCudaIpcSeeds(out);
#endif
  if (!out.ok()) std::fprintf(stderr, "make_seeds: writing under %s failed\n", root);
  return out.ok() ? 0 : 1;
}

}  // namespace
}  // namespace wsync

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus root>\n", argv[0]);
    return 2;
  }
  return wsync::run(argv[1]);
}
