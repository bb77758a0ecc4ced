// Descriptor passing over an abstract unix socket (control/fd_exchange.h): a fetched descriptor
// reaches the very file that was offered; wrong tokens, withdrawn offers and absent servers are
// refused with errors that name the server; many clients at once each get their own descriptor.
#include "control/fd_exchange.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace wsync {
namespace {

using namespace std::chrono_literals;

// An anonymous file holding `text`.
Fd fileWith(const std::string& text) {
  Fd fd(::memfd_create("wsync-fd-exchange-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
  return fd;
}

std::string contentsOf(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(FdExchange, FetchedDescriptorIsTheOfferedFile) {
  auto server = FdServer::start();
  ASSERT_TRUE(server.isOk()) << server.status().toString();
  Fd file = fileWith("version 7 of the slot");
  const FdServer::Offer offer = (*server)->offer(file.get());
  Result<Fd> got = fetchFd((*server)->name(), offer.id, offer.token, 5s);
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_NE(got->get(), file.get());  // a new descriptor of the same open file
  EXPECT_EQ(contentsOf(got->get()), "version 7 of the slot");
  ASSERT_EQ(::pwrite(got->get(), "V", 1, 0), 1);  // writes through it reach the offered file
  EXPECT_EQ(contentsOf(file.get()), "Version 7 of the slot");
}

TEST(FdExchange, WrongTokenWithdrawnOfferAndUnknownIdAreRefused) {
  auto server = FdServer::start();
  ASSERT_TRUE(server.isOk());
  Fd file = fileWith("secret");
  const FdServer::Offer offer = (*server)->offer(file.get());
  Result<Fd> wrong = fetchFd((*server)->name(), offer.id, offer.token ^ 1, 5s);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_EQ(wrong.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(wrong.status().message().find((*server)->name()), std::string::npos)
      << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("refused"), std::string::npos);
  Result<Fd> unknown = fetchFd((*server)->name(), offer.id + 100, offer.token, 5s);
  EXPECT_EQ(unknown.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
  (*server)->withdraw(offer.id);
  Result<Fd> withdrawn = fetchFd((*server)->name(), offer.id, offer.token, 5s);
  EXPECT_EQ(withdrawn.status().code(), WSYNC_ERR_INVALID_ARGUMENT);
}

TEST(FdExchange, NoServerUnderThatNameIsARemoteError) {
  Result<Fd> got = fetchFd("wsync-fd-nobody-listens-here", 1, 2, 2s);
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.status().code(), WSYNC_ERR_REMOTE) << got.status().toString();
  EXPECT_NE(got.status().message().find("wsync-fd-nobody-listens-here"), std::string::npos);
}

TEST(FdExchange, ManyClientsAtOnce) {
  auto server = FdServer::start();
  ASSERT_TRUE(server.isOk());
  constexpr int kFiles = 8;
  std::vector<Fd> files;
  std::vector<FdServer::Offer> offers;
  for (int i = 0; i < kFiles; ++i) {
    files.push_back(fileWith("file " + std::to_string(i)));
    offers.push_back((*server)->offer(files.back().get()));
  }
  std::vector<std::string> seen(kFiles * 4);
  std::vector<std::thread> clients;
  for (int c = 0; c < kFiles * 4; ++c) {
    clients.emplace_back([&, c] {
      const FdServer::Offer& o = offers[static_cast<size_t>(c % kFiles)];
      Result<Fd> got = fetchFd((*server)->name(), o.id, o.token, 10s);
      seen[static_cast<size_t>(c)] = got.isOk() ? contentsOf(got->get()) : got.status().toString();
    });
  }
  for (std::thread& t : clients)
    t.join();
  for (int c = 0; c < kFiles * 4; ++c)
    EXPECT_EQ(seen[static_cast<size_t>(c)], "file " + std::to_string(c % kFiles));
}

TEST(FdExchange, TheProcessServerIsShared) {
  auto a = FdServer::processServer();
  auto b = FdServer::processServer();
  ASSERT_TRUE(a.isOk());
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ((*a)->name().rfind("wsync-fd-", 0), 0u);
}

}  // namespace
}  // namespace wsync
