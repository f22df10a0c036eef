#include "transports/tcp/tcp_transport.hpp"

#include "core/asio.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bootstrap/auth.hpp"
#include "core/byte_buffer.hpp"
#include "core/bytes.hpp"
#include "core/crc32c.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/common/job_token.hpp"
#include "transports/common/listener.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/tcp/congestion.hpp"
#include "transports/tcp/frame.hpp"
#include "transports/tcp/inbox.hpp"

namespace holmes::tcp {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Below this a message is not split across sockets: the per-fragment cost would dominate.
constexpr std::size_t kMinSplitBytes = 64u << 10;
constexpr int kMaxSocketsPerPeer = 16;
// Identity a connecting rank sends after its proof: u32 rank, u32 link index, u32 link count.
constexpr std::size_t kIdentityBytes = 12;
// A link is declared down once the peer's kernel has acknowledged nothing (data or keepalive
// probes) for half the communicator's timeout, and never sooner than this: well before the
// timeout, so that ranks blocked on a rank that sees the dead link learn the cause from its
// notice before their own waits run out. A healthy link never trips it: a live kernel
// acknowledges at once, also for a frozen process, as long as its receive buffer has room.
constexpr std::chrono::milliseconds kMinLiveness{1000};
// A peer that fails writes a notice of why to every peer and closes its connections; a send to
// it then fails with a reset (its socket had this rank's data unread), usually before the
// notice, which arrives intact on the other connection, has been read. The send's failure waits
// this long for the notice, so that this rank reports the cause and the peer's status (say, a
// disagreement) rather than the reset; a peer that died without a word fails after it.
constexpr std::chrono::milliseconds kNoticeGrace{20};
// Handlers a polling caller runs at most before it yields again.
constexpr int kHandlersPerPoll = 16;

// The completion condition of frame reads and writes: all of it, in as few system calls as the
// kernel takes. asio's transfer_all caps every call at 64 KiB (default_max_transfer_size); on
// loopback, whose MSS is 65483, each such write left two packets, a full one and a 53-byte tail
// that TCP_NODELAY sent at once, doubling the packets (and acknowledgements) of large messages.
struct AllAtOnce {
  std::size_t operator()(const error_code& ec, std::size_t) const {
    return ec ? 0 : std::numeric_limits<std::size_t>::max();
  }
};

const TcpOptions& checked(const TcpOptions& options) {
  require(options.sockets_per_peer >= 1 && options.sockets_per_peer <= kMaxSocketsPerPeer,
          "tcp: sockets per peer must be in [1, {}], got {}", kMaxSocketsPerPeer,
          options.sockets_per_peer);
  return options;
}

// One isend: complete when all its fragments have been written to the kernel.
struct SendOp {
  CompletionPtr request;
  std::size_t fragments_left = 0;
};

struct Fragment {
  std::shared_ptr<SendOp> op;
  std::array<std::uint8_t, kFrameHeaderBytes> header{};
  const std::byte* data = nullptr;
  std::size_t length = 0;
  bool checksum = false;
  std::array<std::uint8_t, kChecksumBytes> trailer{};  // CRC32C of the payload, when checksum
};

// A connection this rank opened to a peer; it only sends on it.
struct OutLink {
  explicit OutLink(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;  // bounds connect + handshake
  bool ready = false;
  bool writing = false;
  std::deque<Fragment> queue;
  std::size_t queued_bytes = 0;
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge{};
  std::vector<std::uint8_t> hello;  // proof + identity
  std::array<std::uint8_t, auth::Verdict::kWireBytes> verdict{};
  TokenAnswer answer;
  std::array<std::uint8_t, 1> probe{};  // the peer never sends here: a read ends only on errors
};

// A connection a peer opened to this rank; it only receives on it.
struct InLink {
  InLink(asio::io_context& io, tcp::socket s) : socket(std::move(s)), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;  // bounds the handshake
  int peer = -1;             // known once the peer has proven the token
  std::string remote;
  TokenChallenge token_challenge;
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge{};
  std::array<std::uint8_t, auth::Proof::kWireBytes + kIdentityBytes> hello{};
  std::array<std::uint8_t, auth::Verdict::kWireBytes> verdict{};
  Inbox inbox;  // read ahead of the frame being handled
  std::array<std::uint8_t, kChecksumBytes> trailer{};
  std::string notice;  // a failed peer's reason (kNoticeTag)
  bool closed = false;
};

struct PeerState {
  std::string address;  // "ip:port" it listens on
  std::vector<std::shared_ptr<OutLink>> out;
  int out_ready = 0;
  bool connecting = false;
  std::deque<Fragment> backlog;  // sends waiting for the connections
  int in_expected = 0;           // links the peer said it opens to us
  int in_closed = 0;
  bool gone = false;        // all its links to us closed: it will send nothing more
  bool send_reset = false;  // a send to it failed with a reset; its failure waits for a notice
  PeerFailure failure;
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpOptions& options);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  std::string listen_address() const override { return listener_.address(); }
  void set_peers(int rank, std::vector<std::string> addresses) override;
  CompletionPtr connect_all() override;
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override;
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override;
  // Each fragment is reduced as it lands (Matcher, combining receives), on the thread that read
  // it: the collective's thread neither wakes for a chunk's data nor reads it back from memory.
  // nullptr when options.tcp_fused_reduce is off.
  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine) override;
  void shutdown(hm_status_t status, const std::string& why, bool wait) override;
  LinkProperties link(int peer) const override;
  // A caller that drives a small collective (begin_caller_drive) polls the sockets itself and
  // yields the core between polls for a while before it sleeps (io_lease.hpp). Other waits sleep
  // at once: a large transfer would only burn the core the io thread needs.
  std::chrono::microseconds yield_before_sleep(int) const override {
    return engine_.yield_before_sleep();
  }
  void begin_caller_drive() override { engine_.begin_drive(); }
  void end_caller_drive() override { engine_.end_drive(); }
  Progress* caller_progress() override { return engine_.caller_progress(); }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;
  void set_peer_failure_listener(PeerFailureListener listener) override {
    failure_listener_.set(std::move(listener));
  }

 private:
  // A driving caller's share of the io_context while it waits for `awaited`.
  void driven_poll(const Completion* awaited);
  // Posts `work` to the io_context; from a thread that does not drive, also wakes a parked io
  // thread.
  template <typename Work>
  void hand_to_io(Work&& work);
  // irecv and irecv_reduce (with `combine`).
  CompletionPtr post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data,
                             const std::optional<ReceiveCombine>& combine);
  // Runs `work` here when this thread drives and may run handlers now (the io thread is parked
  // and no other caller runs them); else hand_to_io. Sends and receives are independent
  // messages (matched by tag), so running one before work posted earlier reorders nothing that
  // matters.
  template <typename Work>
  void run_or_hand(Work&& work);
  void io_loop();
  // Whether this thread is running the io_context's handlers now.
  bool running_handlers() const { return engine_.turns().running(); }

  // Everything below runs in handlers only: on one thread at a time (the engine's turns), the io
  // thread or a caller that drives.
  void start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                  std::span<const std::byte> data, const CompletionPtr& request);
  void start_recv(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> data,
                  const CompletionPtr& request,
                  const std::optional<ReceiveCombine>& combine = std::nullopt);
  void enqueue(int peer, Fragment fragment);
  void write_next(int peer, const std::shared_ptr<OutLink>& link);
  void connect_peer(int peer);
  void client_handshake(int peer, int index, const std::shared_ptr<OutLink>& link);
  void link_ready(int peer, const std::shared_ptr<OutLink>& link);
  // Completes connect_all() waiters once every peer is connected or one has failed.
  void check_connected();
  void accepted(tcp::socket socket, std::string remote);
  void server_handshake(const std::shared_ptr<InLink>& link);
  void check_hello(const std::shared_ptr<InLink>& link);
  // Reads into the link's inbox until it holds a frame header, then parses.
  void read_frames(const std::shared_ptr<InLink>& link);
  // Handles the frames the inbox holds; reads on when it runs dry or a payload goes beyond it.
  void parse_frames(const std::shared_ptr<InLink>& link);
  // Fills `rest` from the inbox; true when it held all of it. Else reads the rest from the
  // socket and calls `then` once it is in (unless the link closed), and returns false.
  bool read_rest(const std::shared_ptr<InLink>& link, std::array<asio::mutable_buffer, 2> rest,
                 std::function<void()> then);
  // True when the fragment was handled from the inbox and parsing may go on; false when a read
  // of its payload is under way (it resumes reading) or the peer failed.
  bool on_fragment(const std::shared_ptr<InLink>& link, const FrameHeader& header);
  // Skips `length` payload bytes; true when the inbox held them all.
  bool discard_payload(const std::shared_ptr<InLink>& link, std::size_t length);
  void in_link_closed(const std::shared_ptr<InLink>& link, const error_code& ec);
  void refuse(const std::shared_ptr<InLink>& link, const std::string& why);
  void read_notice(const std::shared_ptr<InLink>& link, const FrameHeader& header);
  void watch_out_link(int peer, const std::shared_ptr<OutLink>& link);
  void send_notices(hm_status_t status, const std::string& why);
  // The message for an error that means the path to `peer` is dead (the kernel gave up on the
  // connection, or has no route); nullopt for other errors.
  std::optional<std::string> link_down(int peer, const error_code& ec) const;
  void fail_peer_now(int peer, hm_status_t status, const std::string& message);
  // fail_peer_now after kNoticeGrace, unless the peer has failed by then (its notice came).
  void fail_peer_after_notice_grace(int peer, const std::string& message);
  void do_shutdown(hm_status_t status, const std::string& why);
  std::string context_for(int from, int to, int index, int count) const;
  std::string peer_name(int peer) const;
  void configure(tcp::socket& socket) const;

  TcpOptions options_;
  JobToken token_;
  CongestionPolicy congestion_;
  std::chrono::milliseconds liveness_;  // a link silent this long is down (kMinLiveness)
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  // Who runs the io_context (the io thread, or a polling caller that drives): one thread at a
  // time, in the engine's turns, so that handlers never run concurrently and need no locks.
  // A turn lock rather than an asio strand: a strand costs every completion a second trip
  // through the io_context's queue (8-byte allreduce on 4 ranks: 81 us with a strand, 68 with
  // the mutex; BENCHMARKS.md).
  ProgressEngine engine_{{[this](const Completion* awaited) { driven_poll(awaited); },
                          // Out of epoll: the io thread parks at its next handler.
                          [this] { asio::post(io_, [] {}); }}};
  Listener listener_;

  PeerDirectory directory_{"tcp"};  // also read by link() and requests on other threads
  std::vector<PeerState> peers_;
  std::unordered_set<std::shared_ptr<InLink>> in_links_;
  std::vector<std::shared_ptr<InLink>> early_hellos_;  // proven later, once peers are known
  ConnectWaiters connect_waiters_;
  FailureListener failure_listener_;
  Matcher matcher_{[this](int peer) { return peer_name(peer); }};
  ClosedState closed_;
  std::atomic<bool> shutdown_requested_{false};
  ProgressThread thread_;
};

TcpTransport::TcpTransport(const TcpOptions& options)
    : options_(checked(options)),
      token_(options.token, options.context),
      congestion_(CongestionPolicy::resolve(options.tcp_congestion)),
      liveness_(std::max(kMinLiveness, options.connect_timeout / 2)),
      work_(asio::make_work_guard(io_)),
      listener_(io_, options.listen_host, "tcp") {
  listener_.start([this](tcp::socket socket,
                         std::string remote) { accepted(std::move(socket), std::move(remote)); },
                  [this] { return directory_.rank(); });
  thread_.start([this] { io_loop(); });
}

TcpTransport::~TcpTransport() {
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", true);
  engine_.detach_callers();
  work_.reset();
  io_.stop();
  thread_.join();
}

void TcpTransport::io_loop() {
  // One handler at a time, so that the thread parks promptly once a caller drives.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (!io_.stopped()) engine_.turns().own_turn([this, kSlice] { io_.run_one_for(kSlice); });
}

template <typename Work>
void TcpTransport::hand_to_io(Work&& work) {
  asio::post(io_, std::forward<Work>(work));
  engine_.turns().handed_over();
}

template <typename Work>
void TcpTransport::run_or_hand(Work&& work) {
  // What the caller's next poll would run, run now: the frame leaves at once, and a receive
  // whose message came early completes before the caller waits. A driving caller keeps the io
  // thread parked (or has it park after its next handler) and runs handlers only once it is.
  if (!engine_.turns().run_as_driver(work)) hand_to_io(std::forward<Work>(work));
}

void TcpTransport::driven_poll(const Completion* awaited) {
  // A message takes three handlers here (epoll, the read, its completion); once the awaited
  // request is done, the caller moves on at once rather than after one more epoll_wait.
  for (int i = 0;
       i < kHandlersPerPoll && (awaited == nullptr || !awaited->done()) && io_.poll_one() > 0;
       ++i) {
  }
}

void TcpTransport::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.set(rank, addresses);
  hand_to_io([this, addresses = std::move(addresses)] {
    peers_.resize(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = addresses[i];
    // Connections that arrived before we knew our peers can be checked now.
    auto waiting = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& link : waiting) {
      if (!link->closed) check_hello(link);
    }
  });
}

CompletionPtr TcpTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  hand_to_io([this, done] {
    if (closed_.fail(done)) return;
    connect_waiters_.add(done);
    for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
      if (static_cast<int>(peer) != directory_.rank() && !peers_[peer].address.empty() &&
          !peers_[peer].connecting) {
        connect_peer(static_cast<int>(peer));
      }
    }
    check_connected();
  });
  return done;
}

void TcpTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (peer == directory_.rank() || p.address.empty()) {
          return ConnectWaiters::Peer::kNotServed;
        }
        return p.out_ready < options_.sockets_per_peer ? ConnectWaiters::Peer::kConnecting
                                                       : ConnectWaiters::Peer::kConnected;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

CompletionPtr TcpTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  require(tag != kNoticeTag, "tcp: tag {:#x} is reserved for the transport", tag);
  auto request = std::make_shared<Completion>();
  request->set_progress(engine_.request_progress());
  run_or_hand([this, peer, tag, signature, data, request] {
    start_send(peer, tag, signature, data, request);
  });
  return request;
}

CompletionPtr TcpTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<std::byte> data) {
  return post_receive(peer, tag, signature, data, std::nullopt);
}

CompletionPtr TcpTransport::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data, const ReceiveCombine& combine) {
  if (!options_.tcp_fused_reduce) return nullptr;
  return post_receive(peer, tag, signature, data, combine);
}

CompletionPtr TcpTransport::post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data,
                                         const std::optional<ReceiveCombine>& combine) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  request->set_progress(engine_.request_progress());
  run_or_hand([this, peer, tag, signature, data, request, combine] {
    start_recv(peer, tag, signature, data, request, combine);
  });
  return request;
}

void TcpTransport::shutdown(hm_status_t status, const std::string& why, bool wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  shutdown_requested_.store(true);
  // The io thread runs from now on: this thread may be a caller that drives and is about to
  // block below.
  engine_.turns().close();
  asio::post(io_, [this, status, why, done] {
    do_shutdown(status, why);
    done->set_value();
  });
  if (wait && !running_handlers()) {
    // Handlers never block, so this is quick; the bound only guards against a stopped
    // io_context.
    finished.wait_for(std::chrono::seconds(30));
  }
}

LinkProperties TcpTransport::link(int peer) const {
  const std::string where = directory_.address(peer);
  return {"tcp", fmt::format("tcp {} x{} sockets", where, options_.sockets_per_peer), 0, 0};
}

std::string TcpTransport::peer_name(int peer) const {
  const std::string where = directory_.address(peer);
  return fmt::format("rank {} (tcp {})", peer, where);
}

std::string TcpTransport::context_for(int from, int to, int index, int count) const {
  return fmt::format("data|{}|{}->{}|{}/{}", options_.context, from, to, index, count);
}

std::optional<std::string> TcpTransport::link_down(int peer, const error_code& ec) const {
  if (ec == asio::error::timed_out) {
    return fmt::format(
        "the link to {} is down: the kernel gave up waiting for acknowledgements (limit {} ms; "
        "{})",
        peer_name(peer), liveness_.count(), ec.message());
  }
  if (ec == asio::error::host_unreachable || ec == asio::error::network_unreachable ||
      ec == asio::error::network_down) {
    return fmt::format("the link to {} is down: {}", peer_name(peer), ec.message());
  }
  return std::nullopt;
}

void TcpTransport::configure(tcp::socket& socket) const {
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  // Dead links: the kernel aborts a connection (ETIMEDOUT) when sent data stays unacknowledged
  // for liveness_ (TCP_USER_TIMEOUT), and probes idle ones often enough to find out as quickly
  // (keepalive; the user timeout then decides, the probe count never does). A link that goes
  // down without a word is otherwise silent for the kernel's 15 minutes of retries.
  const int fd = socket.native_handle();
  const int on = 1;
  const auto user_timeout = static_cast<unsigned>(liveness_.count());
  const int probe_s = std::max<int>(1, static_cast<int>(liveness_.count() / 3000));
  const int probes = 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe_s, sizeof probe_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe_s, sizeof probe_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
  if (options_.socket_buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(options_.socket_buffer_bytes), ignored);
    socket.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes),
                      ignored);
  }
  error_code local_ec;
  error_code remote_ec;
  const auto local = socket.local_endpoint(local_ec);
  const auto remote = socket.remote_endpoint(remote_ec);
  if (!local_ec && !remote_ec) congestion_.apply(fd, local.address(), remote.address());
}

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

void TcpTransport::start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<const std::byte> data, const CompletionPtr& request) {
  if (closed_.fail(request)) return;
  auto& p = peers_[peer];
  if (p.failure.failed()) {
    request->complete(p.failure.status, p.failure.message);
    return;
  }
  const std::size_t total = data.size();
  const auto sockets = static_cast<std::size_t>(options_.sockets_per_peer);
  std::size_t piece = total;
  if (total > kMinSplitBytes) {
    piece = std::max(kMinSplitBytes, (total + sockets - 1) / sockets);
  }
  piece = std::min(piece, kMaxFragmentBytes);
  const std::size_t count = total == 0 ? 1 : (total + piece - 1) / piece;
  auto op = std::make_shared<SendOp>();
  op->request = request;
  op->fragments_left = count;
  for (std::size_t i = 0; i < count; ++i) {
    Fragment f;
    f.op = op;
    f.data = data.data() + i * piece;
    f.length = std::min(piece, total - i * piece);
    FrameHeader h;
    h.signature = signature;
    h.tag = tag;
    h.total = total;
    h.offset = i * piece;
    h.length = static_cast<std::uint32_t>(f.length);
    if (options_.checksum && f.length > 0) {
      h.flags = kFlagChecksum;
      f.checksum = true;
      store_le<std::uint32_t>(f.trailer.data(), crc32c({f.data, f.length}));
    }
    f.header = h.encode();
    if (p.out_ready == options_.sockets_per_peer) {
      enqueue(peer, std::move(f));
    } else {
      p.backlog.push_back(std::move(f));
    }
  }
  if (p.out_ready < options_.sockets_per_peer && !p.connecting) connect_peer(peer);
}

void TcpTransport::enqueue(int peer, Fragment fragment) {
  auto& p = peers_[peer];
  auto best = std::min_element(p.out.begin(), p.out.end(), [](const auto& a, const auto& b) {
    return a->queued_bytes < b->queued_bytes;
  });
  auto& link = *best;
  link->queued_bytes += fragment.length;
  link->queue.push_back(std::move(fragment));
  if (!link->writing) write_next(peer, link);
}

void TcpTransport::write_next(int peer, const std::shared_ptr<OutLink>& link) {
  if (link->queue.empty()) {
    link->writing = false;
    return;
  }
  link->writing = true;
  const Fragment& f = link->queue.front();  // deque references survive push_back
  const std::array<asio::const_buffer, 3> buffers{
      asio::buffer(f.header), asio::buffer(f.data, f.length),
      asio::buffer(f.trailer, f.checksum ? kChecksumBytes : 0)};
  asio::async_write(
      link->socket, buffers, AllAtOnce(), [this, peer, link](const error_code& ec, std::size_t) {
        if (closed_.closed() || link->queue.empty())
          return;  // shut down: the op was already failed
        if (ec) {
          const auto message = link_down(peer, ec).value_or(
              fmt::format("sending to {} failed: {}", peer_name(peer), ec.message()));
          const bool closed_by_peer =
              ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
          if (closed_by_peer && !peers_[peer].gone) {  // gone: its notice, if any, was read
            peers_[peer].send_reset = true;
            fail_peer_after_notice_grace(peer, message);
          } else {
            fail_peer_now(peer, HM_ERR_PEER_FAILED, message);
          }
          return;
        }
        Fragment done = std::move(link->queue.front());
        link->queue.pop_front();
        link->queued_bytes -= done.length;
        if (--done.op->fragments_left == 0) done.op->request->complete();
        write_next(peer, link);
      });
}

void TcpTransport::connect_peer(int peer) {
  auto& p = peers_[peer];
  p.connecting = true;
  std::string host;
  std::uint16_t port = 0;
  try {
    const auto hp = parse_host_port(p.address, fmt::format("address of rank {}", peer));
    host = hp.host;
    port = hp.port;
  } catch (const Error& e) {
    fail_peer_now(peer, HM_ERR_INVALID_ARGUMENT, e.what());
    return;
  }
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) {
    fail_peer_now(
        peer, HM_ERR_INVALID_ARGUMENT,
        fmt::format("rank {} published '{}', which is not an IP address", peer, p.address));
    return;
  }
  const tcp::endpoint endpoint(address, port);
  for (int i = 0; i < options_.sockets_per_peer; ++i) {
    auto link = std::make_shared<OutLink>(io_);
    p.out.push_back(link);
    link->timer.expires_after(options_.connect_timeout);
    link->timer.async_wait([this, peer, link](const error_code& ec) {
      if (ec || closed_.closed() || link->ready) return;
      fail_peer_now(peer, HM_ERR_TIMEOUT,
                    fmt::format("could not connect to {} within {} ms", peer_name(peer),
                                options_.connect_timeout.count()));
    });
    link->socket.async_connect(endpoint, [this, peer, i, link](const error_code& ec) {
      if (closed_.closed() || peers_[peer].failure.failed()) return;
      if (ec) {
        fail_peer_now(peer, HM_ERR_PEER_FAILED,
                      fmt::format("cannot connect to {}: {}", peer_name(peer), ec.message()));
        return;
      }
      configure(link->socket);
      client_handshake(peer, i, link);
    });
  }
}

void TcpTransport::client_handshake(int peer, int index, const std::shared_ptr<OutLink>& link) {
  asio::async_read(
      link->socket, asio::buffer(link->challenge),
      [this, peer, index, link](const error_code& ec, std::size_t) {
        if (closed_.closed() || peers_[peer].failure.failed()) return;
        auth::Proof proof;
        if (ec ||
            !link->answer.answer(
                link->challenge, token_,
                context_for(directory_.rank(), peer, index, options_.sockets_per_peer), proof)) {
          fail_peer_now(peer, ec ? HM_ERR_PEER_FAILED : HM_ERR_AUTH,
                        fmt::format("{} did not answer as a Holmes endpoint{}", peer_name(peer),
                                    ec ? ": " + ec.message() : std::string()));
          return;
        }
        ByteWriter hello;
        hello.put_bytes(proof.encode());
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(directory_.rank()));
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(index));
        hello.put<std::uint32_t>(static_cast<std::uint32_t>(options_.sockets_per_peer));
        link->hello = std::move(hello.bytes());
        asio::async_write(
            link->socket, asio::buffer(link->hello),
            [this, peer, index, link](const error_code& ec, std::size_t) {
              if (closed_.closed() || peers_[peer].failure.failed()) return;
              if (ec) {
                fail_peer_now(
                    peer, HM_ERR_PEER_FAILED,
                    fmt::format("handshake with {} failed: {}", peer_name(peer), ec.message()));
                return;
              }
              asio::async_read(
                  link->socket, asio::buffer(link->verdict),
                  [this, peer, index, link](const error_code& ec, std::size_t) {
                    if (closed_.closed() || peers_[peer].failure.failed()) return;
                    const auto verdict = auth::Verdict::decode(link->verdict);
                    if (ec || !verdict.accepted) {
                      fail_peer_now(
                          peer, HM_ERR_AUTH,
                          fmt::format("{} refused this rank's job token (HOLMES_TOKEN differs, "
                                      "or another communicator listens there)",
                                      peer_name(peer)));
                      return;
                    }
                    if (!link->answer.trusts(verdict, token_,
                                             context_for(directory_.rank(), peer, index,
                                                         options_.sockets_per_peer))) {
                      fail_peer_now(
                          peer, HM_ERR_AUTH,
                          fmt::format("{} could not prove the job token", peer_name(peer)));
                      return;
                    }
                    link_ready(peer, link);
                  });
            });
      });
}

void TcpTransport::link_ready(int peer, const std::shared_ptr<OutLink>& link) {
  link->ready = true;
  link->timer.cancel();
  watch_out_link(peer, link);
  auto& p = peers_[peer];
  if (++p.out_ready < options_.sockets_per_peer) return;
  auto backlog = std::move(p.backlog);
  p.backlog.clear();
  for (auto& f : backlog) enqueue(peer, std::move(f));
  check_connected();
}

// A send-only link whose writes are all done has no operation that could see it break: this
// read (the peer never sends on it) is that operation. A dead path ends it with ETIMEDOUT or
// unreachable; the peer closing ends it with EOF or a reset, which its links to this rank
// report already (as a process that exited).
void TcpTransport::watch_out_link(int peer, const std::shared_ptr<OutLink>& link) {
  link->socket.async_read_some(
      asio::buffer(link->probe), [this, peer, link](const error_code& ec, std::size_t bytes) {
        if (closed_.closed() || peers_[peer].failure.failed()) return;
        if (!ec && bytes > 0) {
          fail_peer_now(peer, HM_ERR_TRANSPORT,
                        fmt::format("{} sent bytes on a link that only carries this rank's "
                                    "messages; connection dropped",
                                    peer_name(peer)));
          return;
        }
        if (!ec || ec == asio::error::operation_aborted || ec == asio::error::eof ||
            ec == asio::error::connection_reset || ec == asio::error::broken_pipe) {
          return;
        }
        fail_peer_now(peer, HM_ERR_PEER_FAILED,
                      link_down(peer, ec).value_or(fmt::format("the connection to {} broke: {}",
                                                               peer_name(peer), ec.message())));
      });
}

// The last words of a failed communicator: one notice to every peer it is still connected to,
// on a send link that is idle (a link in the middle of a fragment cannot take it, and waiting
// would block the shutdown). Written without blocking; a link whose kernel buffer is full gets
// none. The peers then report this rank's reason instead of a bare closed connection.
void TcpTransport::send_notices(hm_status_t status, const std::string& why) {
  std::string text = fmt::format("{}: {}", status_name(status), why);
  if (text.size() > kMaxNoticeBytes) text.resize(kMaxNoticeBytes);
  FrameHeader h;
  h.signature = static_cast<std::uint32_t>(status);
  h.tag = kNoticeTag;
  h.total = text.size();
  h.length = static_cast<std::uint32_t>(text.size());
  const auto header = h.encode();
  const std::array<asio::const_buffer, 2> frame{asio::buffer(header), asio::buffer(text)};
  const std::size_t frame_bytes = header.size() + text.size();
  for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
    auto& p = peers_[peer];
    if (p.failure.failed() || p.out_ready < options_.sockets_per_peer) continue;
    for (auto& link : p.out) {
      if (!link->ready || link->writing || !link->queue.empty()) continue;
      error_code ec;
      link->socket.non_blocking(true, ec);
      const std::size_t sent = ec ? 0 : link->socket.send(frame, 0, ec);
      if (sent != frame_bytes) {
        HM_LOG_DEBUG("tcp rank {}: no notice to rank {}: {}", directory_.rank(), peer,
                     ec ? ec.message() : "kernel buffer full");
      }
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Receiving
// ---------------------------------------------------------------------------------------------

void TcpTransport::accepted(tcp::socket socket, std::string remote) {
  configure(socket);
  auto link = std::make_shared<InLink>(io_, std::move(socket));
  link->remote = std::move(remote);
  in_links_.insert(link);
  server_handshake(link);
}

void TcpTransport::server_handshake(const std::shared_ptr<InLink>& link) {
  link->timer.expires_after(options_.connect_timeout);
  link->timer.async_wait([this, link](const error_code& ec) {
    if (!ec && !closed_.closed() && link->peer < 0)
      refuse(link, "no proof of the job token in time");
  });
  link->challenge = link->token_challenge.encode();
  asio::async_write(link->socket, asio::buffer(link->challenge),
                    [this, link](const error_code& ec, std::size_t) {
                      if (closed_.closed() || link->closed) return;
                      if (ec) return refuse(link, "closed during the handshake");
                      asio::async_read(link->socket, asio::buffer(link->hello),
                                       [this, link](const error_code& ec, std::size_t) {
                                         if (closed_.closed() || link->closed) return;
                                         if (ec) return refuse(link, "closed before its proof");
                                         if (peers_.empty()) {
                                           early_hellos_.push_back(link);
                                         } else {
                                           check_hello(link);
                                         }
                                       });
                    });
}

void TcpTransport::check_hello(const std::shared_ptr<InLink>& link) {
  const auto proof = auth::Proof::decode(std::span<const std::uint8_t, auth::Proof::kWireBytes>(
      link->hello.data(), auth::Proof::kWireBytes));
  const std::uint8_t* identity = link->hello.data() + auth::Proof::kWireBytes;
  const auto rank = load_le<std::uint32_t>(identity);
  const auto index = load_le<std::uint32_t>(identity + 4);
  const auto count = load_le<std::uint32_t>(identity + 8);
  auth::Verdict verdict;
  std::string why;
  if (rank >= peers_.size() || rank == static_cast<std::uint32_t>(directory_.rank())) {
    why = fmt::format("claims to be rank {}, not a peer of rank {} of {}", rank, directory_.rank(),
                      peers_.size());
  } else if (count == 0 || count > kMaxSocketsPerPeer || index >= count) {
    why = fmt::format("claims link {} of {}", index, count);
  } else {
    const auto context = context_for(static_cast<int>(rank), directory_.rank(),
                                     static_cast<int>(index), static_cast<int>(count));
    verdict = link->token_challenge.judge(token_, proof, context);
    if (!verdict.accepted) why = "wrong job token (or another communicator)";
  }
  link->verdict = verdict.encode();
  asio::async_write(link->socket, asio::buffer(link->verdict),
                    [this, link, accepted = verdict.accepted, why, rank, count](
                        const error_code& ec, std::size_t) {
                      if (closed_.closed() || link->closed) return;
                      if (!accepted) return refuse(link, why);
                      if (ec) return refuse(link, "closed during the handshake");
                      link->timer.cancel();
                      link->peer = static_cast<int>(rank);
                      auto& p = peers_[link->peer];
                      p.in_expected = static_cast<int>(count);
                      read_frames(link);
                    });
}

void TcpTransport::refuse(const std::shared_ptr<InLink>& link, const std::string& why) {
  if (link->closed) return;
  HM_LOG_WARN("tcp rank {}: refused connection from {}: {}", directory_.rank(), link->remote, why);
  link->closed = true;
  error_code ignored;
  link->timer.cancel();
  link->socket.close(ignored);
  in_links_.erase(link);
}

void TcpTransport::read_frames(const std::shared_ptr<InLink>& link) {
  auto& box = link->inbox;
  if (box.size() >= kFrameHeaderBytes) return parse_frames(link);
  box.compact();
  const auto space = box.free_space();
  link->socket.async_read_some(asio::buffer(space.data(), space.size()),
                               [this, link](const error_code& ec, std::size_t got) {
                                 if (closed_.closed() || link->closed) return;
                                 if (ec) return in_link_closed(link, ec);
                                 link->inbox.filled(got);
                                 parse_frames(link);
                               });
}

void TcpTransport::parse_frames(const std::shared_ptr<InLink>& link) {
  // Every frame the inbox holds whole is handled here, in this handler; a frame whose payload
  // goes on past the inbox reads the rest straight into its destination, and reading resumes
  // from its completion.
  while (!closed_.closed() && !link->closed) {
    auto& box = link->inbox;
    if (box.size() < kFrameHeaderBytes) return read_frames(link);
    const auto header = FrameHeader::decode(box.take_header());
    if (!header) {
      fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                    fmt::format("{} sent a malformed frame header; connection dropped",
                                peer_name(link->peer)));
      return;
    }
    if (header->tag == kNoticeTag) return read_notice(link, *header);
    if (!on_fragment(link, *header)) return;
  }
}

bool TcpTransport::read_rest(const std::shared_ptr<InLink>& link,
                             std::array<asio::mutable_buffer, 2> rest, std::function<void()> then) {
  // The inbox's bytes go first; what it lacks comes straight from the socket.
  for (auto& part : rest) {
    const std::size_t n = link->inbox.take({static_cast<std::byte*>(part.data()), part.size()});
    part += n;
  }
  if (rest[0].size() + rest[1].size() == 0) return true;
  asio::async_read(link->socket, rest, AllAtOnce(),
                   [this, link, then = std::move(then)](const error_code& ec, std::size_t) {
                     if (closed_.closed() || link->closed) return;
                     if (ec) return in_link_closed(link, ec);
                     then();
                   });
  return false;
}

void TcpTransport::read_notice(const std::shared_ptr<InLink>& link, const FrameHeader& h) {
  if (h.length > kMaxNoticeBytes || h.offset != 0 || h.total != h.length || h.flags != 0) {
    fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                  fmt::format("{} sent a malformed failure notice ({} bytes); connection dropped",
                              peer_name(link->peer), h.length));
    return;
  }
  // Ranks that disagree about a call disagree for everyone in it: a mismatch stays a mismatch
  // (a bug to fix, not a failure to restart from). Any other failure of the peer is one here.
  const hm_status_t status = h.signature == HM_ERR_MISMATCH ? HM_ERR_MISMATCH : HM_ERR_PEER_FAILED;
  link->notice.assign(h.length, '\0');
  auto report = [this, link, status] {
    // Text from the network: printable ASCII only in our messages and logs.
    for (char& c : link->notice) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    fail_peer_now(link->peer, status,
                  fmt::format("{} failed and closed its connections: {}", peer_name(link->peer),
                              link->notice));
  };
  if (read_rest(link, {asio::buffer(link->notice), asio::mutable_buffer()}, report)) report();
}

bool TcpTransport::on_fragment(const std::shared_ptr<InLink>& link, const FrameHeader& h) {
  const int peer = link->peer;
  const FragmentHeader header{h.tag, h.signature, h.total, h.offset, h.length};
  const auto landing = matcher_.land(peer, header);
  if (!landing) {
    fail_peer_now(peer, HM_ERR_TRANSPORT,
                  fmt::format("{} sent fragments of one message with different sizes; connection "
                              "dropped",
                              peer_name(peer)));
    return false;
  }
  if (h.length == 0) {
    matcher_.landed(peer, header, *landing);
    return true;
  }
  const bool checksum = (h.flags & kFlagChecksum) != 0;
  const std::size_t trailer = checksum ? kChecksumBytes : 0;
  if (landing->target == nullptr) {  // a mismatch: the receive has failed, skip the payload
    return discard_payload(link, h.length + trailer);
  }
  // Lands the fragment once its payload (and checksum) are in; false when it failed the peer.
  auto verify_and_land = [this, link, header, landing = *landing, checksum] {
    if (checksum) {
      const std::uint32_t sent = load_le<std::uint32_t>(link->trailer.data());
      const std::uint32_t got = crc32c({landing.target, header.length});
      if (sent != got) {
        // Reported, never reduced: the receive fails with the peer, whatever the buffer holds.
        fail_peer_now(link->peer, HM_ERR_TRANSPORT,
                      fmt::format("{} sent a corrupted chunk (tag {:#x}, bytes {}..{} of {}): "
                                  "CRC32C {:#010x} on the wire, {:#010x} computed "
                                  "(HOLMES_CHECKSUM); connection dropped",
                                  peer_name(link->peer), header.tag, header.offset,
                                  header.offset + header.length, header.total, sent, got));
        return false;
      }
    }
    matcher_.landed(link->peer, header, landing);
    return true;
  };
  // All in the inbox (small messages): land it and go on parsing.
  if (read_rest(link,
                {asio::buffer(landing->target, h.length), asio::buffer(link->trailer, trailer)},
                [this, link, verify_and_land] {
                  if (verify_and_land()) read_frames(link);
                })) {
    return verify_and_land();
  }
  return false;
}

bool TcpTransport::discard_payload(const std::shared_ptr<InLink>& link, std::size_t length) {
  // Read like any payload (the inbox's share first), into a sink that lives until the read ends
  // (at most a fragment: FrameHeader::decode bounds it).
  auto sink = std::make_shared<ByteBuffer>(length);
  return read_rest(link, {asio::buffer(sink->data(), length), asio::mutable_buffer()},
                   [this, link, sink] { read_frames(link); });
}

void TcpTransport::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                              std::span<std::byte> data, const CompletionPtr& request,
                              const std::optional<ReceiveCombine>& combine) {
  if (closed_.fail(request)) return;
  if (matcher_.post(peer, tag, signature, data, request, combine)) return;  // it was already here
  const auto& p = peers_[peer];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.gone) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its connections before sending this message", peer_name(peer)));
  }
}

void TcpTransport::in_link_closed(const std::shared_ptr<InLink>& link, const error_code& ec) {
  if (link->closed) return;
  link->closed = true;
  error_code ignored;
  link->socket.close(ignored);
  in_links_.erase(link);
  if (link->peer < 0) return;
  auto& p = peers_[link->peer];
  if (ec != asio::error::eof) {
    fail_peer_now(link->peer, HM_ERR_PEER_FAILED,
                  link_down(link->peer, ec)
                      .value_or(fmt::format("connection from {} broke: {}", peer_name(link->peer),
                                            ec.message())));
    return;
  }
  // A clean close: the peer finished (or died and the kernel closed its sockets). Once all its
  // links are closed nothing more can arrive from it.
  if (++p.in_closed >= p.in_expected && !p.gone) {
    p.gone = true;
    const auto message = fmt::format(
        "{} closed its connections (process exited or communicator destroyed) while this rank "
        "waits for data from it",
        peer_name(link->peer));
    // The listener first: whoever wakes from a failed receive finds the failure known.
    failure_listener_(link->peer, HM_ERR_PEER_FAILED, message);
    matcher_.fail_peer(link->peer, HM_ERR_PEER_FAILED, message);
    // A notice would have come before the close: a send that failed need not wait for one.
    if (p.send_reset) fail_peer_now(link->peer, HM_ERR_PEER_FAILED, message);
  }
}

void TcpTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  hand_to_io([this, peer, status, message] {
    if (!closed_.closed() && peer >= 0 && static_cast<std::size_t>(peer) < peers_.size()) {
      fail_peer_now(peer, status, message);
    }
  });
}

void TcpTransport::fail_peer_after_notice_grace(int peer, const std::string& message) {
  auto timer = std::make_shared<asio::steady_timer>(io_, kNoticeGrace);
  timer->async_wait([this, timer, peer, message](const error_code&) {
    if (!closed_.closed()) fail_peer_now(peer, HM_ERR_PEER_FAILED, message);
  });
}

void TcpTransport::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  if (peer < 0) return;
  auto& p = peers_[peer];
  if (p.failure.failed()) return;
  HM_LOG_WARN("tcp rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  // The listener first: whoever wakes from a failed request finds the failure known.
  failure_listener_(peer, status, message);
  error_code ignored;
  for (auto& link : p.out) {
    link->timer.cancel();
    link->socket.close(ignored);
    for (auto& f : link->queue) f.op->request->complete(status, message);
    link->queue.clear();
    link->queued_bytes = 0;
  }
  for (auto& f : p.backlog) f.op->request->complete(status, message);
  p.backlog.clear();
  for (auto it = in_links_.begin(); it != in_links_.end();) {
    if ((*it)->peer == peer) {
      (*it)->closed = true;
      (*it)->timer.cancel();
      (*it)->socket.close(ignored);
      it = in_links_.erase(it);
    } else {
      ++it;
    }
  }
  matcher_.fail_peer(peer, status, message);
  check_connected();
}

void TcpTransport::do_shutdown(hm_status_t status, const std::string& why) {
  if (!closed_.close(status, why)) return;
  error_code ignored;
  listener_.close();
  // A failure (not a destroy or an abort) is worth telling the peers about.
  if (status != HM_SUCCESS && status != HM_ERR_ABORTED) send_notices(status, why);
  // Close every socket first: from here on no read can land in a caller's buffer.
  for (auto& p : peers_) {
    for (auto& link : p.out) {
      link->timer.cancel();
      link->socket.close(ignored);
    }
  }
  for (const auto& link : in_links_) {
    link->closed = true;
    link->timer.cancel();
    link->socket.close(ignored);
  }
  in_links_.clear();
  for (auto& p : peers_) {
    for (auto& link : p.out) {
      for (auto& f : link->queue) f.op->request->complete(status, why);
      link->queue.clear();
    }
    for (auto& f : p.backlog) f.op->request->complete(status, why);
    p.backlog.clear();
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
}

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options) {
  return std::make_unique<TcpTransport>(options);
}

}  // namespace holmes::tcp
