// hm_comm_shrink: the ranks that remain build a communicator without the lost ones. They meet
// through the world's store (the old communicator may be broken, so nothing goes through it),
// agree on who is left out (shrink_agreement.hpp) and wire the new communicator among
// themselves as a split does, keeping their order.
#include <algorithm>
#include <thread>

#include "bootstrap/rendezvous.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/shaping.hpp"
#include "communicator/shrink_agreement.hpp"
#include "communicator/store_exchange.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// A suspected rank (its connections closed) may still be alive: one that revoked without its
// notice arriving, or one that failed a call and said so. It gets this long to show up.
constexpr std::chrono::milliseconds kSuspectGrace{1000};
constexpr std::chrono::milliseconds kStorePoll{5};
// Rounds after the first are for ranks that died during the agreement; each costs up to a few
// timeouts, so a handful bounds the call.
constexpr int kMaxRounds = 4;

}  // namespace

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::shrink(std::span<const int> exclude,
                                                           int flags) {
  {
    std::lock_guard lock(state_mutex_);
    if (closed_) fail(HM_ERR_ABORTED, "hm_comm_shrink: the communicator was destroyed");
  }
  require(flags == HM_SHRINK_DEFAULT || flags == HM_SHRINK_FAILED,
          "hm_comm_shrink: unknown flags {} (valid: HM_SHRINK_DEFAULT, HM_SHRINK_FAILED)", flags);
  if (!store_) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "hm_comm_shrink: this communicator was not created through a store, so its survivors "
         "have nowhere to meet");
  }
  std::set<int> out;
  for (int r : exclude) {
    require(r >= 0 && r < size_, "hm_comm_shrink: excluded rank {} is outside [0, {})", r, size_);
    out.insert(r);
  }
  const bool agree = flags == HM_SHRINK_FAILED;
  const std::uint64_t index = shrinks_++;
  const std::string prefix = fmt::format("holmes/{}/shrink{}/", context_, index);
  if (out.contains(rank_)) {
    fail(HM_ERR_ABORTED, "hm_comm_shrink: this rank (rank {}) is in the exclude list", rank_);
  }
  // The old communicator is done with: no call on it may wait for its timeout any more, here or
  // at any peer that has not noticed the failure yet.
  if (agree) revoke_because(fmt::format("rank {} is shrinking the communicator", rank_));

  ShrinkAgreementOptions options;
  options.prefix = prefix;
  options.rank = rank_;
  options.size = size_;
  options.timeout = timeout_;
  options.grace = std::min(kSuspectGrace, timeout_);
  options.poll = kStorePoll;
  ShrinkAgreement agreement(*store_, options);
  const auto suspected = [this] {
    std::lock_guard lock(state_mutex_);
    return suspects_;
  };
  const auto no_suspects = [] { return std::set<int>{}; };
  for (int round = 0;; ++round) {
    const std::set<int> left_out =
        agreement.decide(round, out,
                         agree ? std::function<std::set<int>()>(suspected)
                               : std::function<std::set<int>()>(no_suspects));
    if (left_out.contains(rank_)) {
      fail(HM_ERR_ABORTED,
           "hm_comm_shrink: the other ranks left this rank (rank {}) out of the new communicator "
           "(left out: [{}]): it is no longer part of the job",
           rank_, ShrinkAgreement::format_ranks(left_out));
    }
    if (!agree && left_out != out) {
      fail(HM_ERR_MISMATCH,
           "hm_comm_shrink: the ranks leave out [{}], this rank (rank {}) excludes [{}]: every "
           "rank must pass the same list (or HM_SHRINK_FAILED to leave failed ranks out too)",
           ShrinkAgreement::format_ranks(left_out), rank_, ShrinkAgreement::format_ranks(out));
    }
    std::vector<int> members;
    for (int r = 0; r < size_; ++r) {
      if (!left_out.contains(r)) members.push_back(r);
    }
    std::set<int> missing;
    const auto started = std::chrono::steady_clock::now();
    try {
      auto shrunk = wire_shrunk(members, fmt::format("{}round{}/", prefix, round), missing);
      HM_LOG_INFO(
          "rank {}: shrunk to {} of {} ranks in round {} (left out: [{}]; wiring {:.0f} ms)", rank_,
          members.size(), size_, round, ShrinkAgreement::format_ranks(left_out),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
              .count());
      return shrunk;
    } catch (const Error& e) {
      if (!agree || round + 1 >= kMaxRounds) throw;
      // A member died after the decision: the next round leaves it out.
      HM_LOG_WARN("rank {}: shrink round {} failed ({}); missing [{}]: next round", rank_, round,
                  e.what(), ShrinkAgreement::format_ranks(missing));
      out.insert(left_out.begin(), left_out.end());
      out.insert(missing.begin(), missing.end());
    }
  }
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::wire_shrunk(const std::vector<int>& members,
                                                                const std::string& prefix,
                                                                std::set<int>& missing) {
  const auto it = std::find(members.begin(), members.end(), rank_);
  const int new_rank = static_cast<int>(it - members.begin());
  const int new_size = static_cast<int>(members.size());
  const Deadline deadline = Deadline::after(timeout_);
  int exchange = 0;
  const GatherStrings gather = [&](const std::string& mine) {
    return store_gather(*store_, fmt::format("{}exchange{}/", prefix, exchange++), new_rank,
                        new_size, mine, deadline, members, &missing);
  };
  return derive(new_rank, new_size, fmt::format("{}/{}", context_, prefix), gather, deadline,
                Lineage::kSubset);
}

}  // namespace holmes::detail
