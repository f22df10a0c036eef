#include "transports/ucx/transport.hpp"

#include <future>

#include "core/status.hpp"

namespace holmes::ucx {

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

UcxTransport::UcxTransport(const UcxConfig& config) : engine_(std::make_shared<Engine>(config)) {
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

UcxTransport::~UcxTransport() {
  engine_->shutdown(HM_ERR_ABORTED, "the communicator was destroyed", ShutdownWait::kUntilReleased);
  if (engine_->on_progress_thread() || engine_->running_turn()) {
    // Destroyed from one of its own callbacks (on the progress thread or in a driving
    // caller's turn, which the thread waits to take over): it ends by itself.
    thread_.detach();
  } else {
    thread_.join();
  }
}

bool ucx_available(std::string* why) {
  // Checked once per process (a function-local static): opening a UCP context costs
  // milliseconds, every communicator asks, and the answer does not change while the process runs.
  static const std::string problem = probe_ucp();
  if (why != nullptr) *why = problem;
  return problem.empty();
}

std::unique_ptr<Transport> make_ucx_transport(const TransportOptions& options,
                                              const UcxChoices& choices) {
  return std::make_unique<UcxTransport>(ucx_config(options, choices));
}

}  // namespace holmes::ucx
