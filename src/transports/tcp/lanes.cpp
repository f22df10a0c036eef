#include "transports/tcp/lanes.hpp"

#include <charconv>
#include <cmath>

#include "core/parse.hpp"
#include "core/status.hpp"

namespace holmes::tcp {
namespace {

constexpr char kEntrySeparator = ';';

std::vector<std::string> split_entries(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (true) {
    const auto next = text.find(kEntrySeparator, at);
    out.push_back(text.substr(at, next - at));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}

TcpEndpoint host_port_endpoint(const std::string& text, const std::string& what) {
  const HostPort hp = parse_host_port(text, what);
  require(same_subnet(hp.host, hp.host, 0), "{}: '{}' is not an IP address and port", what, text);
  return {hp.host, hp.port, 0, 0};
}

// "ip:port/prefix@gbit"
TcpEndpoint nic_endpoint(const std::string& entry, const std::string& what) {
  const auto at = entry.rfind('@');
  const auto slash = entry.rfind('/', at);
  require(at != std::string::npos && slash != std::string::npos && slash < at,
          "{}: NIC entry '{}' is not ip:port/prefix@gbit", what, entry);
  TcpEndpoint e = host_port_endpoint(entry.substr(0, slash), what);
  const std::string prefix = entry.substr(slash + 1, at - slash - 1);
  const std::string gbit = entry.substr(at + 1);
  e.prefix = static_cast<int>(parse_int(prefix, 0, 128, what + " NIC prefix"));
  const auto [end, ec] = std::from_chars(gbit.data(), gbit.data() + gbit.size(), e.gbit);
  require(
      ec == std::errc() && end == gbit.data() + gbit.size() && std::isfinite(e.gbit) && e.gbit >= 0,
      "{}: NIC entry '{}' has rate '{}'", what, entry, gbit);
  return e;
}

}  // namespace

std::string TcpEndpoint::host_port() const {
  return ip.find(':') != std::string::npos ? fmt::format("[{}]:{}", ip, port)
                                           : fmt::format("{}:{}", ip, port);
}

std::string TcpCard::encode() const {
  std::string out = primary.host_port();
  for (const auto& nic : nics) {
    out += fmt::format("{}{}/{}@{:g}", kEntrySeparator, nic.host_port(), nic.prefix, nic.gbit);
  }
  return out;
}

TcpCard TcpCard::decode(const std::string& text, const std::string& what) {
  const auto entries = split_entries(text);
  TcpCard card;
  card.primary = host_port_endpoint(entries.front(), what);
  require(entries.size() <= static_cast<std::size_t>(kMaxNics) + 1, "{}: more than {} NICs in '{}'",
          what, kMaxNics, text);
  for (std::size_t i = 1; i < entries.size(); ++i) {
    card.nics.push_back(nic_endpoint(entries[i], what));
  }
  return card;
}

std::string primary_of(const std::string& card_text) {
  return card_text.substr(0, card_text.find(kEntrySeparator));
}

std::vector<Lane> plan_lanes(const std::vector<TcpNic>& mine, const TcpCard& peer) {
  std::vector<Lane> lanes;
  // The peer's NICs, or its listen address as its one NIC (network unknown: ours decides).
  const std::vector<TcpEndpoint> theirs =
      peer.nics.empty() ? std::vector<TcpEndpoint>{peer.primary} : peer.nics;
  std::vector<int> used(theirs.size(), 0);
  for (std::size_t i = 0; i < mine.size(); ++i) {
    int best = -1;
    for (std::size_t j = 0; j < theirs.size(); ++j) {
      if (!same_subnet(mine[i].ip, theirs[j].ip, mine[i].prefix)) continue;
      if (theirs[j].prefix > 0 && !same_subnet(mine[i].ip, theirs[j].ip, theirs[j].prefix)) {
        continue;
      }
      if (best < 0 || used[j] < used[static_cast<std::size_t>(best)]) best = static_cast<int>(j);
    }
    if (best < 0) continue;
    ++used[static_cast<std::size_t>(best)];
    const TcpEndpoint& remote = theirs[static_cast<std::size_t>(best)];
    double rate = mine[i].gbit;
    if (remote.gbit > 0) rate = rate > 0 ? std::min(rate, remote.gbit) : remote.gbit;
    lanes.push_back({static_cast<int>(i), mine[i].ip, remote, rate});
  }
  if (lanes.empty()) return {Lane{-1, "", peer.primary, 1}};
  double known = 0;
  int counted = 0;
  for (const auto& lane : lanes) {
    if (lane.weight > 0) {
      known += lane.weight;
      ++counted;
    }
  }
  for (auto& lane : lanes) {
    if (lane.weight <= 0) lane.weight = counted > 0 ? known / counted : 1;
  }
  return lanes;
}

std::string describe(const Lane& lane, const std::vector<TcpNic>& mine) {
  if (lane.nic < 0) return fmt::format("-> {}", lane.remote.host_port());
  return fmt::format("{} -> {} (weight {:g})", mine[static_cast<std::size_t>(lane.nic)].name,
                     lane.remote.host_port(), lane.weight);
}

}  // namespace holmes::tcp
