// Receives from any source (HM_ANY_SOURCE): the router's ArrivalOrder tells each such receive
// which message is its own (the first with its tag to arrive that no receive has taken); the
// receive of that message is then posted on its peer's transport like any other, whose matcher
// holds the message as unexpected data until then.
#include <fmt/format.h>

#include "communicator/communicator_impl.hpp"
#include "core/status.hpp"

namespace holmes::detail {

RequestImpl::~RequestImpl() {
  if (any && comm) comm->abandon_source(*this);
}

bool CommunicatorImpl::resolve_source(RequestImpl& r, bool block) {
  Completion& matched = r.any->ticket->matched;
  if (block && !matched.wait_until(Deadline::after(timeout_))) {
    const auto message =
        fmt::format("{} on rank {}: no message came within {} ms", r.what, rank_, timeout_.count());
    poison(HM_ERR_TIMEOUT, message);
    fail(HM_ERR_TIMEOUT, "{}", message);
  }
  if (!matched.done()) return false;
  if (matched.status() != HM_SUCCESS) {
    const auto message = fmt::format("{} on rank {}: {}", r.what, rank_, matched.message());
    poison(matched.status(), message);
    fail(matched.status(), "{}", message);
  }
  const AnySourceReceive any = *r.any;
  r.peer = any.ticket->peer;
  r.what += fmt::format(" (rank {})", r.peer);
  r.request = transport_->irecv(r.peer, any.ticket->tag, any.signature, any.into);
  r.any.reset();
  return true;
}

void CommunicatorImpl::abandon_source(RequestImpl& r) noexcept {
  if (transport_->arrivals().cancel(r.any->ticket)) return;
  const AnySourceReceive& any = *r.any;
  if (!any.ticket->matched.done() || any.ticket->matched.status() != HM_SUCCESS) return;
  // Its message is taken: it lands in the caller's buffer as a detached receive's would (a
  // device buffer's pinned slot, held by `finish`, stays until the receive is done with it).
  try {
    transport_->irecv(any.ticket->peer, any.ticket->tag, any.signature, any.into)
        ->on_complete([keep = std::move(r.finish)](const Completion&) {});
  } catch (...) {
    // The communicator is closing: nothing lands anywhere any more.
  }
}

}  // namespace holmes::detail
