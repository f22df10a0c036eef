// Tests of the rendezvous store: src/bootstrap/store_server.hpp, store_client.hpp and the token
// handshake of auth.hpp, over real loopback sockets in one process. Besides the operations, they
// check the store's robustness promise: refused or misbehaving connections (wrong token, garbage,
// silence, oversized or truncated frames) are dropped without disturbing other clients, in
// particular one that is parked in a blocking GET at the time.
//
// Every server listens on 127.0.0.1 port 0 (an ephemeral port); nothing uses a fixed port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "eventually.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_client.hpp"
#include "bootstrap/store_protocol.hpp"
#include "bootstrap/store_server.hpp"
#include "core/clock.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;

// Up to 10 s, looking every 2ms: server counters are updated on the server's thread slightly after
// the client sees the outcome.
template <typename Condition>
bool eventually(Condition condition) {
  return test_support::eventually(condition, 10s, 2ms);
}

using Bytes = std::vector<std::uint8_t>;

constexpr char kToken[] = "job-token-1234";

// Generous for anything that should happen promptly, so that a loaded CI machine does not turn
// into a failure; tests only wait this long when something is already broken.
constexpr auto kPatience = 10s;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

StoreServerOptions options(std::string token = kToken,
                           std::chrono::milliseconds handshake_timeout = 10s) {
  StoreServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.token = std::move(token);
  o.handshake_timeout = handshake_timeout;
  return o;
}

std::unique_ptr<StoreClient> connect(const StoreServer& server, std::string token = kToken) {
  return std::make_unique<StoreClient>("127.0.0.1", server.port(), std::move(token),
                                       Deadline::after(kPatience));
}

// Runs `call`, which must throw holmes::Error; returns it (or a default Error on failure).
Error expect_error(const std::function<void()>& call, hm_status_t status,
                   const std::string& context) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << context << ": " << e.what();
    return e;
  }
  ADD_FAILURE() << context << ": no holmes::Error thrown";
  return Error(HM_SUCCESS, "");
}

// A plain POSIX TCP client for speaking (or mangling) the protocol by hand.
class RawConnection {
 public:
  explicit RawConnection(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd_, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
        << std::strerror(errno);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConnection() { close(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // False when the peer has closed (or reset) the connection.
  bool send_all(const Bytes& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Exactly n bytes, or nullopt on EOF, error or timeout.
  std::optional<Bytes> read_exact(std::size_t n, std::chrono::milliseconds timeout = kPatience) {
    Bytes out(n);
    std::size_t done = 0;
    const auto deadline = Clock::now() + timeout;
    while (done < n) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t r = ::recv(fd_, out.data() + done, n - done, 0);
      if (r <= 0) return std::nullopt;
      done += static_cast<std::size_t>(r);
    }
    return out;
  }

  // Waits until the peer closes the connection, discarding whatever it sends first. True when it
  // closed within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout = kPatience) {
    const auto deadline = Clock::now() + timeout;
    std::array<std::uint8_t, 256> sink{};
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t r = ::recv(fd_, sink.data(), sink.size(), 0);
      if (r == 0) return true;
      if (r < 0 && errno != EINTR && errno != EAGAIN) return true;  // reset counts as closed
    }
  }

  // Performs the client side of the token handshake by hand; true when the server accepted.
  bool authenticate(const std::string& token) {
    const auto challenge_bytes = read_exact(auth::Challenge::kWireBytes);
    if (!challenge_bytes) return false;
    auth::Challenge challenge;
    std::span<const std::uint8_t, auth::Challenge::kWireBytes> span(challenge_bytes->data(),
                                                                    auth::Challenge::kWireBytes);
    if (!auth::Challenge::decode(span, auth::Channel::kStore, challenge)) return false;
    auth::Proof proof;
    proof.client_nonce = auth::random_nonce();
    proof.mac = auth::compute_mac(token, auth::Role::kClient, auth::Channel::kStore,
                                  challenge.server_nonce, proof.client_nonce, "store");
    const auto proof_bytes = proof.encode();
    if (!send_all(Bytes(proof_bytes.begin(), proof_bytes.end()))) return false;
    const auto verdict = read_exact(auth::Verdict::kWireBytes);
    return verdict && (*verdict)[0] == 1;
  }

 private:
  int fd_ = -1;
};

Bytes u32_le(std::uint32_t v) {
  return {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
          static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
}

// A client parked in GET on `key` in a background thread; value() joins and returns what it got.
class ParkedGetter {
 public:
  ParkedGetter(const StoreServer& server, std::string key)
      : client_(connect(server)), key_(std::move(key)) {
    result_ = std::async(std::launch::async, [this] {
      auto value = client_->get_string(key_, Deadline::after(kPatience));
      returned_ = true;
      return value;
    });
  }
  bool returned() const { return returned_; }
  std::string value() { return result_.get(); }

 private:
  std::unique_ptr<StoreClient> client_;
  std::string key_;
  std::atomic<bool> returned_{false};
  std::future<std::string> result_;
};

TEST(Store, ServerReportsItsAddress) {
  StoreServer server(options());
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  auto client = connect(server);
  EXPECT_EQ(client->endpoint(), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(client->local_address(), "127.0.0.1");
  EXPECT_TRUE(eventually([&] { return server.accepted_connections() == 1; }));
  EXPECT_EQ(server.refused_connections(), 0u);
}

TEST(Store, SetGetCheckRemovePing) {
  StoreServer server(options());
  auto client = connect(server);
  client->ping();
  EXPECT_FALSE(client->check("a"));
  client->set("a", "alpha");
  EXPECT_TRUE(client->check("a"));
  EXPECT_EQ(client->get_string("a", Deadline::after(kPatience)), "alpha");
  client->set("a", "beta");  // overwrite
  EXPECT_EQ(client->get_string("a", Deadline::after(kPatience)), "beta");

  // Binary values, including NUL bytes, and the empty value, come back intact.
  const Bytes binary = {0, 1, 2, 0xff, 0, 0x80};
  client->set("bin", std::span<const std::uint8_t>(binary));
  EXPECT_EQ(client->get("bin", Deadline::after(kPatience)), binary);
  client->set("empty", "");
  EXPECT_TRUE(client->check("empty"));
  EXPECT_EQ(client->get("empty", Deadline::after(kPatience)), Bytes{});

  EXPECT_TRUE(client->remove("a"));
  EXPECT_FALSE(client->remove("a"));
  EXPECT_FALSE(client->check("a"));
  client->ping();

  // A second client sees the same data.
  auto other = connect(server);
  EXPECT_EQ(other->get("bin", Deadline::after(kPatience)), binary);
  EXPECT_FALSE(other->check("a"));
}

TEST(Store, AddCountsFromZeroAndAcceptsNegativeDeltas) {
  StoreServer server(options());
  auto client = connect(server);
  EXPECT_EQ(client->add("counter", 5), 5);  // a missing key starts at 0
  EXPECT_EQ(client->add("counter", -7), -2);
  EXPECT_EQ(client->add("counter", 0), -2);
  EXPECT_EQ(client->get_string("counter", Deadline::after(kPatience)), "-2");
  EXPECT_EQ(client->add("fresh", -3), -3);
  // A value that is not a number counts as 0 (documented in the server).
  client->set("text", "hello");
  EXPECT_EQ(client->add("text", 4), 4);
  // The counter wraps like a two's complement int64 rather than failing.
  EXPECT_EQ(client->add("big", INT64_MAX), INT64_MAX);
  EXPECT_EQ(client->add("big", 1), INT64_MIN);
}

TEST(Store, ConcurrentAddsAreAtomic) {
  StoreServer server(options());
  constexpr int kThreads = 4;
  constexpr int kAdds = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&server] {
      auto client = connect(server);
      for (int i = 0; i < kAdds; ++i) client->add("n", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(connect(server)->add("n", 0), kThreads * kAdds);
}

TEST(Store, GetBlocksUntilAnotherClientSets) {
  StoreServer server(options());
  ParkedGetter getter(server, "late");
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(getter.returned()) << "GET of a missing key returned before it was set";
  connect(server)->set("late", "value-1");
  EXPECT_EQ(getter.value(), "value-1");
}

TEST(Store, AddWakesEveryWaiterOfTheKey) {
  StoreServer server(options());
  ParkedGetter first(server, "count");
  ParkedGetter second(server, "count");
  ParkedGetter unrelated(server, "other");
  std::this_thread::sleep_for(50ms);
  connect(server)->add("count", 41);
  EXPECT_EQ(first.value(), "41");
  EXPECT_EQ(second.value(), "41");
  EXPECT_FALSE(unrelated.returned());
  connect(server)->set("other", "x");
  EXPECT_EQ(unrelated.value(), "x");
}

TEST(Store, GetOfMissingKeyTimesOutNamingTheKey) {
  StoreServer server(options());
  auto client = connect(server);
  const auto start = Clock::now();
  const Error e = expect_error([&] { client->get("no/such/key", Deadline::after(300ms)); },
                               HM_ERR_TIMEOUT, "GET");
  const auto elapsed = Clock::now() - start;
  EXPECT_TRUE(contains(e.what(), "no/such/key")) << e.what();
  EXPECT_GE(elapsed, 250ms);  // it waited (allowing for millisecond truncation)
  EXPECT_LT(elapsed, 5s);     // and not much past the deadline

  // An expired deadline gives an immediate TIMEOUT rather than an unbounded wait.
  expect_error([&] { client->get("no/such/key", Deadline::after(0ms)); }, HM_ERR_TIMEOUT,
               "GET with no time left");

  // The connection stays usable after a timed-out GET.
  client->set("k", "v");
  EXPECT_EQ(client->get_string("k", Deadline::after(kPatience)), "v");
}

TEST(Store, ClientRefusesOversizedKeysWithoutAskingTheServer) {
  StoreServer server(options());
  auto client = connect(server);
  expect_error([&] { client->set(std::string(store::kMaxKeyBytes + 1, 'k'), "v"); },
               HM_ERR_INVALID_ARGUMENT, "SET with a long key");
  client->set(std::string(store::kMaxKeyBytes, 'k'), "v");  // the limit itself is fine
  EXPECT_TRUE(client->check(std::string(store::kMaxKeyBytes, 'k')));
}

TEST(Store, WrongTokenIsRefusedWithoutDisturbingAWaitingClient) {
  StoreServer server(options());
  ParkedGetter getter(server, "after-intruder");
  std::this_thread::sleep_for(50ms);

  const auto start = Clock::now();
  const Error e = expect_error([&] { connect(server, "not-the-token"); }, HM_ERR_AUTH,
                               "client with the wrong token");
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(server.port()))) << e.what();
  EXPECT_TRUE(eventually([&] { return server.refused_connections() == 1; }));

  EXPECT_FALSE(getter.returned());
  auto setter = connect(server);
  setter->set("after-intruder", "still-here");
  EXPECT_EQ(getter.value(), "still-here");
  EXPECT_EQ(server.refused_connections(), 1u);
  EXPECT_EQ(server.accepted_connections(), 2u);  // the getter and the setter
}

TEST(Store, EmptyTokenWorksWhenBothSidesUseIt) {
  StoreServer server(options(""));
  auto client = connect(server, "");
  client->set("k", "v");
  EXPECT_EQ(client->get_string("k", Deadline::after(kPatience)), "v");
  expect_error([&] { connect(server, "some-token"); }, HM_ERR_AUTH, "token against empty");

  StoreServer with_token(options("some-token"));
  expect_error([&] { connect(with_token, ""); }, HM_ERR_AUTH, "empty against token");
  EXPECT_TRUE(eventually([&] { return with_token.refused_connections() == 1; }));
}

// Another job's store (different token): the client refuses to use it.
TEST(Store, StoreOfAnotherJobIsRefused) {
  StoreServer other_job(options("other-job-token"));
  const Error e = expect_error([&] { connect(other_job, kToken); }, HM_ERR_AUTH, "other job");
  EXPECT_TRUE(contains(e.what(), "refused")) << e.what();
}

TEST(Store, GarbageInsteadOfAProofIsRefused) {
  StoreServer server(options());
  ParkedGetter getter(server, "k");
  auto good = connect(server);

  RawConnection raw(server.port());
  ASSERT_TRUE(raw.read_exact(auth::Challenge::kWireBytes).has_value());
  raw.send_all(Bytes(auth::Proof::kWireBytes, 0x41));
  const auto verdict = raw.read_exact(auth::Verdict::kWireBytes);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ((*verdict)[0], 0);  // refused, and no server MAC to learn from
  EXPECT_EQ(Bytes(verdict->begin() + 1, verdict->end()), Bytes(auth::kMacBytes, 0));
  EXPECT_TRUE(raw.wait_closed());
  EXPECT_TRUE(eventually([&] { return server.refused_connections() == 1; }));

  good->ping();
  good->set("k", "fine");
  EXPECT_EQ(getter.value(), "fine");
}

TEST(Store, ClientClosingDuringTheHandshakeIsDropped) {
  StoreServer server(options());
  auto good = connect(server);
  {
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.read_exact(auth::Challenge::kWireBytes).has_value());
    raw.send_all(Bytes(10, 0x00));  // a third of a proof, then gone
  }
  // This one was certainly past the challenge, so it must count as refused.
  EXPECT_TRUE(eventually([&] { return server.refused_connections() == 1; }));
  {
    RawConnection raw(server.port());  // connects and leaves without reading anything
  }
  good->set("k", "v");
  EXPECT_EQ(good->get_string("k", Deadline::after(kPatience)), "v");
  EXPECT_EQ(server.accepted_connections(), 1u);
}

TEST(Store, SilentClientIsDroppedAfterTheHandshakeTimeout) {
  StoreServer server(options(kToken, 200ms));
  auto good = connect(server);
  RawConnection silent(server.port());
  const auto start = Clock::now();
  ASSERT_TRUE(silent.read_exact(auth::Challenge::kWireBytes).has_value());
  EXPECT_TRUE(silent.wait_closed(5s)) << "a silent client was never dropped";
  const auto elapsed = Clock::now() - start;
  EXPECT_GE(elapsed, 150ms);  // not before the timeout (the timer started just before we did)
  EXPECT_LT(elapsed, 5s);
  EXPECT_TRUE(eventually([&] { return server.refused_connections() == 1; }));

  // An authenticated client that then stays idle past the handshake timeout is not dropped.
  std::this_thread::sleep_for(400ms);
  good->ping();
  good->set("k", "v");
  EXPECT_EQ(good->get_string("k", Deadline::after(kPatience)), "v");
  EXPECT_EQ(server.refused_connections(), 1u);
}

// After a correct handshake a client is trusted to speak the protocol; if it does not, only its
// own connection is dropped. Each case uses its own connection and checks that a client parked
// in GET across all of them, and another active client, are unaffected.
TEST(Store, AuthenticatedClientSendingBadFramesIsDropped) {
  StoreServer server(options());
  ParkedGetter getter(server, "end");
  auto good = connect(server);

  {
    SCOPED_TRACE("length above the frame limit");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    raw.send_all(u32_le(0xffffffffu));
    EXPECT_TRUE(raw.wait_closed());
  }
  good->ping();
  {
    SCOPED_TRACE("length one above kMaxFrameBytes");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    raw.send_all(u32_le(static_cast<std::uint32_t>(store::kMaxFrameBytes + 1)));
    EXPECT_TRUE(raw.wait_closed());
  }
  {
    SCOPED_TRACE("zero length");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    raw.send_all(u32_le(0));
    EXPECT_TRUE(raw.wait_closed());
  }
  good->set("a", "1");
  {
    SCOPED_TRACE("malformed body: unknown op");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    Bytes frame = u32_le(8);
    for (int i = 0; i < 8; ++i) frame.push_back(static_cast<std::uint8_t>(0xee - i));
    raw.send_all(frame);
    // The server says why (BAD_REQUEST) and then hangs up.
    const auto reply = raw.read_exact(5);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(*reply, (Bytes{1, 0, 0, 0, static_cast<std::uint8_t>(store::Reply::kBadRequest)}));
    EXPECT_TRUE(raw.wait_closed());
  }
  {
    SCOPED_TRACE("disconnect mid-frame");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    Bytes partial = u32_le(100);
    partial.insert(partial.end(), 10, 0x01);
    raw.send_all(partial);
  }
  {
    SCOPED_TRACE("valid request by hand, then garbage");
    RawConnection raw(server.port());
    ASSERT_TRUE(raw.authenticate(kToken));
    raw.send_all(store::encode_request(store::Request{}));  // PING
    const auto reply = raw.read_exact(5);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(*reply, (Bytes{1, 0, 0, 0, static_cast<std::uint8_t>(store::Reply::kOk)}));
    raw.send_all(Bytes{2, 0, 0, 0, 0xab, 0xcd});
    EXPECT_TRUE(raw.read_exact(5).has_value());  // BAD_REQUEST
    EXPECT_TRUE(raw.wait_closed());
  }

  EXPECT_EQ(good->get_string("a", Deadline::after(kPatience)), "1");
  EXPECT_FALSE(getter.returned());
  good->set("end", "survived");
  EXPECT_EQ(getter.value(), "survived");
  EXPECT_EQ(server.refused_connections(), 0u);   // all of them had proved the token
  EXPECT_EQ(server.accepted_connections(), 8u);  // getter, good, six raw connections
}

// A minimal fake store on a listening POSIX socket: sends `challenge`, reads the proof, answers
// with whatever `make_verdict` builds from it (or hangs up when it returns nullopt).
class FakeStore {
 public:
  using VerdictMaker =
      std::function<std::optional<Bytes>(const auth::Challenge&, const auth::Proof&)>;

  FakeStore(Bytes challenge, auth::Challenge parsed, VerdictMaker make_verdict) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 4), 0);
    socklen_t length = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, challenge, parsed, make_verdict] {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) return;
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      ::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL);
      std::array<std::uint8_t, auth::Proof::kWireBytes> proof_bytes{};
      std::size_t got = 0;
      while (got < proof_bytes.size()) {
        pollfd q{fd, POLLIN, 0};
        if (::poll(&q, 1, 10000) <= 0) break;
        const ssize_t n = ::recv(fd, proof_bytes.data() + got, proof_bytes.size() - got, 0);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got == proof_bytes.size()) {
        if (auto verdict = make_verdict(parsed, auth::Proof::decode(proof_bytes))) {
          ::send(fd, verdict->data(), verdict->size(), MSG_NOSIGNAL);
          // Keep the connection open until the client leaves.
          pollfd q{fd, POLLIN, 0};
          ::poll(&q, 1, 10000);
        }
      }
      ::close(fd);
    });
  }
  ~FakeStore() {
    thread_.join();
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }

 private:
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

auth::Challenge store_challenge() {
  auth::Challenge c;
  c.channel = auth::Channel::kStore;
  c.server_nonce = auth::random_nonce();
  return c;
}

Bytes to_bytes(const auto& array) { return Bytes(array.begin(), array.end()); }

Error connect_to_fake(const FakeStore& fake, const std::string& context) {
  return expect_error(
      [&] { StoreClient("127.0.0.1", fake.port(), kToken, Deadline::after(kPatience)); },
      HM_ERR_AUTH, context);
}

TEST(StoreClientAuth, RefusesAServerThatCannotProveTheToken) {
  // The server claims acceptance but its MAC is made with another token: not our job's store.
  const auth::Challenge challenge = store_challenge();
  FakeStore fake(to_bytes(challenge.encode()), challenge,
                 [](const auth::Challenge& c, const auth::Proof& proof) -> std::optional<Bytes> {
                   auth::Verdict v;
                   v.accepted = true;
                   v.mac = auth::compute_mac("another-token", auth::Role::kServer,
                                             auth::Channel::kStore, c.server_nonce,
                                             proof.client_nonce, "store");
                   return to_bytes(v.encode());
                 });
  const Error e = connect_to_fake(fake, "server with a wrong MAC");
  EXPECT_TRUE(contains(e.what(), "could not prove")) << e.what();
}

TEST(StoreClientAuth, RefusesAServerThatEchoesTheClientProof) {
  // A MAC for the client role is not a server proof, even with the right token.
  const auth::Challenge challenge = store_challenge();
  FakeStore fake(to_bytes(challenge.encode()), challenge,
                 [](const auth::Challenge&, const auth::Proof& proof) -> std::optional<Bytes> {
                   auth::Verdict v;
                   v.accepted = true;
                   v.mac = proof.mac;
                   return to_bytes(v.encode());
                 });
  connect_to_fake(fake, "server echoing the client MAC");
}

TEST(StoreClientAuth, AcceptsAServerThatProvesTheToken) {
  // The positive control for the two tests above: the same fake with the right MAC passes the
  // handshake (the client then fails later only because the fake speaks no further).
  const auth::Challenge challenge = store_challenge();
  FakeStore fake(to_bytes(challenge.encode()), challenge,
                 [](const auth::Challenge& c, const auth::Proof& proof) -> std::optional<Bytes> {
                   auth::Verdict v;
                   v.accepted = true;
                   v.mac = auth::compute_mac(kToken, auth::Role::kServer, auth::Channel::kStore,
                                             c.server_nonce, proof.client_nonce, "store");
                   return to_bytes(v.encode());
                 });
  StoreClient client("127.0.0.1", fake.port(), kToken, Deadline::after(kPatience));
}

TEST(StoreClientAuth, RefusesSomethingThatIsNotAStore) {
  auth::Challenge challenge = store_challenge();
  Bytes bad_magic = to_bytes(challenge.encode());
  bad_magic[0] ^= 0xff;
  FakeStore fake(bad_magic, challenge,
                 [](const auth::Challenge&, const auth::Proof&) { return std::optional<Bytes>(); });
  const Error e = connect_to_fake(fake, "bad magic");
  EXPECT_TRUE(contains(e.what(), "not a Holmes store")) << e.what();
}

TEST(StoreClientAuth, RefusesADataPlaneChallenge) {
  auth::Challenge challenge = store_challenge();
  challenge.channel = auth::Channel::kData;
  FakeStore fake(to_bytes(challenge.encode()), challenge,
                 [](const auth::Challenge&, const auth::Proof&) { return std::optional<Bytes>(); });
  connect_to_fake(fake, "data-plane challenge");
}

TEST(StoreClientAuth, ServerHangingUpDuringAuthenticationIsAnAuthError) {
  const auth::Challenge challenge = store_challenge();
  FakeStore fake(to_bytes(challenge.encode()), challenge,
                 [](const auth::Challenge&, const auth::Proof&) { return std::optional<Bytes>(); });
  const Error e = connect_to_fake(fake, "hang-up after the proof");
  EXPECT_TRUE(contains(e.what(), "dropped the connection")) << e.what();
}

TEST(StoreClientConnect, NoServerTimesOutWithinTheDeadline) {
  // A port that is bound but not listening: connections to it are refused, and nobody else can
  // start listening on it while we hold it.
  const int holder = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t length = sizeof(addr);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::uint16_t port = ntohs(addr.sin_port);

  const auto start = Clock::now();
  const Error e =
      expect_error([&] { StoreClient("127.0.0.1", port, kToken, Deadline::after(400ms)); },
                   HM_ERR_TIMEOUT, "connect to a port without a server");
  const auto elapsed = Clock::now() - start;
  ::close(holder);
  EXPECT_LT(elapsed, 400ms + 200ms);  // within the deadline (plus scheduling slack)
  EXPECT_GE(elapsed, 100ms);          // it did retry for a while instead of failing at once
  EXPECT_TRUE(contains(e.what(), "127.0.0.1:" + std::to_string(port))) << e.what();
}

TEST(StoreServerStart, PortInUseIsATransportError) {
  StoreServer first(options());
  StoreServerOptions o = options();
  o.port = first.port();
  expect_error([&] { StoreServer second(o); }, HM_ERR_TRANSPORT, "second server, same port");
}

TEST(StoreServerStart, HostThatIsNotAnAddressIsInvalid) {
  StoreServerOptions o = options();
  o.host = "not-an-ip";
  expect_error([&] { StoreServer server(o); }, HM_ERR_INVALID_ARGUMENT, "bad host");
}

}  // namespace
}  // namespace holmes
