// hm_comm_split: the ranks exchange (color, key) through the communicator itself, then each
// color's members wire a communicator of their own, ordered by key.
#include <algorithm>
#include <cstdio>

#include "collectives/algorithms.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/wiring.hpp"
#include "core/status.hpp"

namespace holmes::detail {

std::vector<std::string> CommunicatorImpl::allgather_strings(const std::string& mine) {
  // Lengths first, then every string padded to the longest.
  const auto length = static_cast<std::uint64_t>(mine.size());
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size_));
  CollectiveCall call;
  call.kind = CollectiveKind::kSplit;
  call.send = &length;
  call.recv = lengths.data();
  call.count = 1;
  call.dtype = HM_UINT64;
  collective(call, CallMode::kBlocking);
  const std::uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  require(longest <= (64u << 20), "exchange of {} bytes per rank is too large", longest);
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * static_cast<std::size_t>(size_), '\0');
  call.send = padded.data();
  call.recv = all.data();
  call.count = longest;
  call.dtype = HM_UINT8;
  collective(call, CallMode::kBlocking);
  std::vector<std::string> out;
  for (int i = 0; i < size_; ++i) {
    out.push_back(
        all.substr(static_cast<std::size_t>(i) * longest, lengths[static_cast<std::size_t>(i)]));
  }
  return out;
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::split(int color, int key) {
  check_usable();
  const bool bad_color = color < 0 && color != HM_COLOR_UNDEFINED;
  const bool member = color >= 0;
  const std::uint64_t index = splits_++;

  // Every rank takes part in every exchange, even with a bad color or none, so that no rank is
  // left waiting; a bad color is reported afterwards.
  const auto colors = allgather_strings(fmt::format("{} {}", member ? color : -1, key));
  struct Member {
    int key;
    int parent_rank;
  };
  std::vector<Member> members;
  for (int i = 0; i < size_; ++i) {
    int their_color = -1;
    int their_key = 0;
    if (std::sscanf(colors[static_cast<std::size_t>(i)].c_str(), "%d %d", &their_color,
                    &their_key) != 2) {
      fail(HM_ERR_INTERNAL, "comm_split: rank {} sent a malformed color", i);
    }
    if (member && their_color == color) members.push_back({their_key, i});
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.parent_rank < b.parent_rank;
  });
  int new_rank = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].parent_rank == rank_) new_rank = static_cast<int>(i);
  }
  if (!member) {
    // Stay in step with the members' exchanges, which go through this communicator.
    for (int i = 0; i < kWiringExchanges; ++i) allgather_strings("");
    require(!bad_color, "hm_comm_split: color {} is negative and not HM_COLOR_UNDEFINED", color);
    return nullptr;
  }
  const GatherStrings gather = [&](const std::string& mine) {
    const auto all = allgather_strings(mine);
    std::vector<std::string> ours;
    for (const auto& m : members) ours.push_back(all[static_cast<std::size_t>(m.parent_rank)]);
    return ours;
  };
  return derive(new_rank, static_cast<int>(members.size()),
                fmt::format("{}/split{}:{}", context_, index, color), gather,
                Deadline::after(timeout_), Lineage::kSubset);
}

}  // namespace holmes::detail
