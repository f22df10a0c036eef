// The progress of several transports as one: what a router's caller polls while it waits, when
// it drives every transport that carries the communicator's traffic (Router::begin_caller_drive).
// A wait on one carrier must keep the others going too: their peers skip waking this rank's
// transport threads while it drives, so nothing else would read what they send meanwhile.
#pragma once

#include <utility>
#include <vector>

#include "core/completion.hpp"

namespace holmes {

class CombinedProgress final : public Progress {
 public:
  // `parts` must outlive this object (they belong to the transports the router owns).
  explicit CombinedProgress(std::vector<Progress*> parts) : parts_(std::move(parts)) {}

  void start_polling() override {
    for (Progress* p : parts_) p->start_polling();
  }
  // Every part, even once `awaited` is done: the others' peers count on this rank reading.
  void poll(const Completion* awaited) override {
    for (Progress* p : parts_) p->poll(awaited);
  }
  // Not satisfied: the caller is about to sleep, so every part hands over to its own thread.
  void stop_polling(bool satisfied) override {
    for (Progress* p : parts_) p->stop_polling(satisfied);
  }

 private:
  std::vector<Progress*> parts_;
};

}  // namespace holmes
