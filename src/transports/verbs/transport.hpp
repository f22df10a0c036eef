// verbs transport: RC queue pairs over libibverbs (rdma-core), for InfiniBand and RoCE fabrics
// inside an island. Data moves through registered slots with send/receive and credit-based flow
// control; queue pairs are set up by an authenticated TCP handshake on listen_address().
// config.hpp holds the HOLMES_IB_* settings. VerbsTransport runs over any Nic (nic.hpp):
// ibv_nic.hpp on hardware, an in-memory fabric in the tests.
//
// On a host without an RDMA device (or without kernel support or userspace providers)
// verbs_available() is false and says why, and make_verbs_transport() throws
// HM_ERR_UNSUPPORTED with that reason; nothing crashes.
//
// - Per served peer up to two RC queue pairs: the one this rank dials carries its data to the
//   peer (and credits back), the one the peer dials carries the peer's data to this rank. So
//   no two ranks race to set up the same queue pair, and a rank connects only where it sends.
//   Each is set up by an authenticated TCP handshake (handshake.hpp) on the transport's
//   listen_address, then INIT -> RTR -> RTS.
// - Data moves through registered slots: a message is cut into slot-sized pieces, each copied
//   into a send slot behind a header (wire.hpp) and sent into one of the receive slots the peer
//   pre-posted; the receiver hands each piece to the shared Matcher, which copies it into the
//   posted receive buffer or keeps it until the receive is posted, then reposts the slot. A
//   send completes once its last piece is copied, so its buffer is free at once.
// - Credits (credit_window.hpp) keep every sender within the receive slots the peer has posted.
// - One progress thread (Boost.Asio) sleeps in epoll on the completion channel, the device's
//   event fd and the handshake sockets: completions are event driven, never busy polled.
// - Closing sends a goodbye on every queue pair so that peers fail what they wait for from this
//   rank with HM_ERR_PEER_FAILED; the destructor waits (bounded) for the goodbyes to be
//   acknowledged before it destroys the queue pairs. Work-request errors (retries exhausted,
//   ...) fail that peer's traffic with a message naming the peer and the device.
//
// Files: connect.cpp (set_peers, connect_all, dialing a peer's handshake listener), accept.cpp
// (the listening side), connection.cpp (a queue pair and its slots), send.cpp (pieces, credits,
// goodbyes), receive.cpp, completions.cpp (the completion channel and device events), close.cpp
// (failures and shutdown), transport.cpp (construction, link names), device.cpp (which port,
// opened), config.cpp.
#pragma once

#include "core/asio.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bootstrap/auth.hpp"
#include "transports/common/job_token.hpp"
#include "transports/common/listener.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/options.hpp"
#include "transports/transport.hpp"
#include "transports/verbs/config.hpp"
#include "transports/verbs/credit_window.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/message_cutter.hpp"
#include "transports/verbs/nic.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {

// Whether this host has a usable (ACTIVE) RDMA port under these preferences; otherwise false
// with `why` ("no RDMA device found (...)", "no usable ACTIVE RDMA port (...)", a bad
// HOLMES_IB_DEVICE, ...).
bool verbs_available(std::string* why, const PortPreferences& prefs = {});

// Opens the port (prefs.device, else chosen by local rank among the ACTIVE ones) and listens
// for handshakes on options.listen_host. Reads listen_host, token, context, connect_timeout.
// Throws HM_ERR_UNSUPPORTED when no port is usable, HM_ERR_INVALID_ARGUMENT for a malformed
// device list or a config the transport cannot run with, HM_ERR_TRANSPORT when the device
// refuses a resource.
std::unique_ptr<Transport> make_verbs_transport(const TransportOptions& options,
                                                const VerbsConfig& config = {},
                                                const PortPreferences& prefs = {});

// The same over a given device (the tests' fake fabric); listens at once on
// options.listen_host (an ephemeral port); throws HM_ERR_TRANSPORT when it cannot.
std::unique_ptr<Transport> make_verbs_transport_on(const TransportOptions& options,
                                                   const VerbsConfig& config,
                                                   std::unique_ptr<Nic> nic);

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

// Work request ids: the slot index, with this bit set for receives. Error completions carry no
// valid opcode, so the id alone must say what finished.
constexpr std::uint64_t kRecvBit = 1ull << 63;
constexpr std::size_t kPollBatch = 64;

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using SlotMemory = std::unique_ptr<std::byte[], FreeDeleter>;

// One isend waiting for credits and send slots.
struct SendOp {
  CompletionPtr request;
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::optional<MessageCutter> cutter;  // made with the first piece, once the slot size is known
};

// Which way a queue pair carries data: this rank's to the peer (it dialed), or the peer's to
// this rank (the peer dialed).
enum class Direction : bool { kInbound = false, kOutbound = true };

// One RC queue pair with a peer and the registered slots it sends from and receives into.
struct Connection {
  std::uint64_t id = 0;
  int peer = -1;
  bool outbound = false;  // this rank dialed it and sends data on it; otherwise the peer does
  SlotMemory memory;      // [receive slots][send slots]
  std::unique_ptr<MemoryRegion> region;
  std::unique_ptr<QueuePair> qp;
  std::uint32_t recv_slots = 0;
  std::uint32_t recv_slot_bytes = 0;
  std::uint32_t send_slots = 0;
  std::uint32_t send_slot_bytes = 0;
  std::uint32_t remote_slot_bytes = 0;  // the peer's receive slots: our largest message
  std::uint32_t local_psn = 0;
  CreditWindow credits;
  std::vector<std::uint32_t> free_send_slots;
  std::uint32_t sends_in_flight = 0;
  bool ready = false;        // both ends connected: messages may flow
  bool broken = false;       // failed or abandoned: nothing more is posted or read
  bool peer_closed = false;  // the peer's goodbye arrived here: nothing more is posted
  bool goodbye_wanted = false;
  bool goodbye_posted = false;
  bool goodbye_done = false;  // its completion arrived (success or not)
  std::uint32_t goodbye_slot = 0;
  // The first error completion seen while draining (a real error wins over a flush).
  std::optional<WorkCompletion> error;
  std::string error_what;

  std::span<std::byte> recv_slot(std::uint32_t i) {
    return {memory.get() + std::size_t{i} * recv_slot_bytes, recv_slot_bytes};
  }
  std::span<std::byte> send_slot(std::uint32_t i) {
    return {
        memory.get() + std::size_t{recv_slots} * recv_slot_bytes + std::size_t{i} * send_slot_bytes,
        send_slot_bytes};
  }
  bool usable() const { return ready && !broken && !peer_closed; }
};

struct PeerState {
  std::string address;              // host:port of its handshake listener; "" when not served
  std::unique_ptr<Connection> out;  // this rank's data to the peer
  std::unique_ptr<Connection> in;   // the peer's data to this rank
  std::deque<SendOp> sends;
  PeerFailure failure;
  bool silent = false;  // its goodbye arrived where its data arrives: no more data from it
  bool deaf = false;    // its goodbye arrived where our data goes: it reads no more
  bool listener_told = false;
};

// The dialing side of a handshake.
struct Dial {
  explicit Dial(asio::io_context& io) : socket(io), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  int peer = -1;
  bool finished = false;
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge{};
  std::vector<std::uint8_t> hello;
  std::array<std::uint8_t, auth::Verdict::kWireBytes + kReplyPrefixBytes> reply{};
  std::vector<std::uint8_t> payload;
  TokenAnswer answer;
};

// The listening side of a handshake.
struct Accept {
  Accept(asio::io_context& io, tcp::socket s) : socket(std::move(s)), timer(io) {}
  tcp::socket socket;
  asio::steady_timer timer;
  std::string remote;
  bool finished = false;
  TokenChallenge token_challenge;
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge{};
  std::array<std::uint8_t, kHelloPrefixBytes> prefix{};
  HelloPrefix hello;
  std::vector<std::uint8_t> info;
  std::vector<std::uint8_t> reply;
};

class VerbsTransport final : public Transport {
 public:
  VerbsTransport(const TransportOptions& options, const VerbsConfig& config,
                 std::unique_ptr<Nic> nic);
  ~VerbsTransport() override;

  const char* name() const override { return "verbs"; }
  std::string listen_address() const override { return listener_.address(); }
  void set_peers(int rank, std::vector<std::string> addresses) override;
  CompletionPtr connect_all() override;
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override;
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override;
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) override;
  LinkProperties link(int peer) const override;
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;
  void set_peer_failure_listener(PeerFailureListener listener) override {
    failure_listener_.set(std::move(listener));
  }
  void set_arrival_listener(ArrivalListener listener) override {
    matcher_.set_arrival_listener(std::move(listener));
  }

 private:
  // Everything below runs on the progress thread only.
  void start_send(int peer, SendOp op);
  void start_recv(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> data,
                  const CompletionPtr& request);

  // Connections.
  std::unique_ptr<Connection> make_connection(int peer, Direction direction);
  QpInfo local_info(const Connection& c) const;
  void finish_connection(Connection& c, const QpInfo& remote);

  // Dialing (this rank sends data to the peer).
  void dial(int peer);
  bool dial_alive(const std::shared_ptr<Dial>& d);
  void end_dial(const std::shared_ptr<Dial>& d);
  void dial_failed(const std::shared_ptr<Dial>& d, hm_status_t status, const std::string& message);
  void on_challenge(const std::shared_ptr<Dial>& d);
  void on_verdict(const std::shared_ptr<Dial>& d);
  void on_reply(const std::shared_ptr<Dial>& d, hm_status_t status);

  // Accepting (the peer sends data to this rank).
  void accepted(tcp::socket socket, std::string remote);
  void start_accept(const std::shared_ptr<Accept>& a);
  void check_hello(const std::shared_ptr<Accept>& a);
  void send_reply(const std::shared_ptr<Accept>& a, const auth::Verdict& verdict,
                  hm_status_t status, std::vector<std::uint8_t> payload);
  void refuse(const std::shared_ptr<Accept>& a, const std::string& why);
  void end_accept(const std::shared_ptr<Accept>& a);

  // Completions and messages.
  void wait_for_completions();
  void wait_for_device_events();
  void drain(Connection& c);
  void drain_all();
  void on_completion(Connection& c, const WorkCompletion& wc);
  void on_message(Connection& c, std::uint32_t slot, std::uint32_t byte_len);
  void repost(Connection& c, std::uint32_t slot);
  void after_activity(Connection& c);
  void pump(int peer);
  bool post_message(Connection& c, const WireHeader& header, std::span<const std::byte> payload);
  void maybe_send_credit(Connection& c);
  void post_goodbye(Connection& c);
  void peer_said_goodbye(Connection& c);

  // Failures.
  void protocol_error(Connection& c, const std::string& why);
  void connection_failed(Connection& c, hm_status_t status, const std::string& message);
  void fail_peer_now(int peer, hm_status_t status, const std::string& message);
  void notify_listener(int peer, hm_status_t status, const std::string& message);
  void check_connected();
  void check_goodbyes();
  void do_shutdown(hm_status_t status, const std::string& why);

  std::string peer_name(int peer) const;
  // The device `peer` named in its handshake; "" before it.
  std::string remote_device(int peer) const;

  TransportOptions options_;
  JobToken token_;
  VerbsConfig config_;
  std::unique_ptr<Nic> nic_;
  PathSettings path_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  Listener listener_;
  asio::posix::stream_descriptor completion_events_{io_};
  asio::posix::stream_descriptor device_events_{io_};

  PeerDirectory directory_{"verbs"};  // also read by link() and requests on other threads
  mutable std::mutex devices_mutex_;  // remote_devices_ is read by link()
  std::vector<std::string> remote_devices_;
  std::vector<PeerState> peers_;
  std::unordered_map<std::uint64_t, Connection*> by_id_;  // owned by peers_
  std::uint64_t next_id_ = 1;
  std::unordered_set<std::shared_ptr<Dial>> dials_;
  std::unordered_set<std::shared_ptr<Accept>> accepts_;
  std::vector<std::shared_ptr<Accept>> early_hellos_;  // checked once peers are known
  ConnectWaiters connect_waiters_;
  std::shared_ptr<std::promise<void>> goodbyes_settled_;
  FailureListener failure_listener_;
  Matcher matcher_{[this](int peer) { return peer_name(peer); }};
  std::vector<WorkCompletion> completions_ = std::vector<WorkCompletion>(kPollBatch);
  std::mt19937 random_{std::random_device{}()};
  ClosedState closed_;
  ProgressThread thread_;
};

}  // namespace holmes::verbs
