#include "transports/verbs/verbs_engine.hpp"

#include <unistd.h>

#include "core/asio.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bootstrap/auth.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/common/job_token.hpp"
#include "transports/common/listener.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/verbs/credit_window.hpp"
#include "transports/verbs/handshake.hpp"
#include "transports/verbs/message_cutter.hpp"
#include "transports/verbs/qp_info.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {
namespace {

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

// Page-aligned, zeroed memory for a connection's slots.
SlotMemory allocate_slots(std::size_t bytes) {
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  auto* memory = static_cast<std::byte*>(std::aligned_alloc(4096, rounded));
  if (memory == nullptr) {
    fail(HM_ERR_OUT_OF_MEMORY, "verbs: cannot allocate {} bytes of message slots", rounded);
  }
  std::memset(memory, 0, rounded);
  return SlotMemory(memory);
}

// Text from a peer, made safe for logs and error messages.
std::string printable(std::span<const std::uint8_t> bytes) {
  std::string text(bytes.begin(), bytes.end());
  for (char& c : text) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return text;
}

const VerbsConfig& checked(const VerbsConfig& config) {
  require(config.data_slots >= CreditWindow::kMinSlots && config.data_slots <= kMaxSlots &&
              config.control_slots >= CreditWindow::kMinSlots && config.control_slots <= kMaxSlots,
          "verbs: slots per queue pair must be in [{}, {}]", CreditWindow::kMinSlots, kMaxSlots);
  require(config.slot_bytes > kWireHeaderBytes && config.slot_bytes >= kMinSlotBytes &&
              config.slot_bytes <= kMaxSlotBytes,
          "verbs: slot bytes must be in [{}, {}], got {}", kMinSlotBytes, kMaxSlotBytes,
          config.slot_bytes);
  return config;
}

// One isend waiting for credits and send slots.
struct SendOp {
  CompletionPtr request;
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::optional<MessageCutter> cutter;  // made with the first piece, once the slot size is known
};

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
  void shutdown(hm_status_t status, const std::string& why, bool wait) override;
  LinkProperties link(int peer) const override;
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;
  void set_peer_failure_listener(PeerFailureListener listener) override {
    failure_listener_.set(std::move(listener));
  }

 private:
  // Everything below runs on the progress thread only.
  void start_send(int peer, SendOp op);
  void start_recv(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> data,
                  const CompletionPtr& request);

  // Connections.
  std::unique_ptr<Connection> make_connection(int peer, bool outbound);
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

VerbsTransport::VerbsTransport(const TransportOptions& options, const VerbsConfig& config,
                               std::unique_ptr<Nic> nic)
    : options_(options),
      token_(options.token, options.context),
      config_(checked(config)),
      nic_(std::move(nic)),
      path_{config_.service_level, config_.traffic_class, config_.ack_timeout, config_.retry_count},
      work_(asio::make_work_guard(io_)),
      listener_(io_, options.listen_host, "verbs") {
  // The reactor gets its own descriptors (dup) so that closing them never closes the device's.
  const int completion_fd = ::dup(nic_->completion_fd());
  if (completion_fd < 0) {
    fail(HM_ERR_TRANSPORT, "verbs: cannot watch the completion channel: {}", std::strerror(errno));
  }
  completion_events_.assign(completion_fd);
  if (nic_->async_fd() >= 0) {
    const int device_fd = ::dup(nic_->async_fd());
    if (device_fd < 0) {
      fail(HM_ERR_TRANSPORT, "verbs: cannot watch device events: {}", std::strerror(errno));
    }
    device_events_.assign(device_fd);
    wait_for_device_events();
  }
  wait_for_completions();
  listener_.start([this](tcp::socket socket,
                         std::string remote) { accepted(std::move(socket), std::move(remote)); },
                  [this] { return directory_.rank(); });
  thread_.start([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        // A handler must not take the progress thread down with it: log and go on.
        HM_LOG_ERROR("verbs: progress thread: {}", e.what());
      }
    }
  });
}

VerbsTransport::~VerbsTransport() {
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", true);
  // Let the goodbyes reach the peers before their queue pairs go away (bounded: a dead peer
  // never acknowledges).
  auto settled = std::make_shared<std::promise<void>>();
  auto done = settled->get_future();
  asio::post(io_, [this, settled] {
    goodbyes_settled_ = settled;
    check_goodbyes();
  });
  if (!thread_.here()) done.wait_for(config_.goodbye_wait);
  work_.reset();
  io_.stop();
  thread_.join();
  error_code ignored;
  completion_events_.close(ignored);
  device_events_.close(ignored);
  dials_.clear();
  accepts_.clear();
  early_hellos_.clear();
  by_id_.clear();
  peers_.clear();  // queue pairs, then their memory, before the device
  nic_.reset();
}

void VerbsTransport::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.check(rank, addresses.size());
  {
    std::lock_guard lock(devices_mutex_);
    remote_devices_.assign(addresses.size(), std::string());
  }
  directory_.set(rank, addresses);
  asio::post(io_, [this, addresses = std::move(addresses)] {
    peers_.resize(addresses.size());
    for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = addresses[i];
    auto waiting = std::move(early_hellos_);
    early_hellos_.clear();
    for (auto& a : waiting) {
      if (!a->finished) check_hello(a);
    }
  });
}

CompletionPtr VerbsTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  asio::post(io_, [this, done] {
    if (closed_.fail(done)) return;
    connect_waiters_.add(done);
    for (std::size_t i = 0; i < peers_.size(); ++i) {
      const int peer = static_cast<int>(i);
      auto& p = peers_[i];
      if (peer != directory_.rank() && !p.address.empty() && !p.out && !p.failure.failed()) {
        dial(peer);
      }
    }
    check_connected();
  });
  return done;
}

CompletionPtr VerbsTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                    std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  require(data.size() <= kMaxMessageBytes, "verbs: a {}-byte message exceeds the {}-byte limit",
          data.size(), kMaxMessageBytes);
  auto request = std::make_shared<Completion>();
  SendOp op;
  op.request = request;
  op.data = data.data();
  op.size = data.size();
  op.tag = tag;
  op.signature = signature;
  asio::post(io_, [this, peer, op = std::move(op)]() mutable { start_send(peer, std::move(op)); });
  return request;
}

CompletionPtr VerbsTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                    std::span<std::byte> data) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  asio::post(io_, [this, peer, tag, signature, data, request] {
    start_recv(peer, tag, signature, data, request);
  });
  return request;
}

void VerbsTransport::shutdown(hm_status_t status, const std::string& why, bool wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  asio::post(io_, [this, status, why, done] {
    do_shutdown(status, why);
    done->set_value();
  });
  if (wait && !thread_.here()) {
    // The progress thread never blocks, so this is quick; the bound only guards against a
    // stopped io_context.
    finished.wait_for(std::chrono::seconds(30));
  }
}

std::string VerbsTransport::remote_device(int peer) const {
  std::lock_guard lock(devices_mutex_);
  return peer >= 0 && static_cast<std::size_t>(peer) < remote_devices_.size()
             ? remote_devices_[static_cast<std::size_t>(peer)]
             : std::string();
}

LinkProperties VerbsTransport::link(int peer) const {
  const std::string where = directory_.address(peer);
  std::string device = remote_device(peer);
  if (device.empty()) device = "?";
  const auto& port = nic_->port();
  return {"verbs",
          fmt::format("verbs {} ({}, {} Gb/s) -> rank {} {} at {}", port.name,
                      link_layer_name(port.link_layer), port.rate_gbps, peer, device, where),
          port.rate_gbps / 8, 0};
}

void VerbsTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  asio::post(io_, [this, peer, status, message] {
    if (closed_.closed() || peer < 0 || static_cast<std::size_t>(peer) >= peers_.size()) return;
    // Deliver what already arrived from it first: the control plane may notice a peer's exit
    // before this thread has read its last messages.
    drain_all();
    fail_peer_now(peer, status, message);
  });
}

std::string VerbsTransport::peer_name(int peer) const {
  const std::string where = directory_.address(peer);
  if (const std::string device = remote_device(peer); !device.empty()) {
    return fmt::format("rank {} (verbs {} at {})", peer, device, where);
  }
  return fmt::format("rank {} (verbs at {})", peer, where);
}

// ---------------------------------------------------------------------------------------------
// Sending and receiving
// ---------------------------------------------------------------------------------------------

void VerbsTransport::start_send(int peer, SendOp op) {
  if (closed_.closed()) {
    op.request->complete(closed_.status(), closed_.why());
    return;
  }
  auto& p = peers_[peer];
  if (p.failure.failed()) {
    op.request->complete(p.failure.status, p.failure.message);
    return;
  }
  if (p.deaf) {
    op.request->complete(HM_ERR_PEER_FAILED,
                         fmt::format("{} closed its verbs connection before this message was sent",
                                     peer_name(peer)));
    return;
  }
  if (p.address.empty()) {
    op.request->complete(HM_ERR_INVALID_ARGUMENT,
                         fmt::format("rank {} is not reached through verbs", peer));
    return;
  }
  p.sends.push_back(std::move(op));
  if (!p.out) dial(peer);
  pump(peer);
}

void VerbsTransport::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                                std::span<std::byte> data, const CompletionPtr& request) {
  if (closed_.fail(request)) return;
  if (matcher_.post(peer, tag, signature, data, request)) return;  // it was already here
  const auto& p = peers_[peer];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.silent) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its verbs connection before sending this message", peer_name(peer)));
  }
}

void VerbsTransport::pump(int peer) {
  auto& p = peers_[peer];
  Connection* c = p.out.get();
  if (c == nullptr || !c->usable() || closed_.closed()) return;
  const std::uint64_t capacity =
      std::min(c->send_slot_bytes, c->remote_slot_bytes) - kWireHeaderBytes;
  while (!p.sends.empty() && !c->free_send_slots.empty() &&
         c->credits.can_send(MessageKind::kData)) {
    SendOp& op = p.sends.front();
    if (!op.cutter) op.cutter.emplace(op.size, capacity);
    const auto piece = op.cutter->next();
    WireHeader h;
    h.kind = MessageKind::kData;
    h.credits = c->credits.take_owed();
    h.signature = op.signature;
    h.tag = op.tag;
    h.total = op.size;
    h.offset = piece.offset;
    h.length = static_cast<std::uint32_t>(piece.length);
    if (!post_message(*c, h, {op.data + piece.offset, piece.length})) return;  // peer failed
    if (op.cutter->done()) {
      // Every byte is copied into the slots: the caller's buffer is free.
      auto request = std::move(op.request);
      p.sends.pop_front();
      request->complete();
    }
  }
  maybe_send_credit(*c);
}

bool VerbsTransport::post_message(Connection& c, const WireHeader& header,
                                  std::span<const std::byte> payload) {
  const std::uint32_t slot = c.free_send_slots.back();
  c.free_send_slots.pop_back();
  const auto buffer = c.send_slot(slot);
  const auto encoded = header.encode();
  std::memcpy(buffer.data(), encoded.data(), encoded.size());
  if (!payload.empty())
    std::memcpy(buffer.data() + kWireHeaderBytes, payload.data(), payload.size());
  try {
    c.qp->post_send(slot, buffer.first(kWireHeaderBytes + payload.size()), *c.region);
  } catch (const Error& e) {
    c.free_send_slots.push_back(slot);
    connection_failed(
        c, HM_ERR_TRANSPORT,
        fmt::format("cannot send to {} on {}: {}", peer_name(c.peer), nic_->port().name, e.what()));
    return false;
  }
  c.credits.on_send();
  ++c.sends_in_flight;
  if (header.kind == MessageKind::kGoodbye) {
    c.goodbye_posted = true;
    c.goodbye_slot = slot;
  }
  return true;
}

void VerbsTransport::maybe_send_credit(Connection& c) {
  if (!c.usable() || closed_.closed() || !c.credits.credit_update_due() ||
      c.free_send_slots.empty() || !c.credits.can_send(MessageKind::kCredit)) {
    return;
  }
  WireHeader h;
  h.kind = MessageKind::kCredit;
  h.credits = c.credits.take_owed();
  post_message(c, h, {});
}

void VerbsTransport::post_goodbye(Connection& c) {
  if (!c.goodbye_wanted || c.goodbye_posted || !c.usable()) return;
  // Without a free slot or credit now, it goes when a send completion frees one.
  if (c.free_send_slots.empty() || !c.credits.can_send(MessageKind::kGoodbye)) return;
  WireHeader h;
  h.kind = MessageKind::kGoodbye;
  h.credits = c.credits.take_owed();
  post_message(c, h, {});
}

// ---------------------------------------------------------------------------------------------
// Completions
// ---------------------------------------------------------------------------------------------

void VerbsTransport::wait_for_completions() {
  completion_events_.async_wait(asio::posix::descriptor_base::wait_read, [this](
                                                                             const error_code& ec) {
    if (ec) return;  // closed at destruction
    // Wait again before reading: the reactor is edge-triggered, so an event arriving while
    // this handler drains must find a wait queued. Events read below cost at most one
    // spurious wakeup.
    wait_for_completions();
    std::vector<std::uint64_t> ids;
    try {
      ids = nic_->take_completion_events();
    } catch (const Error& e) {
      error_code ignored;
      completion_events_.cancel(ignored);
      do_shutdown(HM_ERR_TRANSPORT, fmt::format("verbs: the completion channel of {} failed: {}",
                                                nic_->port().name, e.what()));
      return;
    }
    for (const auto id : ids) {
      if (auto it = by_id_.find(id); it != by_id_.end()) drain(*it->second);
    }
  });
}

void VerbsTransport::wait_for_device_events() {
  device_events_.async_wait(asio::posix::descriptor_base::wait_read, [this](const error_code& ec) {
    if (ec) return;
    wait_for_device_events();
    std::vector<NicEvent> events;
    try {
      events = nic_->take_async_events();
    } catch (const Error& e) {
      error_code ignored;
      device_events_.cancel(ignored);
      HM_LOG_WARN("verbs: cannot read events of {}: {}", nic_->port().name, e.what());
      return;
    }
    for (const auto& event : events) {
      switch (event.kind) {
        case NicEvent::Kind::kQueuePairFailed: {
          auto it = by_id_.find(event.queue_pair_id);
          if (it == by_id_.end()) break;
          Connection& c = *it->second;
          drain(c);  // a completion error, if any, names the cause better
          if (!c.broken && !c.peer_closed && !closed_.closed()) {
            connection_failed(c, HM_ERR_TRANSPORT,
                              fmt::format("{} reported {} for the queue pair to {}",
                                          nic_->port().name, event.text, peer_name(c.peer)));
          }
          break;
        }
        case NicEvent::Kind::kDeviceFailed:
          do_shutdown(HM_ERR_TRANSPORT,
                      fmt::format("verbs: device {} failed: {}", nic_->port().name, event.text));
          break;
        case NicEvent::Kind::kInformational:
          HM_LOG_INFO("verbs rank {}: {}: {}", directory_.rank(), nic_->port().name, event.text);
          break;
      }
    }
  });
}

void VerbsTransport::drain_all() {
  std::vector<Connection*> all;
  all.reserve(by_id_.size());
  for (const auto& [id, c] : by_id_) all.push_back(c);
  for (auto* c : all) drain(*c);
}

void VerbsTransport::drain(Connection& c) {
  for (;;) {
    std::size_t got = 0;
    try {
      got = c.qp->poll(completions_);
    } catch (const Error& e) {
      if (!c.broken) {
        connection_failed(c, HM_ERR_TRANSPORT,
                          fmt::format("cannot poll the queue pair to {} on {}: {}",
                                      peer_name(c.peer), nic_->port().name, e.what()));
      }
      return;
    }
    for (std::size_t i = 0; i < got; ++i) on_completion(c, completions_[i]);
    if (got < completions_.size()) break;
  }
  if (c.error && !c.broken) {
    // The queue pair is in the error state: everything on it is lost.
    const WorkCompletion wc = *c.error;
    if (c.peer_closed || closed_.closed()) {
      c.broken = true;  // the peer said goodbye, or we are closing: expected
    } else {
      const hm_status_t status = wc.peer_side || wc.flushed ? HM_ERR_PEER_FAILED : HM_ERR_TRANSPORT;
      connection_failed(c, status,
                        fmt::format("a {} to {} failed on {}: {}", c.error_what, peer_name(c.peer),
                                    nic_->port().name, wc.error));
    }
  }
  after_activity(c);
}

void VerbsTransport::on_completion(Connection& c, const WorkCompletion& wc) {
  const bool is_recv = (wc.wr_id & kRecvBit) != 0;
  const auto slot = static_cast<std::uint32_t>(wc.wr_id & 0xffffffffu);
  if (!wc.ok && (!c.error || (c.error->flushed && !wc.flushed))) {
    c.error = wc;
    c.error_what = is_recv ? "receive" : "send";
  }
  if (!is_recv) {
    if (slot >= c.send_slots) return;
    --c.sends_in_flight;
    c.free_send_slots.push_back(slot);
    if (c.goodbye_posted && slot == c.goodbye_slot) c.goodbye_done = true;
    return;
  }
  if (!wc.ok || slot >= c.recv_slots) return;
  if (c.broken || c.peer_closed || closed_.closed() || c.error)
    return;  // nothing more is read here
  on_message(c, slot, wc.byte_len);
}

void VerbsTransport::on_message(Connection& c, std::uint32_t slot, std::uint32_t byte_len) {
  if (byte_len > c.recv_slot_bytes) {
    protocol_error(
        c, fmt::format("a {}-byte message overran a {}-byte slot", byte_len, c.recv_slot_bytes));
    return;
  }
  const auto bytes = c.recv_slot(slot).first(byte_len);
  const std::span<const std::uint8_t> raw(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                          bytes.size());
  std::string why;
  const auto header = WireHeader::decode(raw, &why);
  if (!header) {
    protocol_error(c, why);
    return;
  }
  if (!c.credits.on_grant(header->credits)) {
    protocol_error(
        c, fmt::format("it returned {} credits, more than this rank had used", header->credits));
    return;
  }
  switch (header->kind) {
    case MessageKind::kData: {
      if (c.outbound) {
        protocol_error(c, "data arrived on the queue pair this rank sends on");
        return;
      }
      const FragmentHeader fragment{header->tag, header->signature, header->total, header->offset,
                                    header->length};
      if (!matcher_.deliver(c.peer, fragment, bytes.subspan(kWireHeaderBytes))) {
        protocol_error(c, "pieces of one message disagree on its size or signature");
        return;
      }
      break;
    }
    case MessageKind::kCredit:
      break;
    case MessageKind::kGoodbye:
      peer_said_goodbye(c);
      return;  // the slot stays: nothing more comes here
  }
  repost(c, slot);
}

void VerbsTransport::repost(Connection& c, std::uint32_t slot) {
  if (c.broken) return;
  try {
    c.qp->post_recv(kRecvBit | slot, c.recv_slot(slot), *c.region);
  } catch (const Error& e) {
    connection_failed(c, HM_ERR_TRANSPORT,
                      fmt::format("cannot repost a receive for {} on {}: {}", peer_name(c.peer),
                                  nic_->port().name, e.what()));
    return;
  }
  c.credits.on_reposted();
}

void VerbsTransport::after_activity(Connection& c) {
  if (c.usable() && !closed_.closed()) {
    if (c.outbound) pump(c.peer);
    maybe_send_credit(c);
  }
  post_goodbye(c);
  check_goodbyes();
}

void VerbsTransport::peer_said_goodbye(Connection& c) {
  c.peer_closed = true;
  auto& p = peers_[c.peer];
  if (p.failure.failed()) return;
  if (!c.outbound) {
    p.silent = true;
    const auto message = fmt::format(
        "{} closed its verbs connection (process exited or communicator destroyed) while this "
        "rank waits for data from it",
        peer_name(c.peer));
    // The listener first: whoever wakes from a failed receive finds the failure known.
    notify_listener(c.peer, HM_ERR_PEER_FAILED, message);
    matcher_.fail_peer(c.peer, HM_ERR_PEER_FAILED, message);
  } else {
    p.deaf = true;
    const auto message = fmt::format(
        "{} closed its verbs connection (process exited or communicator destroyed) before this "
        "rank's message to it was sent",
        peer_name(c.peer));
    auto sends = std::move(p.sends);
    p.sends.clear();
    for (auto& op : sends) op.request->complete(HM_ERR_PEER_FAILED, message);
  }
}

// ---------------------------------------------------------------------------------------------
// Connections and handshakes
// ---------------------------------------------------------------------------------------------

std::unique_ptr<Connection> VerbsTransport::make_connection(int peer, bool outbound) {
  auto c = std::make_unique<Connection>();
  c->id = next_id_++;
  c->peer = peer;
  c->outbound = outbound;
  // The data direction gets the big slots; the other only carries credits and goodbyes.
  const std::uint32_t data_slots = config_.data_slots;
  const std::uint32_t data_bytes = config_.slot_bytes;
  const std::uint32_t control_slots = config_.control_slots;
  const auto control_bytes = static_cast<std::uint32_t>(kControlSlotBytes);
  c->recv_slots = outbound ? control_slots : data_slots;
  c->recv_slot_bytes = outbound ? control_bytes : data_bytes;
  c->send_slots = outbound ? data_slots : control_slots;
  c->send_slot_bytes = outbound ? data_bytes : control_bytes;
  const std::size_t bytes = std::size_t{c->recv_slots} * c->recv_slot_bytes +
                            std::size_t{c->send_slots} * c->send_slot_bytes;
  c->memory = allocate_slots(bytes);
  c->region = nic_->register_memory({c->memory.get(), bytes});
  c->qp = nic_->create_queue_pair(c->id, {c->send_slots, c->recv_slots}, path_);
  // Receives may be posted in INIT: they are in place before the peer can send.
  for (std::uint32_t i = 0; i < c->recv_slots; ++i) {
    c->qp->post_recv(kRecvBit | i, c->recv_slot(i), *c->region);
  }
  for (std::uint32_t i = c->send_slots; i-- > 0;) c->free_send_slots.push_back(i);
  c->local_psn = random_() & 0xffffffu;
  return c;
}

QpInfo VerbsTransport::local_info(const Connection& c) const {
  const auto& port = nic_->port();
  QpInfo info;
  info.link_layer = port.link_layer;
  info.gid_type = port.gid_type;
  info.mtu = port.active_mtu;
  info.lid = port.lid;
  info.gid = port.gid;
  info.qpn = c.qp->qp_number();
  info.psn = c.local_psn;
  info.recv_slots = c.recv_slots;
  info.recv_slot_bytes = c.recv_slot_bytes;
  info.device = port.name.substr(0, kMaxDeviceNameBytes);
  return info;
}

void VerbsTransport::finish_connection(Connection& c, const QpInfo& remote) {
  c.qp->connect(remote, c.local_psn);
  c.credits = CreditWindow(remote.recv_slots, c.recv_slots);
  c.remote_slot_bytes = remote.recv_slot_bytes;
  {
    std::lock_guard lock(devices_mutex_);
    remote_devices_[static_cast<std::size_t>(c.peer)] = remote.device;
  }
  c.ready = true;
}

void VerbsTransport::dial(int peer) {
  auto& p = peers_[peer];
  HostPort where;
  try {
    where = parse_host_port(p.address, fmt::format("verbs address of rank {}", peer));
  } catch (const Error& e) {
    fail_peer_now(peer, HM_ERR_INVALID_ARGUMENT, e.what());
    return;
  }
  error_code ec;
  const auto address = asio::ip::make_address(where.host, ec);
  if (ec) {
    fail_peer_now(
        peer, HM_ERR_INVALID_ARGUMENT,
        fmt::format("rank {} published verbs address '{}', which is not ip:port", peer, p.address));
    return;
  }
  try {
    p.out = make_connection(peer, true);
    by_id_[p.out->id] = p.out.get();
  } catch (const Error& e) {
    fail_peer_now(peer,
                  e.status() == HM_ERR_OUT_OF_MEMORY ? HM_ERR_OUT_OF_MEMORY : HM_ERR_TRANSPORT,
                  fmt::format("cannot set up a queue pair to {} on {}: {}", peer_name(peer),
                              nic_->port().name, e.what()));
    return;
  }
  auto d = std::make_shared<Dial>(io_);
  d->peer = peer;
  dials_.insert(d);
  d->timer.expires_after(options_.connect_timeout);
  d->timer.async_wait([this, d](const error_code& ec) {
    if (ec || d->finished) return;
    dial_failed(d, HM_ERR_TIMEOUT,
                fmt::format("could not set up the verbs queue pair to {} within {} ms",
                            peer_name(d->peer), options_.connect_timeout.count()));
  });
  d->socket.async_connect(tcp::endpoint(address, where.port), [this, d](const error_code& ec) {
    if (!dial_alive(d)) return;
    if (ec) {
      dial_failed(d, HM_ERR_PEER_FAILED,
                  fmt::format("cannot connect to {}: {}", peer_name(d->peer), ec.message()));
      return;
    }
    error_code ignored;
    d->socket.set_option(tcp::no_delay(true), ignored);
    asio::async_read(
        d->socket, asio::buffer(d->challenge), [this, d](const error_code& ec, std::size_t) {
          if (!dial_alive(d)) return;
          if (ec) {
            dial_failed(
                d, HM_ERR_PEER_FAILED,
                fmt::format("{} closed the handshake: {}", peer_name(d->peer), ec.message()));
            return;
          }
          on_challenge(d);
        });
  });
}

bool VerbsTransport::dial_alive(const std::shared_ptr<Dial>& d) {
  if (d->finished) return false;
  if (closed_.closed() || peers_[d->peer].failure.failed()) {
    end_dial(d);
    return false;
  }
  return true;
}

void VerbsTransport::end_dial(const std::shared_ptr<Dial>& d) {
  if (d->finished) return;
  d->finished = true;
  error_code ignored;
  d->timer.cancel();
  d->socket.close(ignored);
  dials_.erase(d);
}

void VerbsTransport::dial_failed(const std::shared_ptr<Dial>& d, hm_status_t status,
                                 const std::string& message) {
  end_dial(d);
  fail_peer_now(d->peer, status, message);
}

void VerbsTransport::on_challenge(const std::shared_ptr<Dial>& d) {
  auth::Proof proof;
  if (!d->answer.answer(d->challenge, token_,
                        handshake_context(options_.context, directory_.rank(), d->peer), proof)) {
    dial_failed(d, HM_ERR_AUTH,
                fmt::format("{} did not answer as a Holmes endpoint", peer_name(d->peer)));
    return;
  }
  const auto info = local_info(*peers_[d->peer].out).encode();
  d->hello = encode_hello(proof, static_cast<std::uint32_t>(directory_.rank()), info);
  asio::async_write(
      d->socket, asio::buffer(d->hello), [this, d](const error_code& ec, std::size_t) {
        if (!dial_alive(d)) return;
        if (ec) {
          dial_failed(
              d, HM_ERR_PEER_FAILED,
              fmt::format("handshake with {} failed: {}", peer_name(d->peer), ec.message()));
          return;
        }
        asio::async_read(
            d->socket, asio::buffer(d->reply), [this, d](const error_code& ec, std::size_t) {
              if (!dial_alive(d)) return;
              if (ec) {
                // A refusal closes the socket right after the verdict.
                const auto verdict =
                    auth::Verdict::decode(std::span<const std::uint8_t, auth::Verdict::kWireBytes>(
                        d->reply.data(), auth::Verdict::kWireBytes));
                dial_failed(d, HM_ERR_AUTH,
                            fmt::format("{} {}", peer_name(d->peer),
                                        verdict.accepted
                                            ? "closed the handshake before its reply"
                                            : "refused this rank's job token (HOLMES_TOKEN "
                                              "differs, or another communicator listens there)"));
                return;
              }
              on_verdict(d);
            });
      });
}

void VerbsTransport::on_verdict(const std::shared_ptr<Dial>& d) {
  const auto verdict =
      auth::Verdict::decode(std::span<const std::uint8_t, auth::Verdict::kWireBytes>(
          d->reply.data(), auth::Verdict::kWireBytes));
  if (!d->answer.trusts(verdict, token_,
                        handshake_context(options_.context, directory_.rank(), d->peer))) {
    dial_failed(d, HM_ERR_AUTH,
                fmt::format("{} could not prove the job token", peer_name(d->peer)));
    return;
  }
  ReplyPrefix prefix;
  try {
    prefix = decode_reply_prefix(std::span<const std::uint8_t, kReplyPrefixBytes>(
        d->reply.data() + auth::Verdict::kWireBytes, kReplyPrefixBytes));
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT, fmt::format("{} sent {}", peer_name(d->peer), e.what()));
    return;
  }
  d->payload.resize(prefix.length);
  if (prefix.length == 0) {
    on_reply(d, prefix.status);
    return;
  }
  asio::async_read(
      d->socket, asio::buffer(d->payload),
      [this, d, status = prefix.status](const error_code& ec, std::size_t) {
        if (!dial_alive(d)) return;
        if (ec) {
          dial_failed(d, HM_ERR_PEER_FAILED,
                      fmt::format("{} closed the handshake: {}", peer_name(d->peer), ec.message()));
          return;
        }
        on_reply(d, status);
      });
}

void VerbsTransport::on_reply(const std::shared_ptr<Dial>& d, hm_status_t status) {
  const int peer = d->peer;
  if (status != HM_SUCCESS) {
    dial_failed(d, status,
                fmt::format("{} could not set up its end of the queue pair: {}", peer_name(peer),
                            printable(d->payload)));
    return;
  }
  Connection& c = *peers_[peer].out;
  QpInfo remote;
  try {
    remote = QpInfo::decode(d->payload);
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT, fmt::format("{} sent a {}", peer_name(peer), e.what()));
    return;
  }
  if (const auto why = incompatibility(local_info(c), remote); !why.empty()) {
    dial_failed(d, HM_ERR_UNSUPPORTED,
                fmt::format("cannot form a queue pair with {}: {}", peer_name(peer), why));
    return;
  }
  try {
    finish_connection(c, remote);
  } catch (const Error& e) {
    dial_failed(d, HM_ERR_TRANSPORT,
                fmt::format("cannot connect the queue pair to {} on {}: {}", peer_name(peer),
                            nic_->port().name, e.what()));
    return;
  }
  end_dial(d);
  pump(peer);
  check_connected();
}

void VerbsTransport::accepted(tcp::socket socket, std::string remote) {
  auto a = std::make_shared<Accept>(io_, std::move(socket));
  a->remote = std::move(remote);
  error_code ignored;
  a->socket.set_option(tcp::no_delay(true), ignored);
  accepts_.insert(a);
  start_accept(a);
}

void VerbsTransport::start_accept(const std::shared_ptr<Accept>& a) {
  a->timer.expires_after(options_.connect_timeout);
  a->timer.async_wait([this, a](const error_code& ec) {
    if (!ec && !a->finished) refuse(a, "no complete handshake in time");
  });
  a->challenge = a->token_challenge.encode();
  asio::async_write(
      a->socket, asio::buffer(a->challenge), [this, a](const error_code& ec, std::size_t) {
        if (a->finished) return;
        if (ec) return refuse(a, "closed during the handshake");
        asio::async_read(a->socket, asio::buffer(a->prefix),
                         [this, a](const error_code& ec, std::size_t) {
                           if (a->finished) return;
                           if (ec) return refuse(a, "closed before its proof");
                           try {
                             a->hello = decode_hello_prefix(a->prefix);
                           } catch (const Error& e) {
                             return refuse(a, e.what());
                           }
                           a->info.resize(a->hello.info_bytes);
                           asio::async_read(a->socket, asio::buffer(a->info),
                                            [this, a](const error_code& ec, std::size_t) {
                                              if (a->finished) return;
                                              if (ec)
                                                return refuse(a, "closed before its queue pair");
                                              if (peers_.empty()) {
                                                early_hellos_.push_back(a);  // checked by set_peers
                                              } else {
                                                check_hello(a);
                                              }
                                            });
                         });
      });
}

void VerbsTransport::check_hello(const std::shared_ptr<Accept>& a) {
  const std::uint32_t rank = a->hello.rank;
  if (rank >= peers_.size() || rank == static_cast<std::uint32_t>(directory_.rank())) {
    refuse(a, fmt::format("claims to be rank {}, not a peer of rank {} of {}", rank,
                          directory_.rank(), peers_.size()));
    return;
  }
  const int peer = static_cast<int>(rank);
  const auto context = handshake_context(options_.context, peer, directory_.rank());
  const auth::Verdict verdict = a->token_challenge.judge(token_, a->hello.proof, context);
  if (!verdict.accepted) {
    HM_LOG_WARN(
        "verbs rank {}: refused a handshake from {}: wrong job token (or another "
        "communicator)",
        directory_.rank(), a->remote);
    const auto rejected = verdict.encode();
    a->reply.assign(rejected.begin(), rejected.end());
    asio::async_write(a->socket, asio::buffer(a->reply),
                      [this, a](const error_code&, std::size_t) { end_accept(a); });
    return;
  }
  auto& p = peers_[peer];
  const auto answer = [&](hm_status_t status, const std::string& text) {
    send_reply(a, verdict, status, std::vector<std::uint8_t>(text.begin(), text.end()));
  };
  if (closed_.closed()) return answer(closed_.status(), closed_.why());
  if (p.in) {
    return answer(HM_ERR_TRANSPORT, fmt::format("rank {} already has a queue pair from rank {}",
                                                directory_.rank(), peer));
  }
  if (p.failure.failed()) {
    return answer(p.failure.status, fmt::format("rank {} has given up on rank {}: {}",
                                                directory_.rank(), peer, p.failure.message));
  }
  QpInfo remote;
  try {
    remote = QpInfo::decode(a->info);
  } catch (const Error& e) {
    HM_LOG_WARN("verbs rank {}: {} (rank {}) sent a {}", directory_.rank(), a->remote, peer,
                e.what());
    return answer(HM_ERR_TRANSPORT, e.what());
  }
  try {
    p.in = make_connection(peer, false);
    by_id_[p.in->id] = p.in.get();
    if (const auto why = incompatibility(local_info(*p.in), remote); !why.empty()) {
      fail(HM_ERR_UNSUPPORTED, "cannot form a queue pair with {}: {}", peer_name(peer), why);
    }
    finish_connection(*p.in, remote);
  } catch (const Error& e) {
    const std::string message = e.status() == HM_ERR_UNSUPPORTED
                                    ? e.what()
                                    : fmt::format("cannot set up the queue pair from {} on {}: {}",
                                                  peer_name(peer), nic_->port().name, e.what());
    answer(e.status(), message);
    fail_peer_now(peer, e.status(), message);  // its data can never reach this rank
    return;
  }
  send_reply(a, verdict, HM_SUCCESS, local_info(*p.in).encode());
}

void VerbsTransport::send_reply(const std::shared_ptr<Accept>& a, const auth::Verdict& verdict,
                                hm_status_t status, std::vector<std::uint8_t> payload) {
  if (payload.size() > kMaxReplyTextBytes) payload.resize(kMaxReplyTextBytes);
  a->reply = encode_reply(verdict, status, payload);
  a->timer.cancel();
  asio::async_write(a->socket, asio::buffer(a->reply),
                    [this, a](const error_code&, std::size_t) { end_accept(a); });
}

void VerbsTransport::refuse(const std::shared_ptr<Accept>& a, const std::string& why) {
  if (a->finished) return;
  HM_LOG_WARN("verbs rank {}: refused a handshake from {}: {}", directory_.rank(), a->remote, why);
  end_accept(a);
}

void VerbsTransport::end_accept(const std::shared_ptr<Accept>& a) {
  if (a->finished) return;
  a->finished = true;
  error_code ignored;
  a->timer.cancel();
  a->socket.close(ignored);
  accepts_.erase(a);
}

// ---------------------------------------------------------------------------------------------
// Failures and closing
// ---------------------------------------------------------------------------------------------

void VerbsTransport::protocol_error(Connection& c, const std::string& why) {
  connection_failed(c, HM_ERR_TRANSPORT,
                    fmt::format("{} broke the verbs protocol on {}: {}; its traffic is failed",
                                peer_name(c.peer), nic_->port().name, why));
}

void VerbsTransport::connection_failed(Connection& c, hm_status_t status,
                                       const std::string& message) {
  c.broken = true;
  fail_peer_now(c.peer, status, message);
}

void VerbsTransport::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  auto& p = peers_[peer];
  if (p.failure.failed()) return;
  HM_LOG_WARN("verbs rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  // Its queue pairs stay until the transport goes (the hardware may still use their slots),
  // but nothing more is posted on or read from them.
  if (p.out) p.out->broken = true;
  if (p.in) p.in->broken = true;
  // The listener first: whoever wakes from a failed request finds the failure known.
  notify_listener(peer, status, message);
  auto sends = std::move(p.sends);
  p.sends.clear();
  for (auto& op : sends) op.request->complete(status, message);
  matcher_.fail_peer(peer, status, message);
  check_connected();
  check_goodbyes();
}

void VerbsTransport::notify_listener(int peer, hm_status_t status, const std::string& message) {
  auto& p = peers_[peer];
  if (p.listener_told) return;
  p.listener_told = true;
  failure_listener_(peer, status, message);
}

void VerbsTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (peer == directory_.rank() || p.address.empty()) {
          return ConnectWaiters::Peer::kNotServed;
        }
        return p.out && p.out->ready ? ConnectWaiters::Peer::kConnected
                                     : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

void VerbsTransport::check_goodbyes() {
  if (!goodbyes_settled_) return;
  for (const auto& [id, c] : by_id_) {
    const bool waiting = c->goodbye_wanted && !c->goodbye_done && !c->broken && !c->peer_closed;
    if (waiting) return;
  }
  goodbyes_settled_->set_value();
  goodbyes_settled_.reset();
}

void VerbsTransport::do_shutdown(hm_status_t status, const std::string& why) {
  if (closed_.closed()) return;
  // What has already arrived is delivered first, and goodbyes that arrived are seen, so that
  // no goodbye goes to a peer that is already gone.
  drain_all();
  closed_.close(status, why);
  listener_.close();
  for (auto& d : std::vector<std::shared_ptr<Dial>>(dials_.begin(), dials_.end())) end_dial(d);
  for (auto& a : std::vector<std::shared_ptr<Accept>>(accepts_.begin(), accepts_.end())) {
    end_accept(a);
  }
  early_hellos_.clear();
  for (auto& p : peers_) {
    auto sends = std::move(p.sends);
    p.sends.clear();
    for (auto& op : sends) op.request->complete(status, why);
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  for (auto& p : peers_) {
    if (p.failure.failed()) continue;
    for (Connection* c : {p.out.get(), p.in.get()}) {
      if (c == nullptr || !c->ready) continue;  // a handshake cut short: nothing to tell
      c->goodbye_wanted = true;
      post_goodbye(*c);
    }
  }
  check_goodbyes();
}

}  // namespace

std::unique_ptr<Transport> make_verbs_transport_on(const TransportOptions& options,
                                                   const VerbsConfig& config,
                                                   std::unique_ptr<Nic> nic) {
  require(nic != nullptr, "verbs: no device");
  return std::make_unique<VerbsTransport>(options, config, std::move(nic));
}

}  // namespace holmes::verbs
