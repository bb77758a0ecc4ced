// Writes the seed corpus of every fuzz target: real encodings of valid registrations, plans (from
// the planner), rank plans, every message of the coordinator protocol's table, control frames and
// CUDA IPC wire formats, one file per input, into <corpus root>/<target>/. Deterministic: running
// it again rewrites the same bytes. Usage: wsync_fuzz_make_seeds <corpus root>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/plan_codec.h"
#include "codec/registration_codec.h"
#include "control/frame_channel.h"
#include "layout/builders.h"
#include "plan/planner.h"
#include "protocol/protocol.h"
#include "protocol_sample.h"
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

// Two seeds per message of the protocol's table (protocol/protocol.h): its payload struct default
// constructed and populated (protocol_sample.h), after the selector byte the fuzz target reads
// (the message's index in kMessages). A message added to the table gets its seeds here.
void writeProtocolSeeds(SeedWriter& out) {
  for (size_t i = 0; i < std::size(kMessages); ++i) {
    const MessageInfo& info = kMessages[i];
    withPayloadOf(info.type, [&](auto t) {
      using Payload = typename decltype(t)::type;
      const auto selector = static_cast<uint8_t>(i);
      out.writeTagged("protocol", std::string(info.name) + "-default", selector, encode(Payload{}));
      out.writeTagged("protocol", std::string(info.name) + "-sample", selector,
                      encode(test::samplePayload<Payload>()));
    });
  }
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
  for (const bool broadcast : {true, false}) {
    Result<Plan> plan = makePlan(trainers, rollouts, PlannerOptions{broadcast});
    if (!check(plan.status(), "makePlan")) return 1;
    const std::string kind = broadcast ? "broadcast" : "writes-only";
    out.writeRecord("plan", kind, encodePlan(*plan));
    for (const Role role : {Role::kTrainer, Role::kRollout}) {
      const int32_t ranks = role == Role::kTrainer ? 2 : 3;
      for (int32_t rank = 0; rank < ranks; ++rank) {
        const Bytes bytes = encodeRankPlan(rankView(*plan, role, rank));
        out.writeRecord(
            "rank_plan",
            kind + (role == Role::kTrainer ? "-trainer-" : "-rollout-") + std::to_string(rank),
            bytes);
      }
    }
  }
  const Bytes registration = encodeRegistration(rollouts[0]);
  writeProtocolSeeds(out);
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
