// The checksum messages of the coordinator protocol (protocol/protocol.h, version 5):
// SentChecksums, Verify, ChecksumFailed and Welcome's checksums flag round-trip; malformed ones
// (ranks out of order or negative, truncated, a bad flag) are PROTOCOL errors.
#include <gtest/gtest.h>

#include "common/wire.h"
#include "protocol/protocol.h"

namespace wsync {
namespace {

TEST(ChecksumProtocol, MessagesRoundTrip) {
  const SentChecksumsMsg sent{7, {{0, 1}, {3, ~0ull}, {1000, 42}}};
  SentChecksumsMsg sent_back;
  ASSERT_TRUE(decode(encode(sent), sent_back).isOk());
  EXPECT_EQ(sent_back.version, 7u);
  EXPECT_EQ(sent_back.sums, sent.sums);

  const VerifyMsg verify{9, 1, {{2, 5}, {4, 6}}};
  VerifyMsg verify_back;
  ASSERT_TRUE(decode(encode(verify), verify_back).isOk());
  EXPECT_EQ(verify_back.version, 9u);
  EXPECT_EQ(verify_back.slot, 1);
  EXPECT_EQ(verify_back.sums, verify.sums);

  const ChecksumFailedMsg failed{9, {0, 3}, "rollout 2: trainer 0 (tensor 'w')"};
  ChecksumFailedMsg failed_back;
  ASSERT_TRUE(decode(encode(failed), failed_back).isOk());
  EXPECT_EQ(failed_back.version, 9u);
  EXPECT_EQ(failed_back.trainers, failed.trainers);
  EXPECT_EQ(failed_back.detail, failed.detail);

  WelcomeMsg welcome;
  welcome.checksums = true;
  WelcomeMsg welcome_back;
  ASSERT_TRUE(decode(encode(welcome), welcome_back).isOk());
  EXPECT_TRUE(welcome_back.checksums);
  welcome.checksums = false;
  ASSERT_TRUE(decode(encode(welcome), welcome_back).isOk());
  EXPECT_FALSE(welcome_back.checksums);
}

TEST(ChecksumProtocol, MalformedMessagesAreRejected) {
  auto sums = [](std::vector<std::pair<int64_t, uint64_t>> entries, bool truncate = false) {
    ByteWriter w;
    w.varu(3);  // version
    w.varu(entries.size());
    for (const auto& [rank, sum] : entries) {
      w.vari(rank);
      w.fixed64(sum);
    }
    std::vector<uint8_t> bytes = w.take();
    if (truncate) bytes.pop_back();
    return bytes;
  };
  SentChecksumsMsg m;
  EXPECT_EQ(decode(sums({{2, 1}, {1, 1}}), m).code(), WSYNC_ERR_PROTOCOL) << "not increasing";
  EXPECT_EQ(decode(sums({{1, 1}, {1, 1}}), m).code(), WSYNC_ERR_PROTOCOL) << "twice";
  EXPECT_EQ(decode(sums({{-1, 1}}), m).code(), WSYNC_ERR_PROTOCOL) << "negative";
  EXPECT_EQ(decode(sums({{1, 1}}, true), m).code(), WSYNC_ERR_PROTOCOL) << "truncated";
  ByteWriter huge;
  huge.varu(3);
  huge.varu(1ull << 40);  // a count no payload can hold
  EXPECT_EQ(decode(huge.take(), m).code(), WSYNC_ERR_PROTOCOL);

  ChecksumFailedMsg failed;
  std::vector<uint8_t> bytes = encode(ChecksumFailedMsg{1, {-2}, "x"});
  EXPECT_EQ(decode(bytes, failed).code(), WSYNC_ERR_PROTOCOL);

  std::vector<uint8_t> welcome = encode(WelcomeMsg{});
  const size_t checksums_flag = welcome.size() - 3;  // then the delta flag and share (protocol 7)
  welcome[checksums_flag] = 2;
  WelcomeMsg w;
  EXPECT_EQ(decode(welcome, w).code(), WSYNC_ERR_PROTOCOL);
  welcome[checksums_flag] = 0;
  welcome[checksums_flag + 1] = 2;  // the delta flag
  EXPECT_EQ(decode(welcome, w).code(), WSYNC_ERR_PROTOCOL);
  welcome.resize(checksums_flag);  // protocol 4's Welcome, without the flags
  EXPECT_EQ(decode(welcome, w).code(), WSYNC_ERR_PROTOCOL);
  EXPECT_STREQ(messageTypeName(MessageType::kChecksumFailed), "ChecksumFailed");
}

}  // namespace
}  // namespace wsync
