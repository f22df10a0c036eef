#include "transports/ucx/transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::ucx {

Engine::Engine(const UcxConfig& config)
    : config_(config), cookie_(am_cookie(config.token, config.context)) {
  event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (event_fd_ < 0) {
    fail(HM_ERR_TRANSPORT, "ucx: cannot create an eventfd: {}", std::strerror(errno));
  }
}

Engine::~Engine() {
  progress_.detach_callers();
  if (event_fd_ >= 0) ::close(event_fd_);
}

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
  ucp_.emplace(config_);
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
                       config_.connect_timeout.count());
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

}  // namespace holmes::ucx
