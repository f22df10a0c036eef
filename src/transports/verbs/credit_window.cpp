#include "transports/verbs/credit_window.hpp"

#include <algorithm>

#include "core/status.hpp"

namespace holmes::verbs {

CreditWindow::CreditWindow(std::uint32_t peer_slots, std::uint32_t own_slots)
    : peer_slots_(peer_slots), threshold_(std::max<std::uint32_t>(2, own_slots / 2)) {
  if (peer_slots < kMinSlots || own_slots < kMinSlots) {
    fail(HM_ERR_INTERNAL, "verbs: a queue pair needs at least {} receive slots at each end",
         kMinSlots);
  }
}

bool CreditWindow::can_send(MessageKind kind) const {
  switch (kind) {
    case MessageKind::kData:
      return credits() >= 3;
    case MessageKind::kCredit:
      return credits() >= 2;
    case MessageKind::kGoodbye:
      return credits() >= 1;
  }
  return false;
}

void CreditWindow::on_send() {
  if (in_use_ >= peer_slots_) fail(HM_ERR_INTERNAL, "verbs: a message was sent without a credit");
  ++in_use_;
}

bool CreditWindow::on_grant(std::uint32_t n) {
  if (n > in_use_) return false;
  in_use_ -= n;
  return true;
}

std::uint32_t CreditWindow::take_owed() {
  const std::uint32_t n = owed_;
  owed_ = 0;
  return n;
}

}  // namespace holmes::verbs
