// How the survivors of a communicator agree on who is left out of it (hm_comm_shrink with
// HM_SHRINK_FAILED), through the job's store, which outlives the ranks it serves when it runs
// outside them.
//
// One agreement is a sequence of rounds; the first that wires a communicator ends it. In round r
// every rank that takes part writes its view (the ranks it leaves out: the caller's `exclude` and
// the ones it saw fail) and raises its "alive" counter. It then waits for the other ranks to
// raise theirs: each rank nobody suspects for up to the timeout (it may be slow to notice the
// failure), a rank that some view or this rank's router suspects (its connections closed) only
// for a short grace. The first rank to finish waiting proposes: the union of every view it read
// and of the ranks that never came. The store takes exactly one proposal per round (the first
// add of the round's counter), so every survivor reads the same decision, whenever it arrived;
// a rank that arrives after the decision reads it too, and one the decision leaves out learns it
// was left out.
//
// A rank can die after the decision, while the survivors wire the new communicator: their
// wiring then times out on it (every step is bounded) and they go to the next round, in which
// it no longer raises its counter. A proposer that dies between its add and its decision leaves
// the round undecided: the others give up on it after the timeout and go to the next round.
#pragma once

#include <chrono>
#include <functional>
#include <set>
#include <string>

#include "bootstrap/rendezvous.hpp"
#include "core/clock.hpp"

namespace holmes::detail {

struct ShrinkAgreementOptions {
  std::string prefix;  // store keys of this agreement (unique per communicator and shrink)
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{30000};  // the longest wait for a rank nobody suspects
  std::chrono::milliseconds grace{1000};     // the longest wait for a suspected rank
  std::chrono::milliseconds poll{10};        // first pause between looks at the store
};

class ShrinkAgreement {
 public:
  ShrinkAgreement(Rendezvous& store, ShrinkAgreementOptions options);

  // Round `round`: the ranks left out, the same set on every rank that takes part. `out`: the
  // ranks this rank leaves out; `suspected()` (asked again while waiting): the ranks this rank's
  // transports saw fail. Throws HM_ERR_TIMEOUT when the round was not decided in time (go on to
  // the next round).
  std::set<int> decide(int round, const std::set<int>& out,
                       const std::function<std::set<int>()>& suspected);

  // Waits until the counter at `key` is above zero; false at the deadline. Looks at the store
  // every `poll`, then less often.
  static bool await_counted(Rendezvous& store, const std::string& key, const Deadline& deadline,
                            std::chrono::milliseconds poll);

  // "1 4 7" and back; parse() throws HM_ERR_TRANSPORT on anything but ranks in [0, size).
  static std::string format_ranks(const std::set<int>& ranks);
  static std::set<int> parse_ranks(const std::string& text, int size, const std::string& what);

 private:
  std::string key(int round, const std::string& name) const;

  Rendezvous& store_;
  ShrinkAgreementOptions options_;
};

}  // namespace holmes::detail
