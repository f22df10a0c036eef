// ucx transport over UCP active messages: the tier inside RDMA islands. UCX picks the wires
// itself (shared memory and cma on one host; rc/ud/dc over InfiniBand or RoCE; tcp otherwise).
//
// - One UCP context and worker per transport (single-threaded mode, ucx_context.hpp).
//   listen_address() is the worker address, hex-encoded with the UCX version and a checksum
//   (ucx_address.hpp); peers create endpoints to it. Endpoints use error-handling mode "none"
//   (mode "peer" makes UCX drop its shared-memory lanes), so a peer's failure is learnt from the
//   Router (fail_peer, when the tcp control plane sees the peer go) and from the goodbye message
//   a closing endpoint sends to every peer it serves.
// - Every message is one active message with a header (ucx_wire.hpp: sender, tag, signature,
//   size, and a cookie of the job token and communicator) and is tag-matched by the shared
//   Matcher, so a receive posted before or after its message, sizes and signatures work exactly
//   as on tcp. Large messages arrive by rendezvous: UCP reads them straight into the posted
//   buffer, or into a kept piece when the receive is not posted yet, so a sender never waits for
//   its receiver to post. A caller's receive completes only once UCP has stopped writing into
//   its buffer.
// - One progress thread per transport makes the UCX calls: it progresses the worker until idle,
//   arms it and sleeps in poll() on the worker's event fd and on an eventfd through which caller
//   threads hand over isend/irecv/shutdown. Nothing spins. While a caller drives a small
//   collective (CallerDrive::begin_caller_drive), the thread parks (progress_turns.hpp) and that
//   caller makes the calls itself, posting at once and progressing the worker between yields while
//   it waits: a small message then costs no thread wake-up. A mutex lets one thread at a time at
//   the worker (single-threaded mode asks no more than that).
// - shutdown fails what is pending, sends the goodbyes and flushes the endpoints of live peers
//   (bounded), then destroys the worker and the context. Requests for peers that failed or left
//   cannot be cancelled in mode "none": their callers are answered at once for a failed peer,
//   after a short grace for one that said goodbye (it reads and writes nothing more), and UCP
//   drops the requests with the worker.
// - UCX reads its UCX_* environment as usual. When UCX_NET_DEVICES is unset, UCX is restricted
//   to the interface holding options.listen_host plus every RDMA port (ucx_devices.hpp). When
//   UCX_TLS is unset and options.ucx_same_host_peers is false (the communicator's ucx peers are
//   all on other hosts), UCX's shared-memory transports are left out (config.hpp).
//
// Files: transport.cpp (UcxTransport: the engine's owner and its thread; link names),
// progress.cpp (the engine's thread, its turns and the callers' commands), requests.cpp (UCP
// requests and their callbacks), connect.cpp, send.cpp, receive.cpp (arriving messages into the
// matcher), close.cpp (goodbyes, failures, shutdown), config.cpp.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/clock.hpp"
#include "transports/capabilities.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/options.hpp"
#include "transports/transport.hpp"
#include "transports/ucx/config.hpp"
#include "transports/ucx/ucx_address.hpp"
#include "transports/ucx/ucx_context.hpp"
#include "transports/ucx/ucx_wire.hpp"

namespace holmes::ucx {

// True when this build has UCX and ucp_init works on this machine (checked once per process);
// otherwise false with the reason in `why`.
bool ucx_available(std::string* why);

// Opens the UCP context and worker at once (reads listen_host, token, context,
// connect_timeout and ucx_same_host_peers; ucx_config) with the user's choices of UCX's
// transports and devices; throws HM_ERR_TRANSPORT when UCX cannot start.
std::unique_ptr<Transport> make_ucx_transport(const TransportOptions& options,
                                              const UcxChoices& choices = {});

// The active message id Holmes registers on its workers.
constexpr unsigned kAmId = 17;
// Opening a UCP context and worker takes milliseconds; this only guards against a stuck UCX.
constexpr std::chrono::seconds kStartTimeout{60};
// How long shutdown lets outstanding sends, goodbyes and endpoint flushes finish before the
// worker is destroyed anyway. Live peers drain them quickly (every rank reads arriving messages
// at once, posted or not; a 1 GiB rendezvous takes well under a second); the bound matters for
// a peer that died silently, and is generous because a send buffer handed back before a slow
// peer has finished reading it could be freed under that peer's read.
constexpr std::chrono::seconds kShutdownFlushTimeout{10};
// shutdown(wait=true) waits at most this long for the progress thread to finish.
constexpr std::chrono::seconds kShutdownWaitTimeout{30};
// A sleeping progress thread wakes at least this often, although UCX's event fd should wake it
// first; the shorter bound applies while UCX operations are in flight, so a missed event costs
// a short delay instead of a hang.
constexpr std::chrono::milliseconds kIdleWakeup{1000};
constexpr std::chrono::milliseconds kBusyWakeup{100};
// How long sends to a peer that said goodbye may still finish by themselves (the peer refuses
// or completes what reached it while it closes) before they fail: until then UCP may still read
// their buffers.
constexpr std::chrono::seconds kGoodbyeGrace{1};
// Worker progress calls between two looks at the callers' requests.
constexpr int kProgressBurst = 64;
// Bound on the progress calls of one drain() (each moves at least one message).
constexpr int kDrainRounds = 4096;
// Largest message accepted from a peer (as on tcp).
constexpr std::uint64_t kMaxMessageBytes = 1ull << 40;

// What one ucx transport does on its own thread. It is shared with that thread so that the
// transport can give up on a UCX that never finishes starting without leaving the thread with a
// dangling object.
class Engine {
 public:
  // Throws HM_ERR_TRANSPORT when it cannot make the eventfd callers wake its thread with.
  explicit Engine(const UcxConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The progress thread's body: opens UCX, reports through `started`, serves until shut down.
  void run(std::promise<void>& started);

  std::string listen_address() const { return listen_address_; }
  void set_peers(int rank, std::vector<std::string> addresses);
  CompletionPtr connect_all();
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data);
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data);
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait);
  LinkProperties link(int peer) const;
  void fail_peer(int peer, hm_status_t status, const std::string& message);
  void set_peer_failure_listener(Transport::PeerFailureListener listener) {
    failure_listener_.set(std::move(listener));
  }
  void set_arrival_listener(Transport::ArrivalListener listener) {
    matcher_.set_arrival_listener(std::move(listener));
  }
  bool on_progress_thread() const { return std::this_thread::get_id() == thread_id_.load(); }
  // Whether this thread is progressing the worker now: the progress thread, or a driving caller
  // in its turn (possibly inside a UCP callback).
  bool running_turn() const { return progress_.turns().running(); }

  // Small collectives progress the worker from the caller's thread while the progress thread
  // parks (progress_turns.hpp): on shared memory or a fast network a message then costs no thread
  // wake-up at either end, where it cost three (the sender's progress thread, the receiver's,
  // then the receiving caller).
  void begin_caller_drive() { progress_.begin_drive(); }
  void end_caller_drive() { progress_.end_drive(); }
  std::chrono::microseconds yield_before_sleep() const { return progress_.yield_before_sleep(); }
  Progress* caller_progress() { return progress_.caller_progress(); }

 private:
  using Command = std::function<void()>;

  struct Peer {
    std::vector<std::uint8_t> address;  // empty: not served by this transport
    ucp_ep_h ep = nullptr;
    bool flushing = false;   // a connecting flush is in flight
    bool connected = false;  // that flush completed: the endpoint is wired up
    bool gone = false;       // it said goodbye: it sends and reads nothing more
    std::optional<Clock::time_point> sends_fail_at;  // gone, with sends in flight
    PeerFailure failure;
  };

  // One irecv. The Matcher completes `matched`; the caller's Completion follows once UCP no
  // longer writes into the buffer (a rendezvous receive may still be running when the Matcher
  // fails a receive).
  struct PostedReceive {
    CompletionPtr caller;
    CompletionPtr matched;
    int writers = 0;  // rendezvous receives into this buffer in flight
  };

  // One UCP request this transport waits for.
  struct Op {
    enum class Kind { kSend, kGoodbye, kReceive, kFlush, kClose };
    Engine* engine = nullptr;
    Kind kind = Kind::kSend;
    int peer = -1;
    CompletionPtr caller;                               // kSend
    std::array<std::uint8_t, kAmHeaderBytes> header{};  // kSend, kGoodbye: UCP reads it late
    FragmentHeader fragment;                            // kReceive
    Matcher::Landing landing;                           // kReceive
    std::shared_ptr<PostedReceive> receive;             // kReceive into a posted buffer
  };

  // Caller side.
  // Hands `command` to whoever progresses the worker: runs it now if this thread drives and may
  // (after the commands handed over before it), else queues it and wakes the progress thread.
  bool post(Command command);
  void nudge();
  hm_status_t final_status(std::string* why) const;

  // Progress thread (or a driving caller, for progress_turn).
  void open();
  void loop();
  // One look at the callers' commands and a burst of worker progress (a caller's ends once the
  // request it waits for, `awaited`, is done); returns the progress calls that did something
  // (kProgressBurst: more may be waiting).
  int progress_turn(const Completion* awaited = nullptr);
  // The progress thread's turn: progress_turn, then sleep in poll until there is news; false
  // once it is time to tear down.
  bool serve_turn();
  void teardown();
  void run_commands();
  void run_later();
  // Progresses the worker until it is idle (bounded), outside any UCP callback.
  void drain();
  int poll_timeout_ms() const;
  void check_deadlines();

  Op* launch(std::unique_ptr<Op> op,
             const std::function<ucs_status_ptr_t(Op&, ucp_request_param_t&)>& start);
  static void send_callback(void* request, ucs_status_t status, void* user_data);
  static void receive_callback(void* request, ucs_status_t status, std::size_t length,
                               void* user_data);
  static ucs_status_t message_callback(void* arg, const void* header, std::size_t header_length,
                                       void* data, std::size_t length,
                                       const ucp_am_recv_param_t* param);
  void op_done(Op* raw, ucs_status_t status);
  void send_done(Op& op, ucs_status_t status);
  void receive_done(Op& op, ucs_status_t status);
  void flush_done(Op& op, ucs_status_t status);

  ucs_status_t on_message(const void* header, std::size_t header_length, void* data,
                          std::size_t length, bool rendezvous);
  void protocol_error(int peer, std::string message);

  void install_peers(std::vector<std::vector<std::uint8_t>> addresses);
  void start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                  std::span<const std::byte> data, const CompletionPtr& caller);
  void start_recv(int peer, std::uint64_t tag, std::uint32_t signature, std::span<std::byte> data,
                  const CompletionPtr& caller);
  void matched_done(const Completion* matched);
  void finish_receive(const std::shared_ptr<PostedReceive>& receive);
  void start_connect(const CompletionPtr& done);
  void check_connected();
  ucp_ep_h endpoint(int peer);
  void connect_peer(int peer);
  void describe_link(int peer);
  // Closes the endpoint once its requests have finished (mode "none" allows no forced close).
  void close_endpoint(int peer);
  void say_goodbye(int peer);
  void peer_said_goodbye(int peer);
  void fail_peer_now(int peer, hm_status_t status, const std::string& message);
  void begin_shutdown(hm_status_t status, const std::string& why);
  // Whether a UCP request in flight still concerns a peer that is alive: shutdown waits for
  // those only (requests for failed or closed peers may never finish; the worker drops them).
  bool waits_for_live_peers() const;
  bool alive(int peer) const {
    const auto& p = peers_[static_cast<std::size_t>(peer)];
    return !p.failure.failed() && !p.gone;
  }
  bool serves(int peer) const {
    return peer >= 0 && static_cast<std::size_t>(peer) < peers_.size() &&
           peer != directory_.rank() && !peers_[static_cast<std::size_t>(peer)].address.empty();
  }
  std::string peer_name(int peer) const;

  const UcxConfig config_;
  const std::uint64_t cookie_;
  const UcxVersion version_ = ucx_version();
  int event_fd_ = -1;
  std::atomic<std::thread::id> thread_id_{};

  // Who progresses the worker: the progress thread, or driving callers while it is parked; one
  // of them at a time touches anything under "Progress thread only" below. A driving caller's
  // poll is a progress turn of its own, until the request it waits for is done.
  ProgressEngine progress_{{[this](const Completion* awaited) { progress_turn(awaited); },
                            // Out of poll: the progress thread parks after this turn.
                            [this] { nudge(); }}};
  std::string listen_address_;  // written before the constructor returns, then only read
  PeerDirectory directory_{"ucx"};

  // Callers hand work to the progress thread here.
  mutable std::mutex commands_mutex_;
  std::vector<Command> commands_;
  bool accepting_ = true;  // false once the progress thread has finished
  hm_status_t final_status_ = HM_ERR_ABORTED;
  std::string final_why_;
  FailureListener failure_listener_;

  // Set when the progress thread has finished (UCX destroyed, every caller completed).
  mutable std::mutex finished_mutex_;
  std::condition_variable finished_cv_;
  bool finished_ = false;

  // What link() reports, per peer; written on the progress thread.
  mutable std::mutex links_mutex_;
  std::vector<std::string> links_;
  std::string worker_name_;

  // Progress thread only (or a driving caller in its turn).
  std::optional<UcpWorker> ucp_;
  std::vector<Peer> peers_;
  std::set<int> early_goodbyes_;  // goodbyes that came before set_peers
  Matcher matcher_{[this](int peer) { return peer_name(peer); }};
  std::unordered_map<Op*, std::unique_ptr<Op>> in_flight_;
  std::unordered_map<const Completion*, std::shared_ptr<PostedReceive>> receives_;
  ConnectWaiters connect_waiters_;
  std::vector<Command> later_;  // work a UCP callback may not do itself (closing endpoints)
  ClosedState closed_;
  bool tearing_down_ = false;
  Clock::time_point shutdown_deadline_{};
  bool warned_foreign_ = false;
};

// The transport: a thin owner of the engine and its thread.
class UcxTransport final : public Transport, public CallerDrive {
 public:
  explicit UcxTransport(const UcxConfig& config);
  ~UcxTransport() override;

  const char* name() const override { return "ucx"; }
  std::string listen_address() const override { return engine_->listen_address(); }
  void set_peers(int rank, std::vector<std::string> addresses) override {
    engine_->set_peers(rank, std::move(addresses));
  }
  CompletionPtr connect_all() override { return engine_->connect_all(); }
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override {
    return engine_->isend(peer, tag, signature, data);
  }
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override {
    return engine_->irecv(peer, tag, signature, data);
  }
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) override {
    engine_->shutdown(status, why, wait);
  }
  LinkProperties link(int peer) const override { return engine_->link(peer); }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override {
    engine_->fail_peer(peer, status, message);
  }
  void set_peer_failure_listener(PeerFailureListener listener) override {
    engine_->set_peer_failure_listener(std::move(listener));
  }
  void set_arrival_listener(ArrivalListener listener) override {
    engine_->set_arrival_listener(std::move(listener));
  }
  std::chrono::microseconds yield_before_sleep(int) const override {
    return engine_->yield_before_sleep();
  }
  void begin_caller_drive() override { engine_->begin_caller_drive(); }
  void end_caller_drive() override { engine_->end_caller_drive(); }
  Progress* caller_progress() override { return engine_->caller_progress(); }

 private:
  std::shared_ptr<Engine> engine_;
  ProgressThread thread_;
};

}  // namespace holmes::ucx
