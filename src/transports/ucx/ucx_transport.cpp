#include "transports/ucx/ucx_transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/matcher.hpp"
#include "transports/ucx/ucx_address.hpp"
#include "transports/ucx/ucx_context.hpp"
#include "transports/ucx/ucx_wire.hpp"

namespace holmes::ucx {
namespace {

using namespace std::chrono_literals;

// The active message id Holmes registers on its workers.
constexpr unsigned kAmId = 17;
// Opening a UCP context and worker takes milliseconds; this only guards against a stuck UCX.
constexpr auto kStartTimeout = 60s;
// How long shutdown lets outstanding sends, goodbyes and endpoint flushes finish before the
// worker is destroyed anyway. Live peers drain them quickly (every rank reads arriving messages
// at once, posted or not; a 1 GiB rendezvous takes well under a second); the bound matters for
// a peer that died silently, and is generous because a send buffer handed back before a slow
// peer has finished reading it could be freed under that peer's read.
constexpr auto kShutdownFlushTimeout = 10s;
// shutdown(wait=true) waits at most this long for the progress thread to finish.
constexpr auto kShutdownWaitTimeout = 30s;
// A sleeping progress thread wakes at least this often, although UCX's event fd should wake it
// first; the shorter bound applies while UCX operations are in flight, so a missed event costs
// a short delay instead of a hang.
constexpr auto kIdleWakeup = 1000ms;
constexpr auto kBusyWakeup = 100ms;
// How long sends to a peer that said goodbye may still finish by themselves (the peer refuses
// or completes what reached it while it closes) before they fail: until then UCP may still read
// their buffers.
constexpr auto kGoodbyeGrace = 1s;
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
  explicit Engine(const TransportOptions& options)
      : options_(options), cookie_(am_cookie(options.token, options.context)) {
    event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) {
      fail(HM_ERR_TRANSPORT, "ucx: cannot create an eventfd: {}", std::strerror(errno));
    }
  }
  ~Engine() {
    progress_.detach_callers();
    if (event_fd_ >= 0) ::close(event_fd_);
  }
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
  void shutdown(hm_status_t status, const std::string& why, bool wait);
  LinkProperties link(int peer) const;
  void fail_peer(int peer, hm_status_t status, const std::string& message);
  void set_peer_failure_listener(Transport::PeerFailureListener listener) {
    failure_listener_.set(std::move(listener));
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

  const TransportOptions options_;
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

// ---------------------------------------------------------------------------------------------
// Caller side
// ---------------------------------------------------------------------------------------------

bool Engine::post(Command command) {
  // What the caller's next poll would run, run now: the message leaves at once, and a receive
  // whose message came early completes before the caller waits. (While the progress thread is
  // parked nothing tears the worker down: shutdown closes the lease first.)
  if (progress_.turns().run_as_driver([&] {
        run_commands();
        command();
      })) {
    return true;
  }
  {
    std::lock_guard lock(commands_mutex_);
    if (!accepting_) return false;
    const bool was_empty = commands_.empty();
    commands_.push_back(std::move(command));
    if (!was_empty) return true;  // the thread has been woken for the first one
  }
  // A caller that drives runs it in its next poll; otherwise the progress thread must.
  progress_.turns().handed_over();
  nudge();
  return true;
}

void Engine::nudge() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(event_fd_, &one, sizeof one);
}

hm_status_t Engine::final_status(std::string* why) const {
  std::lock_guard lock(commands_mutex_);
  *why = final_why_;
  return final_status_;
}

void Engine::set_peers(int rank, std::vector<std::string> addresses) {
  directory_.check(rank, addresses.size());
  const auto size = static_cast<int>(addresses.size());
  // Decode here, on the caller's thread, so that a bad address fails set_peers with its reason.
  std::vector<std::vector<std::uint8_t>> decoded(addresses.size());
  for (int peer = 0; peer < size; ++peer) {
    const auto& text = addresses[static_cast<std::size_t>(peer)];
    if (peer == rank || text.empty()) continue;
    decoded[static_cast<std::size_t>(peer)] =
        decode_worker_address(text, version_, fmt::format("rank {}'s ucx address", peer));
  }
  {
    std::lock_guard lock(links_mutex_);
    links_.assign(addresses.size(), std::string());
  }
  directory_.set(rank, std::move(addresses));
  post([this, decoded = std::move(decoded)]() mutable { install_peers(std::move(decoded)); });
}

CompletionPtr Engine::connect_all() {
  auto done = std::make_shared<Completion>();
  if (!post([this, done] { start_connect(done); })) {
    std::string why;
    const auto status = final_status(&why);
    done->complete(status, why);
  }
  return done;
}

CompletionPtr Engine::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  auto caller = std::make_shared<Completion>();
  caller->set_progress(progress_.request_progress());
  if (!post([this, peer, tag, signature, data, caller] {
        start_send(peer, tag, signature, data, caller);
      })) {
    std::string why;
    const auto status = final_status(&why);
    caller->complete(status, why);
  }
  return caller;
}

CompletionPtr Engine::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                            std::span<std::byte> data) {
  directory_.require_peer(peer, "receive from");
  auto caller = std::make_shared<Completion>();
  caller->set_progress(progress_.request_progress());
  if (!post([this, peer, tag, signature, data, caller] {
        start_recv(peer, tag, signature, data, caller);
      })) {
    std::string why;
    const auto status = final_status(&why);
    caller->complete(status, why);
  }
  return caller;
}

void Engine::shutdown(hm_status_t status, const std::string& why, bool wait) {
  // The progress thread runs from now on, whoever drives: it tears the worker down.
  progress_.turns().close();
  post([this, status, why] { begin_shutdown(status, why); });
  // Not from inside a turn: the progress thread could not take the worker over meanwhile.
  if (!wait || on_progress_thread() || running_turn()) return;
  std::unique_lock lock(finished_mutex_);
  if (!finished_cv_.wait_for(lock, kShutdownWaitTimeout, [this] { return finished_; })) {
    HM_LOG_ERROR("ucx rank {}: the progress thread did not finish within {} s of shutdown",
                 directory_.rank(), kShutdownWaitTimeout.count());
  }
}

void Engine::fail_peer(int peer, hm_status_t status, const std::string& message) {
  post([this, peer, status, message] {
    // The peer's last messages may be waiting in this worker (its sends completed before it
    // closed the control plane, and a shared-memory send completes once it is in this rank's
    // queue): take them in before failing what is still missing.
    drain();
    if (!closed_.closed() && serves(peer)) fail_peer_now(peer, status, message);
  });
}

LinkProperties Engine::link(int peer) const {
  std::lock_guard lock(links_mutex_);
  std::string what = peer >= 0 && static_cast<std::size_t>(peer) < links_.size()
                         ? links_[static_cast<std::size_t>(peer)]
                         : std::string();
  if (what.empty()) what = fmt::format("worker {} (not connected yet)", worker_name_);
  return {"ucx", "ucx " + what, 0, 0};
}

std::string Engine::peer_name(int peer) const {
  std::lock_guard lock(links_mutex_);
  const bool known = peer >= 0 && static_cast<std::size_t>(peer) < links_.size() &&
                     !links_[static_cast<std::size_t>(peer)].empty();
  return known ? fmt::format("rank {} (ucx {})", peer, links_[static_cast<std::size_t>(peer)])
               : fmt::format("rank {} (ucx)", peer);
}

// ---------------------------------------------------------------------------------------------
// The progress thread
// ---------------------------------------------------------------------------------------------

void Engine::run(std::promise<void>& started) {
  thread_id_ = std::this_thread::get_id();
  try {
    open();
  } catch (...) {
    {
      std::lock_guard lock(commands_mutex_);
      accepting_ = false;
    }
    teardown();
    started.set_exception(std::current_exception());
    return;
  }
  started.set_value();
  loop();
  progress_.turns().own_turn([this] { teardown(); });  // after shutdown's close: at once
}

void Engine::open() {
  ucp_.emplace(options_.listen_host, options_.ucx_same_host_peers);
  if (ucp_->max_am_header() < kAmHeaderBytes) {
    fail(HM_ERR_TRANSPORT, "ucx: UCX carries active message headers of {} bytes, Holmes needs {}",
         ucp_->max_am_header(), kAmHeaderBytes);
  }
  listen_address_ = encode_worker_address(ucp_->address(), version_);
  {
    std::lock_guard lock(links_mutex_);
    worker_name_ = ucp_->name();
  }
  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.id = kAmId;
  handler.cb = &Engine::message_callback;
  handler.arg = this;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  const ucs_status_t status = ucp_worker_set_am_recv_handler(ucp_->get(), &handler);
  if (status != UCS_OK) {
    fail(HM_ERR_TRANSPORT, "ucx: cannot register the active message handler: {}",
         ucs_status_string(status));
  }
}

void Engine::loop() {
  // While callers drive, they progress the worker and this thread waits in own_turn.
  while (progress_.turns().own_turn([this] { return serve_turn(); })) {
  }
}

int Engine::progress_turn(const Completion* awaited) {
  run_commands();
  int rounds = 0;
  while (rounds < kProgressBurst && (awaited == nullptr || !awaited->done()) &&
         ucp_worker_progress(ucp_->get()) != 0) {
    ++rounds;
  }
  run_later();
  check_deadlines();
  return rounds;
}

bool Engine::serve_turn() {
  const int rounds = progress_turn();
  if (closed_.closed() && (!waits_for_live_peers() || Clock::now() >= shutdown_deadline_))
    return false;
  if (rounds == kProgressBurst) return true;  // busy: look at the callers' requests, go on
  const ucs_status_t armed = ucp_worker_arm(ucp_->get());
  if (armed == UCS_ERR_BUSY) return true;  // events arrived meanwhile: progress them first
  int timeout = poll_timeout_ms();
  if (armed != UCS_OK) {
    HM_LOG_WARN("ucx rank {}: ucp_worker_arm failed: {}", directory_.rank(),
                ucs_status_string(armed));
    timeout = std::min(timeout, 10);
  }
  pollfd fds[2] = {{ucp_->event_fd(), POLLIN, 0}, {event_fd_, POLLIN, 0}};
  const int ready = ::poll(fds, 2, timeout);
  if (ready > 0 && (fds[1].revents & POLLIN) != 0) {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto got = ::read(event_fd_, &count, sizeof count);
  }
  return true;
}

void Engine::drain() {
  if (tearing_down_ || !ucp_) return;  // answering the last commands: UCX is gone
  for (int round = 0; round < kDrainRounds && ucp_worker_progress(ucp_->get()) != 0; ++round) {
  }
  run_later();
}

bool Engine::waits_for_live_peers() const {
  return std::any_of(in_flight_.begin(), in_flight_.end(),
                     [this](const auto& entry) { return alive(entry.second->peer); });
}

void Engine::run_commands() {
  std::vector<Command> batch;
  {
    std::lock_guard lock(commands_mutex_);
    batch.swap(commands_);
  }
  for (auto& command : batch) command();
}

void Engine::run_later() {
  while (!later_.empty()) {
    auto batch = std::move(later_);
    later_.clear();
    for (auto& work : batch) work();
  }
}

int Engine::poll_timeout_ms() const {
  auto until = Clock::now() + (in_flight_.empty() ? kIdleWakeup : kBusyWakeup);
  if (const auto connect_by = connect_waiters_.next_deadline())
    until = std::min(until, *connect_by);
  for (const auto& p : peers_) {
    if (p.sends_fail_at) until = std::min(until, *p.sends_fail_at);
  }
  if (closed_.closed()) until = std::min(until, shutdown_deadline_);
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left + 1, 0, 60000));
}

void Engine::check_deadlines() {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (!p.sends_fail_at || now < *p.sends_fail_at) continue;
    p.sends_fail_at.reset();
    // The peer is gone and has read nothing more for a while: UCP will not finish these.
    const int peer = static_cast<int>(i);
    for (const auto& [raw, op] : in_flight_) {
      if (op->kind == Op::Kind::kSend && op->peer == peer) {
        op->caller->complete(
            HM_ERR_PEER_FAILED,
            fmt::format("{} closed its ucx endpoint before taking this message", peer_name(peer)));
      }
    }
  }
  connect_waiters_.expire([this] {
    std::string missing;
    for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
      if (serves(static_cast<int>(peer)) && !peers_[peer].connected) {
        missing += (missing.empty() ? "" : ",") + std::to_string(peer);
      }
    }
    return fmt::format("ucx: could not connect to rank(s) {} within {} ms", missing,
                       options_.connect_timeout.count());
  });
}

void Engine::teardown() {
  tearing_down_ = true;
  if (ucp_ && waits_for_live_peers()) {
    HM_LOG_WARN(
        "ucx rank {}: {} UCX operation(s) still in flight {} ms after shutdown; "
        "destroying the worker",
        directory_.rank(), in_flight_.size(),
        std::chrono::duration_cast<std::chrono::milliseconds>(kShutdownFlushTimeout).count());
  }
  // Destroying the worker first stops UCP from touching any caller's buffer; requests it still
  // held may report through their callbacks meanwhile (op_done does nothing more then).
  if (ucp_) ucp_->close();
  const std::string why = closed_.closed() ? closed_.why() : "the ucx transport did not start";
  const hm_status_t status = closed_.closed() ? closed_.status() : HM_ERR_TRANSPORT;
  closed_.close(status, why);  // the commands answered below see a closed transport
  for (auto& [raw, op] : in_flight_) {
    if (op->caller) op->caller->complete(status, why);
  }
  in_flight_.clear();
  auto receives = std::move(receives_);
  receives_.clear();
  for (auto& [matched, receive] : receives) receive->caller->complete(status, why);
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  // From here on callers are answered at once; take what they handed over meanwhile.
  std::vector<Command> rest;
  {
    std::lock_guard lock(commands_mutex_);
    accepting_ = false;
    final_status_ = status;
    final_why_ = why;
    rest.swap(commands_);
  }
  for (auto& command : rest) command();
  {
    std::lock_guard lock(finished_mutex_);
    finished_ = true;
  }
  finished_cv_.notify_all();
}

// ---------------------------------------------------------------------------------------------
// UCP requests
// ---------------------------------------------------------------------------------------------

Engine::Op* Engine::launch(
    std::unique_ptr<Op> op,
    const std::function<ucs_status_ptr_t(Op&, ucp_request_param_t&)>& start) {
  Op* raw = op.get();
  raw->engine = this;
  in_flight_.emplace(raw, std::move(op));
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  if (raw->kind == Op::Kind::kReceive) {
    param.cb.recv_am = &Engine::receive_callback;
  } else {
    param.cb.send = &Engine::send_callback;
  }
  if (raw->kind == Op::Kind::kSend || raw->kind == Op::Kind::kReceive) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = UCS_MEMORY_TYPE_HOST;
  }
  param.user_data = raw;
  const ucs_status_ptr_t request = start(*raw, param);
  if (request == nullptr) {
    op_done(raw, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    op_done(raw, UCS_PTR_STATUS(request));
  }
  // Otherwise the callback reports; `raw` stays valid until then.
  return raw;
}

void Engine::send_callback(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->engine->op_done(op, status);
  ucp_request_free(request);
}

void Engine::receive_callback(void* request, ucs_status_t status, std::size_t, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  op->engine->op_done(op, status);
  ucp_request_free(request);
}

void Engine::op_done(Op* raw, ucs_status_t status) {
  auto node = in_flight_.extract(raw);
  if (node.empty()) return;
  const std::unique_ptr<Op> op = std::move(node.mapped());
  if (tearing_down_) {
    if (op->caller) op->caller->complete(closed_.status(), closed_.why());
    return;
  }
  switch (op->kind) {
    case Op::Kind::kSend:
      send_done(*op, status);
      break;
    case Op::Kind::kReceive:
      receive_done(*op, status);
      break;
    case Op::Kind::kFlush:
      flush_done(*op, status);
      break;
    case Op::Kind::kGoodbye:
    case Op::Kind::kClose:
      if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        HM_LOG_DEBUG("ucx rank {}: closing the endpoint to rank {}: {}", directory_.rank(),
                     op->peer, ucs_status_string(status));
      }
      break;
  }
}

void Engine::send_done(Op& op, ucs_status_t status) {
  if (closed_.closed()) {
    op.caller->complete(closed_.status(), closed_.why());
    return;
  }
  const auto& peer = peers_[static_cast<std::size_t>(op.peer)];
  if (peer.failure.failed()) {
    op.caller->complete(peer.failure.status, peer.failure.message);
  } else if (status == UCS_OK) {
    op.caller->complete();
  } else if (peer.gone) {
    op.caller->complete(
        HM_ERR_PEER_FAILED,
        fmt::format("{} closed its ucx endpoint before taking this message", peer_name(op.peer)));
  } else {
    const auto message =
        fmt::format("ucx: sending to {} failed: {}", peer_name(op.peer), ucs_status_string(status));
    op.caller->complete(HM_ERR_PEER_FAILED, message);
    later_.push_back(
        [this, p = op.peer, message] { fail_peer_now(p, HM_ERR_PEER_FAILED, message); });
  }
}

void Engine::receive_done(Op& op, ucs_status_t status) {
  if (op.receive) --op.receive->writers;
  if (status == UCS_OK) {
    if (!closed_.closed()) matcher_.landed(op.peer, op.fragment, op.landing);
  } else if (!closed_.closed()) {
    const auto message =
        fmt::format("ucx: receiving a {}-byte message from {} failed: {}", op.fragment.total,
                    peer_name(op.peer), ucs_status_string(status));
    later_.push_back(
        [this, p = op.peer, message] { fail_peer_now(p, HM_ERR_PEER_FAILED, message); });
  }
  if (op.receive && op.receive->writers == 0 && op.receive->matched->done()) {
    finish_receive(op.receive);
  }
}

void Engine::flush_done(Op& op, ucs_status_t status) {
  auto& peer = peers_[static_cast<std::size_t>(op.peer)];
  peer.flushing = false;
  if (status == UCS_OK && !peer.failure.failed() && peer.ep != nullptr) {
    peer.connected = true;
    describe_link(op.peer);
  } else if (status != UCS_OK && !closed_.closed() && !peer.failure.failed()) {
    const auto message =
        fmt::format("ucx: cannot connect to {}: {}", peer_name(op.peer), ucs_status_string(status));
    later_.push_back([this, p = op.peer, message] { fail_peer_now(p, HM_ERR_TRANSPORT, message); });
  }
  check_connected();
}

// ---------------------------------------------------------------------------------------------
// Arriving messages
// ---------------------------------------------------------------------------------------------

ucs_status_t Engine::message_callback(void* arg, const void* header, std::size_t header_length,
                                      void* data, std::size_t length,
                                      const ucp_am_recv_param_t* param) {
  auto* engine = static_cast<Engine*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  try {
    return engine->on_message(header, header_length, data, length, rendezvous);
  } catch (const std::exception& e) {
    // Nothing may unwind through UCX. Out of memory for an unexpected message is the likely one.
    HM_LOG_ERROR("ucx rank {}: dropped an arriving message: {}", engine->directory_.rank(),
                 e.what());
    return rendezvous ? UCS_ERR_NO_MEMORY : UCS_OK;
  }
}

ucs_status_t Engine::on_message(const void* header, std::size_t header_length, void* data,
                                std::size_t length, bool rendezvous) {
  // A rendezvous message refused with an error fails the sender's send with that status; an
  // eager one is simply dropped.
  const auto refuse = [rendezvous](ucs_status_t why) { return rendezvous ? why : UCS_OK; };
  const auto h = AmHeader::decode(
      {static_cast<const std::uint8_t*>(header), header != nullptr ? header_length : 0});
  if (!h || h->cookie != cookie_) {
    if (!warned_foreign_) {
      warned_foreign_ = true;
      HM_LOG_WARN(
          "ucx rank {}: dropped a message that is not from this communicator (bad header "
          "or another job's token)",
          directory_.rank());
    }
    return refuse(UCS_ERR_REJECTED);
  }
  if (closed_.closed()) return refuse(UCS_ERR_CANCELED);
  const int peer = static_cast<int>(h->sender);
  const bool peers_known = !peers_.empty();
  if (peers_known && !serves(peer)) {
    HM_LOG_WARN(
        "ucx rank {}: dropped a message claiming to come from rank {}, not a peer served "
        "by ucx",
        directory_.rank(), peer);
    return refuse(UCS_ERR_REJECTED);
  }
  if (h->kind == AmKind::kGoodbye) {
    // At once (it makes no UCP call): what the peer refuses after it must find it gone.
    peer_said_goodbye(peer);
    return UCS_OK;
  }
  if (h->total != length || h->total > kMaxMessageBytes) {
    protocol_error(peer, fmt::format("rank {} sent a {}-byte message whose header says {} bytes",
                                     peer, length, h->total));
    return refuse(UCS_ERR_REJECTED);
  }
  if (peers_known) {
    const auto& p = peers_[static_cast<std::size_t>(peer)];
    if (p.failure.failed()) return refuse(UCS_ERR_CANCELED);
  }
  const FragmentHeader fragment{h->tag, h->signature, h->total, 0, h->total};
  if (!rendezvous) {
    if (!matcher_.deliver(peer, fragment, {static_cast<const std::byte*>(data), length})) {
      protocol_error(peer, fmt::format("rank {} sent a second message with tag {:#x} of another "
                                       "size",
                                       peer, h->tag));
    }
    return UCS_OK;
  }
  const auto landing = matcher_.land(peer, fragment);
  if (!landing) {
    protocol_error(peer, fmt::format("rank {} sent a second message with tag {:#x} of another size",
                                     peer, h->tag));
    return UCS_ERR_REJECTED;
  }
  if (landing->target == nullptr) return UCS_OK;  // a mismatch, reported to the receive: drop it
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kReceive;
  op->peer = peer;
  op->fragment = fragment;
  op->landing = *landing;
  if (landing->request) {
    if (auto it = receives_.find(landing->request.get()); it != receives_.end()) {
      op->receive = it->second;
      ++op->receive->writers;
    }
  }
  launch(std::move(op), [this, data, length](Op& o, ucp_request_param_t& param) {
    return ucp_am_recv_data_nbx(ucp_->get(), data, o.landing.target, length, &param);
  });
  return UCS_INPROGRESS;  // UCP owns the descriptor now
}

void Engine::protocol_error(int peer, std::string message) {
  later_.push_back([this, peer, message = std::move(message)] {
    if (!closed_.closed() && serves(peer)) {
      fail_peer_now(peer, HM_ERR_TRANSPORT,
                    fmt::format("ucx: {}; this rank stops talking to it", message));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Commands from callers
// ---------------------------------------------------------------------------------------------

void Engine::install_peers(std::vector<std::vector<std::uint8_t>> addresses) {
  peers_.resize(addresses.size());
  for (std::size_t i = 0; i < addresses.size(); ++i) peers_[i].address = std::move(addresses[i]);
  auto early = std::move(early_goodbyes_);
  early_goodbyes_.clear();
  for (const int peer : early) {
    if (serves(peer)) peer_said_goodbye(peer);
  }
}

void Engine::start_send(int peer, std::uint64_t tag, std::uint32_t signature,
                        std::span<const std::byte> data, const CompletionPtr& caller) {
  if (closed_.fail(caller)) return;
  if (!serves(peer)) {
    caller->complete(HM_ERR_INTERNAL,
                     fmt::format("ucx does not carry the traffic to rank {}", peer));
    return;
  }
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.gone && !p.failure.failed()) {
    caller->complete(HM_ERR_PEER_FAILED,
                     fmt::format("{} closed its ucx endpoint; this message cannot be delivered",
                                 peer_name(peer)));
    return;
  }
  const ucp_ep_h ep = endpoint(peer);
  if (ep == nullptr) {
    caller->complete(p.failure.status, p.failure.message);
    return;
  }
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kSend;
  op->peer = peer;
  op->caller = caller;
  AmHeader header;
  header.cookie = cookie_;
  header.sender = static_cast<std::uint32_t>(directory_.rank());
  header.kind = AmKind::kData;
  header.tag = tag;
  header.signature = signature;
  header.total = data.size();
  op->header = header.encode();
  launch(std::move(op), [ep, data](Op& o, ucp_request_param_t& param) {
    return ucp_am_send_nbx(ep, kAmId, o.header.data(), o.header.size(), data.data(), data.size(),
                           &param);
  });
}

void Engine::start_recv(int peer, std::uint64_t tag, std::uint32_t signature,
                        std::span<std::byte> data, const CompletionPtr& caller) {
  if (closed_.fail(caller)) return;
  if (!serves(peer)) {
    caller->complete(HM_ERR_INTERNAL,
                     fmt::format("ucx does not carry the traffic from rank {}", peer));
    return;
  }
  auto receive = std::make_shared<PostedReceive>();
  receive->caller = caller;
  receive->matched = std::make_shared<Completion>();
  const Completion* key = receive->matched.get();
  receives_.emplace(key, receive);
  receive->matched->on_complete([this, key](const Completion&) { matched_done(key); });
  if (matcher_.post(peer, tag, signature, data, receive->matched)) return;  // it was here
  const auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) {
    matcher_.fail_posted(peer, tag, p.failure.status, p.failure.message);
  } else if (p.gone) {
    matcher_.fail_posted(
        peer, tag, HM_ERR_PEER_FAILED,
        fmt::format("{} closed its ucx endpoint before sending this message", peer_name(peer)));
  }
}

void Engine::matched_done(const Completion* matched) {
  const auto it = receives_.find(matched);
  if (it == receives_.end()) return;
  if (it->second->writers == 0) finish_receive(std::shared_ptr<PostedReceive>(it->second));
}

void Engine::finish_receive(const std::shared_ptr<PostedReceive>& receive) {
  receives_.erase(receive->matched.get());
  receive->caller->complete(receive->matched->status(), receive->matched->message());
}

void Engine::start_connect(const CompletionPtr& done) {
  if (closed_.fail(done)) return;
  connect_waiters_.add(done, Deadline::after(options_.connect_timeout));
  for (std::size_t peer = 0; peer < peers_.size(); ++peer) {
    if (serves(static_cast<int>(peer))) connect_peer(static_cast<int>(peer));
  }
  check_connected();
}

void Engine::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        if (!serves(peer)) return ConnectWaiters::Peer::kNotServed;
        return peers_[static_cast<std::size_t>(peer)].connected ? ConnectWaiters::Peer::kConnected
                                                                : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (p.failure.failed() || !p.gone) return p.failure;
        return PeerFailure{HM_ERR_PEER_FAILED,
                           fmt::format("{} closed its ucx endpoint while this rank connected to it",
                                       peer_name(peer))};
      });
}

ucp_ep_h Engine::endpoint(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.ep != nullptr) return p.ep;
  if (p.failure.failed() || p.gone) return nullptr;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(p.address.data());
  // Mode "peer" would make UCX drop its shared memory lanes; failures are learnt otherwise.
  params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucp_ep_h ep = nullptr;
  const ucs_status_t status = ucp_ep_create(ucp_->get(), &params, &ep);
  if (status != UCS_OK) {
    fail_peer_now(peer, HM_ERR_TRANSPORT,
                  fmt::format("ucx: cannot create an endpoint to {}: {}", peer_name(peer),
                              ucs_status_string(status)));
    return nullptr;
  }
  p.ep = ep;
  connect_peer(peer);  // learn which lanes UCX chose once they are up
  return ep;
}

void Engine::connect_peer(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.connected || p.flushing || p.failure.failed() || p.gone) return;
  const ucp_ep_h ep = endpoint(peer);
  if (ep == nullptr || p.flushing || p.connected) return;
  p.flushing = true;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kFlush;
  op->peer = peer;
  launch(std::move(op),
         [ep](Op&, ucp_request_param_t& param) { return ucp_ep_flush_nbx(ep, &param); });
}

void Engine::describe_link(int peer) {
  auto lanes = endpoint_lanes(peers_[static_cast<std::size_t>(peer)].ep);
  std::lock_guard lock(links_mutex_);
  if (lanes.empty()) lanes = "worker " + worker_name_;
  links_[static_cast<std::size_t>(peer)] = std::move(lanes);
}

void Engine::close_endpoint(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.ep == nullptr) return;
  const ucp_ep_h ep = p.ep;
  p.ep = nullptr;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kClose;
  op->peer = peer;
  launch(std::move(op), [ep](Op&, ucp_request_param_t& param) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = 0;  // flush
    return ucp_ep_close_nbx(ep, &param);
  });
}

void Engine::say_goodbye(int peer) {
  const ucp_ep_h ep = peers_[static_cast<std::size_t>(peer)].ep;
  auto op = std::make_unique<Op>();
  op->kind = Op::Kind::kGoodbye;
  op->peer = peer;
  AmHeader header;
  header.cookie = cookie_;
  header.sender = static_cast<std::uint32_t>(directory_.rank());
  header.kind = AmKind::kGoodbye;
  op->header = header.encode();
  launch(std::move(op), [ep](Op& o, ucp_request_param_t& param) {
    return ucp_am_send_nbx(ep, kAmId, o.header.data(), o.header.size(), nullptr, 0, &param);
  });
}

void Engine::peer_said_goodbye(int peer) {
  if (closed_.closed()) return;
  if (peers_.empty()) {
    early_goodbyes_.insert(peer);
    return;
  }
  if (!serves(peer)) return;
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.gone || p.failure.failed()) return;
  p.gone = true;
  const auto message = fmt::format(
      "{} closed its ucx endpoint (communicator destroyed or process exiting) while this rank "
      "waits for data from it",
      peer_name(peer));
  HM_LOG_DEBUG("ucx rank {}: {}", directory_.rank(), message);
  matcher_.fail_peer(peer, HM_ERR_PEER_FAILED, message);
  // Sends in flight to it end by themselves while it closes (it refuses what reaches it then),
  // or fail after a grace period (check_deadlines).
  p.sends_fail_at = Clock::now() + kGoodbyeGrace;
  check_connected();
  failure_listener_(peer, HM_ERR_PEER_FAILED, message);
}

void Engine::fail_peer_now(int peer, hm_status_t status, const std::string& message) {
  if (closed_.closed() || !serves(peer)) return;
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) return;
  if (p.gone) {
    // It said goodbye already: the Router reports the close its control plane saw.
    HM_LOG_DEBUG("ucx rank {}: {}", directory_.rank(), message);
  } else {
    HM_LOG_WARN("ucx rank {}: {}", directory_.rank(), message);
  }
  p.failure.set(status, message);
  matcher_.fail_peer(peer, status, message);
  // Whatever UCP still holds for the peer is answered now. With error-handling mode "none" UCP
  // can neither cancel these requests nor force-close the endpoint; the peer is gone, so nothing
  // more arrives from it into a receive buffer and nothing more is read from a send buffer for
  // it, and the requests are dropped with the worker. The endpoint stays until then.
  std::vector<Op*> held;
  for (const auto& [raw, op] : in_flight_) {
    if (op->peer == peer) held.push_back(raw);
  }
  for (Op* raw : held) {
    if (raw->caller) raw->caller->complete(status, message);
    if (raw->receive) raw->receive->caller->complete(status, message);
  }
  check_connected();
  failure_listener_(peer, status, message);
}

void Engine::begin_shutdown(hm_status_t status, const std::string& why) {
  if (closed_.closed()) return;
  // Take in what has arrived first: a peer's goodbye waiting there spares it a goodbye to a
  // worker that is gone.
  drain();
  closed_.close(status, why);
  shutdown_deadline_ = Clock::now() + kShutdownFlushTimeout;
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  // Tell every served peer that nothing more will come (one that never heard from this rank may
  // still wait for a message from it), then flush: the close completes once UCP has delivered
  // the goodbye and let go of every send buffer.
  // Endpoints of failed or closed peers are left to the worker's destruction: a flush could
  // wait forever for them, and mode "none" allows no forced close.
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    const int peer = static_cast<int>(i);
    if (!serves(peer) || !alive(peer) || endpoint(peer) == nullptr) continue;
    say_goodbye(peer);
    close_endpoint(peer);
  }
}

// ---------------------------------------------------------------------------------------------
// The transport: a thin owner of the engine and its thread.
// ---------------------------------------------------------------------------------------------

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportOptions& options)
      : engine_(std::make_shared<Engine>(options)) {
    auto started = std::make_shared<std::promise<void>>();
    auto ready = started->get_future();
    thread_.start([engine = engine_, started] { engine->run(*started); });
    if (ready.wait_for(kStartTimeout) != std::future_status::ready) {
      // The thread keeps its own reference to the engine and ends by itself once UCX returns.
      thread_.detach();
      fail(HM_ERR_TIMEOUT, "ucx: UCX did not start within {} s", kStartTimeout.count());
    }
    try {
      ready.get();
    } catch (...) {
      thread_.join();
      throw;
    }
  }

  ~UcxTransport() override {
    engine_->shutdown(HM_ERR_ABORTED, "the communicator was destroyed", true);
    if (engine_->on_progress_thread() || engine_->running_turn()) {
      // Destroyed from one of its own callbacks (on the progress thread or in a driving
      // caller's turn, which the thread waits to take over): it ends by itself.
      thread_.detach();
    } else {
      thread_.join();
    }
  }

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
  void shutdown(hm_status_t status, const std::string& why, bool wait) override {
    engine_->shutdown(status, why, wait);
  }
  LinkProperties link(int peer) const override { return engine_->link(peer); }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override {
    engine_->fail_peer(peer, status, message);
  }
  void set_peer_failure_listener(PeerFailureListener listener) override {
    engine_->set_peer_failure_listener(std::move(listener));
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

}  // namespace

bool ucx_available(std::string* why) {
  // Checked once per process (a function-local static): opening a UCP context costs
  // milliseconds, every communicator asks, and the answer does not change while the process runs.
  static const std::string problem = probe_ucp();
  if (why != nullptr) *why = problem;
  return problem.empty();
}

std::unique_ptr<Transport> make_ucx_transport(const TransportOptions& options) {
  return std::make_unique<UcxTransport>(options);
}

}  // namespace holmes::ucx
