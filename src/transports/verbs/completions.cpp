#include "transports/verbs/transport.hpp"

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::verbs {

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

void VerbsTransport::after_activity(Connection& c) {
  if (c.usable() && !closed_.closed()) {
    if (c.outbound) pump(c.peer);
    maybe_send_credit(c);
  }
  post_goodbye(c);
  check_goodbyes();
}

}  // namespace holmes::verbs
