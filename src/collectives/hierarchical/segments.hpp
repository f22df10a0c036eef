// The segment engine of the hierarchical collectives (allreduce, allgather, reduce-scatter):
// large messages are cut into segments, each on a thread of its own, that take the phases of
// the collective in turn, so that while one segment crosses the slow tier the islands work on
// the next (a pipeline). Also what every hierarchical collective shares: its phase numbers and
// where a rank sits in its island.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/context.hpp"
#include "collectives/pipeline.hpp"
#include "collectives/tuning.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::hier {

// Phases of one operation: distinct numbers keep their tags apart.
enum Phase : std::uint64_t { kFirst = 1, kSecond = 2 };

struct Place {
  int island = 0;    // index into Hierarchy::islands
  int position = 0;  // position in that island's member list
};

inline Place place_of(const Hierarchy& h, int rank) {
  const int island = h.island[static_cast<std::size_t>(rank)];
  const auto& members = h.islands[static_cast<std::size_t>(island)];
  const auto it = std::find(members.begin(), members.end(), rank);
  return {island, static_cast<int>(it - members.begin())};
}

inline int position_in(const std::vector<int>& members, int rank) {
  return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
}

// The segments of one collective take each phase in turn: segment s starts a phase once segment
// s-1 has finished it. So the first segment reaches the slow tier after its own share of the
// islands' work, and the slow tier carries one segment after another while the islands reduce
// the next ones and gather the previous ones: a pipeline. Segments let loose at once would
// share the CPU through the first phases (the slow link idle meanwhile) and all reach the slow
// link together. Every rank takes the same turns, and a turn waits only for lower segments in
// the same phase, so the order cannot deadlock. A segment that fails ends every wait (abort):
// the segments that were waiting stop with TurnAborted, and the failure reported is the one that
// caused it.
//
// A phase may be given a width W > 1: segments still enter it in order, but segment s enters
// once segments up to s-W have left it. The lanes' phase takes that on long links: a segment
// there ends one latency after its last bytes left, and its last step waits a latency for the
// step before, so one segment at a time leaves the link idle for latencies; W segments at once
// keep bandwidth x RTT in flight, and at least two, for the turnaround each ring step ends with
// (hierarchical_lane_window).
//
// A phase may also be given a lead: segment s enters it only once segment s-L has entered phase
// Q. Every phase of the hierarchical collectives takes one (L 1, Q the lanes), so that the
// islands work on the segment the slow tier needs next: without it, the islands' phases of the
// segments behind shared the cores and the island's link with it, and the lanes waited. (For a
// phase after Q it holds already: segments enter Q in order.) Segment s-L never waits for s, so
// the lead cannot deadlock; it is given only where every segment of this rank enters Q.
struct TurnAborted {};

struct PhaseLead {
  int segments = 0;         // L (0: no lead)
  std::uint64_t until = 0;  // Q
};

class PhaseTurns {
 public:
  // `phases`: the phases each segment takes (numbered from 0); `widths[p]`: how many segments
  // may be in phase p at once (1 where not given); `leads[p]`: phase p's lead (none where not
  // given); `progress` (may be nullptr) counts the communicator's completed transfers.
  PhaseTurns(std::size_t phases, std::chrono::milliseconds timeout,
             const std::atomic<std::uint64_t>* progress, std::vector<int> widths = {},
             std::vector<PhaseLead> leads = {})
      : timeout_(timeout),
        progress_(progress),
        widths_(std::move(widths)),
        leads_(std::move(leads)),
        entered_(phases, 0),
        left_below_(phases, 0),
        left_(phases) {
    widths_.resize(phases, 1);
    leads_.resize(phases);
    for (const PhaseLead& lead : leads_) {
      require(lead.segments <= 0 || lead.until < phases, "PhaseTurns: a lead past the last phase");
    }
  }

  // Waits for `segment`'s turn in `phase`. A phase of the segment before may rightly take longer
  // than the timeout (many transfers on a slow link, each within it), so the wait fails with
  // HM_ERR_TIMEOUT only after a whole timeout in which no transfer of the communicator completed.
  // Returns when the segment entered, read under the turns' lock so that the segments' entry
  // times into a phase are in their order even where several may be in it at once.
  std::chrono::steady_clock::time_point enter(std::uint64_t phase, int segment) {
    std::unique_lock lock(mutex_);
    auto transfers = [&] { return progress_ != nullptr ? progress_->load() : 0; };
    const PhaseLead& lead = leads_[phase];
    // The three conditions of a turn: the segments before it have entered the phase, few enough
    // of them are still in it, and the lead's segment has reached its phase.
    auto in_order = [&] { return entered_[phase] == segment; };
    auto has_room = [&] { return segment < left_below_[phase] + std::max(1, widths_[phase]); };
    auto led = [&] { return lead.segments <= 0 || segment - lead.segments < entered_[lead.until]; };
    auto turn = [&] { return aborted_ || (in_order() && has_room() && led()); };
    for (auto seen = transfers();;) {
      if (cv_.wait_for(lock, timeout_, turn)) break;
      if (transfers() == seen) {
        // Who it waits for: a segment before it to enter, one in the phase to leave, or the
        // lead's segment to enter its phase.
        const bool for_lead = in_order() && has_room();
        fail(HM_ERR_TIMEOUT,
             "hierarchical collective: segment {} waited {} ms to enter phase {} for segment {} "
             "to {} phase {}, and no transfer completed meanwhile",
             segment, timeout_.count(), phase,
             for_lead     ? segment - lead.segments
             : in_order() ? left_below_[phase]
                          : entered_[phase],
             in_order() && !for_lead ? "finish" : "enter", for_lead ? lead.until : phase);
      }
      seen = transfers();
    }
    if (aborted_) throw TurnAborted{};
    ++entered_[phase];
    const auto entered = std::chrono::steady_clock::now();
    lock.unlock();
    cv_.notify_all();  // the next segment may enter beside this one
    return entered;
  }
  void leave(std::uint64_t phase, int segment) {
    {
      std::lock_guard lock(mutex_);
      auto& left = left_[phase];
      if (left.size() <= static_cast<std::size_t>(segment)) left.resize(segment + 1, false);
      left[static_cast<std::size_t>(segment)] = true;
      while (static_cast<std::size_t>(left_below_[phase]) < left.size() &&
             left[static_cast<std::size_t>(left_below_[phase])]) {
        ++left_below_[phase];
      }
    }
    cv_.notify_all();
  }
  void abort() {
    {
      std::lock_guard lock(mutex_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::chrono::milliseconds timeout_;
  const std::atomic<std::uint64_t>* progress_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> widths_;
  std::vector<PhaseLead> leads_;
  std::vector<int> entered_;             // per phase: segments that have entered it
  std::vector<int> left_below_;          // per phase: segments 0 .. this-1 have all left it
  std::vector<std::vector<bool>> left_;  // per phase and segment: has left it
  bool aborted_ = false;
};

// When each phase of each segment waited for its turn, started and ended, kept while the log
// takes debug lines (HOLMES_LOG_LEVEL=debug): how long the slow tier waited for the islands at
// the start of the call, how long it carried data, and how long the islands worked after it,
// seen from this rank: where a hierarchical allreduce that misses the slow tier's bound lost
// its time.
class PhaseTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  using PhaseName = const char* (*)(std::uint64_t phase);

  // `what` names the collective in the log ("hierarchical allreduce"); `lanes_phase` is the
  // phase that crosses the slow tier; `phase_name` names each phase.
  PhaseTimeline(const char* what, std::uint64_t lanes_phase, PhaseName phase_name)
      : what_(what), lanes_phase_(lanes_phase), phase_name_(phase_name) {}

  void record(int segment, std::uint64_t phase, Clock::time_point asked, Clock::time_point started,
              Clock::time_point ended) {
    std::lock_guard lock(mutex_);
    entries_.push_back({segment, phase, ms(asked), ms(started), ms(ended)});
  }

  // One debug line for the call, then one trace line per phase in the order they started.
  // `lane_window`: how many segments the turns let into the lanes' phase at once.
  void log(std::size_t bytes, int segments, int lane_window) {
    const double total = ms(Clock::now());
    std::lock_guard lock(mutex_);
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.started < b.started; });
    double first = -1;
    double last = 0;
    double busy = 0;
    for (const auto& e : entries_) {  // in order of start: the union of the lanes' spells
      if (e.phase != lanes_phase_) continue;
      if (first < 0) first = e.started;
      busy += std::max(0.0, e.ended - std::max(e.started, last));
      last = std::max(last, e.ended);
    }
    if (first < 0) {
      HM_LOG_DEBUG("{} of {} B in {} segments: {:.1f} ms; this rank has no lane across islands",
                   what_, bytes, segments, total);
    } else {
      HM_LOG_DEBUG(
          "{} of {} B in {} segments: {:.1f} ms; this rank's lane across islands ran {:.1f} ms "
          "of phases from {:.1f} to {:.1f} ms ({} segments at once at most): {:.1f} ms of island "
          "work before it, {:.1f} ms after",
          what_, bytes, segments, total, busy, first, last, lane_window, first, total - last);
    }
    for (const auto& e : entries_) {
      HM_LOG_TRACE("{} segment {} {}: asked at {:.2f} ms, ran {:.2f}..{:.2f}", what_, e.segment,
                   phase_name_(e.phase), e.asked, e.started, e.ended);
    }
  }

 private:
  double ms(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - origin_).count();
  }

  struct Entry {
    int segment;
    std::uint64_t phase;
    double asked, started, ended;  // ms since the call began
  };
  const char* what_;
  std::uint64_t lanes_phase_;
  PhaseName phase_name_;
  const Clock::time_point origin_ = Clock::now();
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

// One segment's place in the turns (none: the allreduce runs as one segment), and the timeline
// its phases go into (none: not logged).
struct SegmentTurn {
  PhaseTurns* turns = nullptr;
  int segment = 0;
  PhaseTimeline* timeline = nullptr;
  // Runs `phase` of this segment in its turn.
  template <typename Work>
  void run(std::uint64_t phase, Work&& work) const {
    const auto asked =
        timeline != nullptr ? PhaseTimeline::Clock::now() : PhaseTimeline::Clock::time_point{};
    const auto started = turns != nullptr      ? turns->enter(phase, segment)
                         : timeline != nullptr ? PhaseTimeline::Clock::now()
                                               : asked;
    work();
    // Timed before the next segment may start the phase.
    if (timeline != nullptr) {
      timeline->record(segment, phase, asked, started, PhaseTimeline::Clock::now());
    }
    if (turns != nullptr) turns->leave(phase, segment);
  }
};

// Runs `segment(s, scratch, turn)` for every segment s of a hierarchical collective: one segment
// inline, several on threads of their own that take each of the `phases` phases in turn
// (PhaseTurns, `widths` segments at once per phase, `leads` its leads), each with its own
// scratch. A failure ends the other segments' waits; the first is rethrown.
template <typename Segment>
void run_segments(const CollectiveContext& ctx, int segments, std::size_t phases,
                  std::vector<int> widths, std::vector<PhaseLead> leads, PhaseTimeline* timeline,
                  Segment&& segment) {
  if (segments <= 1) {
    segment(0, static_cast<ScratchSpace*>(nullptr), SegmentTurn{});
    return;
  }
  const std::span<ScratchSpace> scratch = ctx.segment_scratch(static_cast<std::size_t>(segments));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(segments));
  PhaseTurns turns(phases, ctx.timeout(), ctx.progress(), std::move(widths), std::move(leads));
  // This thread only joins from here on: a drive of its own would stall this rank's transports.
  const DriveScope pause = ctx.pause_drive();
  std::vector<std::thread> threads;
  for (int s = 0; s < segments; ++s) {
    threads.emplace_back([&, s] {
      try {
        segment(s, &scratch[static_cast<std::size_t>(s)], SegmentTurn{&turns, s, timeline});
      } catch (const TurnAborted&) {
        // Another segment failed first; its error is the one reported.
      } catch (...) {
        errors[static_cast<std::size_t>(s)] = std::current_exception();
        turns.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The phases of a hierarchical collective's segments, as run_hierarchical_segments() runs them.
struct SegmentPhases {
  std::size_t phases = 0;         // per segment
  std::uint64_t lanes_phase = 0;  // the one across islands
  int lane_window = 1;            // segments in it at once (hierarchical_lane_window)
  // Whether every segment of this rank takes the lanes' phase: then each of its phases waits for
  // the segment ahead to reach the lanes (PhaseLead), so the islands work on the segment the
  // slow tier needs next.
  bool reaches_lanes = false;
  const char* what = "";                          // the collective, in the debug timeline
  PhaseTimeline::PhaseName phase_name = nullptr;  // its phases' names there
  std::size_t bytes = 0;                          // the call's bytes, there
};

// run_segments() for a hierarchical collective: the lanes' width, the leads, and at
// HOLMES_LOG_LEVEL=debug the timeline of a segmented call.
template <typename Segment>
void run_hierarchical_segments(const CollectiveContext& ctx, int segments, const SegmentPhases& p,
                               Segment&& segment) {
  std::vector<int> widths(p.phases, 1);
  widths[p.lanes_phase] = p.lane_window;
  std::vector<PhaseLead> leads;
  if (p.reaches_lanes) leads.assign(p.phases, PhaseLead{1, p.lanes_phase});
  std::optional<PhaseTimeline> timeline;
  if (segments > 1 && logger().should_log(spdlog::level::debug)) {
    timeline.emplace(p.what, p.lanes_phase, p.phase_name);
  }
  PhaseTimeline* const timing = timeline ? &*timeline : nullptr;
  run_segments(ctx, segments, p.phases, std::move(widths), std::move(leads), timing,
               std::forward<Segment>(segment));
  if (timing != nullptr) timing->log(p.bytes, segments, p.lane_window);
}

// `count` elements cut into one block per weight, each in proportion to its weight (the same on
// every rank: the same arithmetic on the same numbers).
inline BlockLayout weighted_blocks(std::size_t count, const std::vector<double>& weights) {
  double total = 0;
  for (const double w : weights) total += w;
  std::vector<BlockLayout::Range> blocks;
  double before = 0;
  std::size_t start = 0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    before += weights[k];
    const std::size_t end =
        k + 1 == weights.size()
            ? count
            : std::min(count,
                       static_cast<std::size_t>(static_cast<double>(count) * before / total));
    blocks.push_back({start, end - start});
    start = end;
  }
  return BlockLayout(std::move(blocks), count);
}

// The views of one segment: `first_phase` on, with the segment's scratch when it has its own.
struct SegmentViews {
  const CollectiveContext& top;
  std::uint64_t first_phase;
  ScratchSpace* scratch;
  CollectiveContext operator()(std::vector<int> members, std::uint64_t phase) const {
    return scratch != nullptr ? top.view(std::move(members), first_phase + phase, *scratch)
                              : top.view(std::move(members), first_phase + phase);
  }
};

}  // namespace holmes::hier
