// What a thread waiting for one of a transport's requests calls (Completion::wait_until) to do
// the transport's work itself instead of waiting for the transport's thread: shm runs passes of
// its progress loop, tcp runs its io_context. Requests may outlive the transport, so they hold
// this small object, which the transport detaches before it goes.
//
// `Owner` (the transport) has start_polling(), poll(awaited) and stop_polling(bool satisfied) with
// the meaning of Progress's.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "core/completion.hpp"

namespace holmes {

template <typename Owner>
class CallerProgress final : public Progress {
 public:
  explicit CallerProgress(Owner& owner) : owner_(&owner) {}
  void start_polling() override {
    with_owner([](Owner& owner) { owner.start_polling(); });
  }
  void poll(const Completion* awaited) override {
    with_owner([awaited](Owner& owner) { owner.poll(awaited); });
  }
  void stop_polling(bool satisfied) override {
    with_owner([satisfied](Owner& owner) { owner.stop_polling(satisfied); });
  }
  // From here on calls do nothing; returns once none is inside the owner.
  void detach() {
    std::unique_lock alive(alive_);
    owner_ = nullptr;
  }

 private:
  template <typename Call>
  void with_owner(Call call) {
    std::shared_lock alive(alive_);
    if (owner_ != nullptr) call(*owner_);
  }

  std::shared_mutex alive_;
  Owner* owner_;
};

}  // namespace holmes
