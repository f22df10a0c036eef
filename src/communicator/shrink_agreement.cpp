#include "communicator/shrink_agreement.hpp"

#include <algorithm>
#include <charconv>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// Between looks at the store the pause doubles up to this: a store request is a round trip, and
// a wait of seconds needs no finer grain.
constexpr std::chrono::milliseconds kLongestPoll{50};
// A value this rank reads right after seeing its counter raised: it was set before the counter.
constexpr std::chrono::milliseconds kWrittenBefore{5000};

}  // namespace

ShrinkAgreement::ShrinkAgreement(Rendezvous& store, ShrinkAgreementOptions options)
    : store_(store), options_(std::move(options)) {}

std::string ShrinkAgreement::key(int round, const std::string& name) const {
  return fmt::format("{}round{}/{}", options_.prefix, round, name);
}

std::string ShrinkAgreement::format_ranks(const std::set<int>& ranks) {
  std::string out;
  for (int r : ranks) {
    if (!out.empty()) out += ' ';
    out += std::to_string(r);
  }
  return out;
}

std::set<int> ShrinkAgreement::parse_ranks(const std::string& text, int size,
                                           const std::string& what) {
  std::set<int> ranks;
  const char* p = text.data();
  const char* end = p + text.size();
  while (p < end) {
    if (*p == ' ') {
      ++p;
      continue;
    }
    int r = -1;
    const auto [next, ec] = std::from_chars(p, end, r);
    if (ec != std::errc{} || r < 0 || r >= size || (next < end && *next != ' ')) {
      fail(HM_ERR_TRANSPORT, "{} is malformed: '{}' (ranks in [0, {}) expected)", what,
           text.substr(0, 200), size);
    }
    ranks.insert(r);
    p = next;
  }
  return ranks;
}

bool ShrinkAgreement::await_counted(Rendezvous& store, const std::string& key,
                                    const Deadline& deadline, std::chrono::milliseconds poll) {
  GrowingPause pause(poll, kLongestPoll);
  while (!store.counted(key)) {
    if (deadline.expired()) return false;
    pause.sleep(deadline);
  }
  return true;
}

std::set<int> ShrinkAgreement::decide(int round, const std::set<int>& out,
                                      const std::function<std::set<int>()>& suspected) {
  const int rank = options_.rank;
  const int size = options_.size;
  // The view before the counter: whoever sees this rank alive can read its view at once.
  store_.set(key(round, fmt::format("view/{}", rank)), format_ranks(out));
  store_.add(key(round, fmt::format("alive/{}", rank)), 1);
  const auto decided = [&] { return store_.counted(key(round, "decided")); };

  const auto start = Clock::now();
  std::set<int> left = out;  // every view read so far
  std::vector<bool> seen(static_cast<std::size_t>(size), false);
  seen[static_cast<std::size_t>(rank)] = true;
  GrowingPause pause(options_.poll, kLongestPoll);
  while (!decided()) {
    const std::set<int> suspects = suspected();
    const auto waited = Clock::now() - start;
    bool waiting = false;
    for (int j = 0; j < size; ++j) {
      if (seen[static_cast<std::size_t>(j)] || left.contains(j)) continue;
      if (store_.counted(key(round, fmt::format("alive/{}", j)))) {
        seen[static_cast<std::size_t>(j)] = true;
        const std::string view_key = key(round, fmt::format("view/{}", j));
        const auto theirs = parse_ranks(store_.get(view_key, Deadline::after(kWrittenBefore)), size,
                                        "the view of rank " + std::to_string(j));
        left.insert(theirs.begin(), theirs.end());
        continue;
      }
      const auto limit = suspects.contains(j) ? options_.grace : options_.timeout;
      waiting = waiting || waited < limit;
    }
    if (!waiting) break;
    pause.sleep();
  }

  // The first to finish waiting proposes; the store orders the adds, so there is one proposal.
  if (!decided() && store_.add(key(round, "proposals"), 1) == 1) {
    std::set<int> proposal = left;
    for (int j = 0; j < size; ++j) {
      if (!seen[static_cast<std::size_t>(j)]) proposal.insert(j);
    }
    proposal.erase(rank);  // this rank is here; a view that leaves it out is in `left` already
    for (int r : left) proposal.insert(r);
    store_.set(key(round, "decision"), format_ranks(proposal));
    store_.add(key(round, "decided"), 1);
    HM_LOG_INFO("rank {}: shrink round {} proposed leaving out [{}]", rank, round,
                format_ranks(proposal));
  }
  if (!await_counted(store_, key(round, "decided"), Deadline::after(options_.timeout),
                     options_.poll)) {
    fail(HM_ERR_TIMEOUT, "shrink round {}: no decision within {} ms (its proposer stopped)", round,
         options_.timeout.count());
  }
  return parse_ranks(store_.get(key(round, "decision"), Deadline::after(kWrittenBefore)), size,
                     fmt::format("the decision of shrink round {}", round));
}

}  // namespace holmes::detail
