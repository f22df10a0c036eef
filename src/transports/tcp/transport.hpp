// tcp transport over Boost.Asio: the tier for Ethernet links, and every communicator's control
// plane (router.hpp).
//
// - Each rank listens on one port. A rank opens its own `sockets_per_peer` connections to a
//   peer the first time it sends to it and only ever sends on those; it receives on the
//   connections its peers opened. Every connection proves the job token (bootstrap/auth.hpp),
//   bound to this communicator and to both ranks, before any frame is accepted.
// - A message is cut into fragments of at most 4 MiB spread over the peer's sockets (the least
//   loaded first), so one large message uses every socket, and the layer above cuts
//   collectives into chunks so that receiving, reducing and forwarding overlap.
// - One io thread per transport does the socket work and sleeps in epoll when idle; callers
//   block on their Requests. During a small collective the caller's thread runs the sockets
//   itself between yields while the io thread steps aside (io_lease.hpp): a small message then
//   costs no thread wake-up. Nothing spins: a caller yields between polls and sleeps after 1 ms.
// - A receive whose message has not arrived yet is posted and the payload is read straight into
//   its buffer; a message that arrives first is kept until its receive is posted.
// - Failures name the peer and its link. A link that goes down silently (cable, switch port,
//   host gone) is found by the kernel: keepalive probes on idle connections and TCP_USER_TIMEOUT
//   on all abort a connection that has acknowledged nothing for half the communicator's timeout
//   (at least 1 s), which fails that peer's traffic. A rank whose communicator fails tells its
//   peers why before it closes (a notice frame, frame.hpp), so a rank blocked on it reports the
//   dead link two hops away instead of a bare closed connection.
//
// - With a NIC list (nics.hpp: HOLMES_TCP_NICS, or this host's NICs in the topology file) the
//   endpoint listens on every NIC and opens `sockets_per_peer` connections per lane (lanes.hpp:
//   a pair of NICs, one per side, on one network) to each peer; a large message is cut into
//   one fragment per connection and each fragment goes to the connection that would finish it
//   first: the least backlog (queued here and unsent in the kernel) per unit of its lane's
//   rate. A NIC's backlog drains at the rate the NIC really carries, so the split follows the
//   measured rates even where the declared ones are wrong; two 1 Gbit/s NICs carry a
//   message's halves at once.
//
// Files: connect.cpp (set_peers, connections and their handshakes), send.cpp, receive.cpp
// (frames into the matcher), close.cpp (failures, notices, shutdown), transport.cpp (the io
// thread, caller drive, link descriptions, socket options), config.cpp (TcpConfig), nics.cpp
// (the NIC list), lanes.cpp (the card peers dial and the lanes to a peer).
#pragma once

#include "core/asio.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bootstrap/auth.hpp"
#include "transports/capabilities.hpp"
#include "transports/common/job_token.hpp"
#include "transports/common/listener.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/options.hpp"
#include "transports/tcp/config.hpp"
#include "transports/tcp/congestion.hpp"
#include "transports/tcp/frame.hpp"
#include "transports/tcp/inbox.hpp"
#include "transports/tcp/lanes.hpp"
#include "transports/transport.hpp"

namespace holmes::tcp {

// Listens at once (peers are set later, Transport::set_peers); throws HM_ERR_TRANSPORT when it
// cannot, HM_ERR_INVALID_ARGUMENT for bad options (tcp_config).
std::unique_ptr<Transport> make_tcp_transport(const TcpOptions& options);

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Below this a message is not split across sockets: the per-fragment cost would dominate.
constexpr std::size_t kMinSplitBytes = 64u << 10;
// Identity a connecting rank sends after its proof: u32 rank, u32 link index, u32 link count.
constexpr std::size_t kIdentityBytes = 12;
// Connections one rank opens to one peer: sockets per lane x lanes (one lane per NIC).
constexpr int kMaxLinksPerPeer = kMaxSocketsPerPeer * kMaxNics;
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
  int nic = -1;       // this rank's NIC it leaves through (index into TcpConfig::nics); -1: any
  double weight = 1;  // its lane's rate over the lane's sockets: its share of a message
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
  int nic = -1;              // the NIC whose listener accepted it; -1: not one of the list
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
  std::string address;  // its card (lanes.hpp): "ip:port", then its NICs
  std::vector<std::shared_ptr<OutLink>> out;
  int out_ready = 0;
  bool striped = false;  // several lanes: fragments go by backlog per rate (send.cpp)
  bool connecting = false;
  std::deque<Fragment> backlog;  // sends waiting for the connections
  int in_expected = 0;           // links the peer said it opens to us
  int in_closed = 0;
  bool gone = false;        // all its links to us closed: it will send nothing more
  bool send_reset = false;  // a send to it failed with a reset; its failure waits for a notice
  PeerFailure failure;

  // Every connection it will send on is open and proven.
  bool connected() const { return !out.empty() && out_ready == static_cast<int>(out.size()); }
};

// Bytes one NIC of the list carried: payload of the fragments sent out of it and received on
// its listener.
struct NicTraffic {
  TcpNic nic;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
};

class TcpTransport final : public Transport,
                           public CombiningReceive,
                           public CallerDrive,
                           public PeerRevocation {
 public:
  explicit TcpTransport(const TransportOptions& options);
  ~TcpTransport() override;

  const char* name() const override { return "tcp"; }
  // Its card (lanes.hpp): the listen address, then every NIC's listener.
  std::string listen_address() const override { return card_; }
  void set_peers(int rank, std::vector<std::string> addresses) override;
  CompletionPtr connect_all() override;
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override;
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override;
  // Each fragment is reduced as it lands (Matcher, combining receives), on the thread that read
  // it: the collective's thread neither wakes for a chunk's data nor reads it back from memory.
  // nullptr when config.fused_reduce is off.
  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine) override;
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) override;
  void revoke(const std::string& why) override;
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
  void set_arrival_listener(ArrivalListener listener) override {
    matcher_.set_arrival_listener(std::move(listener));
  }
  // Per NIC of the list (empty without one): what it carried so far. Any thread.
  std::vector<NicTraffic> nic_traffic() const;

 private:
  // Listens on every NIC of the list that is not the listen address, and writes the card.
  void listen_on_nics();
  // The lanes to `peer` (lanes.hpp); throws HM_ERR_INVALID_ARGUMENT for a malformed card.
  std::vector<Lane> lanes_to(int peer) const;
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
  // The connection to `peer` that would finish `bytes` more first.
  const std::shared_ptr<OutLink>& pick_link(PeerState& p, std::size_t bytes) const;
  void write_next(int peer, const std::shared_ptr<OutLink>& link);
  void connect_peer(int peer);
  // Proves the token on connection `index` of the `count` this rank opens to `peer`.
  void client_handshake(int peer, int index, int count, const std::shared_ptr<OutLink>& link);
  void link_ready(int peer, const std::shared_ptr<OutLink>& link);
  // Completes connect_all() waiters once every peer is connected or one has failed.
  void check_connected();
  void accepted(tcp::socket socket, std::string remote, int nic);
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
  // `notify`: send every connected peer a notice of `status` first (failures, revocations).
  void do_shutdown(hm_status_t status, const std::string& why, bool notify);
  std::string context_for(int from, int to, int index, int count) const;
  std::string peer_name(int peer) const;
  void configure(tcp::socket& socket) const;

  TcpConfig config_;
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
  int listener_nic_ = -1;  // the NIC of the list whose address listener_ has; -1: none
  std::vector<std::unique_ptr<Listener>> nic_listeners_;  // the list's other NICs
  std::vector<int> nic_listener_nic_;                     // each one's NIC
  std::string card_;
  // Per NIC of the list: payload bytes sent out of it and received on its listener.
  std::unique_ptr<std::atomic<std::uint64_t>[]> nic_sent_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> nic_received_;

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

}  // namespace holmes::tcp
