#include "communicator/peer_card.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/status.hpp"

namespace holmes::detail {
namespace {
// CPU numbers a card may name (Linux allows up to 8192).
constexpr int kMostCpus = 1 << 16;
}  // namespace

bool PeerCard::can(TransportKind kind) const {
  return std::find(available.begin(), available.end(), kind) != available.end();
}

const std::string& PeerCard::address(TransportKind kind) const {
  static const std::string kNone;
  const auto k = static_cast<std::size_t>(kind);
  return k < addresses.size() ? addresses[k] : kNone;
}

std::string PeerCard::encode() const {
  nlohmann::json j;
  j["host"] = locality.host;
  j["island"] = locality.island;
  j["fabric"] = locality.fabric;
  j["machine"] = locality.machine;
  j["cpus"] = locality.cpus;
  j["available"] = nlohmann::json::array();
  for (auto kind : available) j["available"].push_back(transport_name(kind));
  j["forced"] = forced ? transport_name(*forced) : "auto";
  j["addresses"] = nlohmann::json::object();
  for (auto kind : kAllTransportKinds) {
    if (!address(kind).empty()) j["addresses"][transport_name(kind)] = address(kind);
  }
  return j.dump();
}

PeerCard PeerCard::decode(std::string_view text, int rank) {
  try {
    const auto j = nlohmann::json::parse(text);
    PeerCard card;
    card.locality.host = j.at("host").get<std::string>();
    card.locality.island = j.at("island").get<std::string>();
    card.locality.fabric = j.at("fabric").get<std::string>();
    card.locality.machine = j.at("machine").get<std::string>();
    card.locality.cpus = j.at("cpus").get<std::vector<int>>();
    for (int cpu : card.locality.cpus) {
      if (cpu < 0 || cpu >= kMostCpus) {
        fail(HM_ERR_TRANSPORT, "rank {} published a peer card with CPU {} (expected [0, {}))", rank,
             cpu, kMostCpus);
      }
    }
    for (const auto& name : j.at("available")) {
      if (auto kind = transport_from_name(name.get<std::string>())) card.available.push_back(*kind);
    }
    const auto forced = j.at("forced").get<std::string>();
    if (forced != "auto") {
      card.forced = transport_from_name(forced);
      if (!card.forced) fail(HM_ERR_TRANSPORT, "unknown forced transport '{}'", forced);
    }
    card.addresses.resize(std::size(kAllTransportKinds));
    for (const auto& [name, address] : j.at("addresses").items()) {
      if (auto kind = transport_from_name(name)) {
        card.addresses[static_cast<std::size_t>(*kind)] = address.get<std::string>();
      }
    }
    return card;
  } catch (const nlohmann::json::exception& e) {
    fail(HM_ERR_TRANSPORT, "rank {} published a malformed peer card: {}", rank, e.what());
  }
}

std::optional<TransportKind> forced_transport(const Settings& settings) {
  const auto text = settings.text(Setting::kTransport);  // checked: one of the choices
  if (text == "auto") return std::nullopt;
  auto kind = transport_from_name(text);
  if (!kind) fail(HM_ERR_INTERNAL, "HOLMES_TRANSPORT '{}' names no transport", text);
  return kind;
}

Route choose_route(const PeerCard& me, const PeerCard& peer, int peer_rank) {
  const bool same_host = me.locality.host == peer.locality.host;
  const bool same_island =
      me.locality.island == peer.locality.island && me.locality.fabric == peer.locality.fabric;
  auto both = [&](TransportKind kind) { return me.can(kind) && peer.can(kind); };
  if (me.forced != peer.forced) {
    auto name = [](const std::optional<TransportKind>& f) {
      return f ? transport_name(*f) : "auto";
    };
    fail(HM_ERR_MISMATCH,
         "rank {} runs with HOLMES_TRANSPORT={}, this rank with {}: the ranks disagree about "
         "the link between them",
         peer_rank, name(peer.forced), name(me.forced));
  }
  if (me.forced) {
    const auto kind = *me.forced;
    if (!both(kind)) {
      std::string why;
      if (!me.can(kind)) transport_available(kind, &why);
      fail(HM_ERR_UNSUPPORTED, "HOLMES_TRANSPORT={} but {} cannot run it{}{}", transport_name(kind),
           me.can(kind) ? fmt::format("rank {}", peer_rank) : std::string("this rank"),
           why.empty() ? "" : ": ", why);
    }
    if (kind == TransportKind::kShm && !same_host) {
      fail(HM_ERR_INVALID_ARGUMENT, "HOLMES_TRANSPORT=shm but rank {} is on another host ({})",
           peer_rank, peer.locality.host);
    }
    return {kind, fmt::format("forced by HOLMES_TRANSPORT={}", transport_name(kind))};
  }
  if (same_host) {
    if (both(TransportKind::kShm)) return {TransportKind::kShm, "same host"};
    if (both(TransportKind::kUcx)) return {TransportKind::kUcx, "same host, no shm"};
    return {TransportKind::kTcp, "same host, no shm or ucx"};
  }
  if (same_island && me.locality.rdma()) {
    const auto why = fmt::format("same island {} ({})", me.locality.island, me.locality.fabric);
    if (both(TransportKind::kUcx)) return {TransportKind::kUcx, why};
    if (both(TransportKind::kVerbs)) return {TransportKind::kVerbs, why};
    return {TransportKind::kTcp, why + ", but no RDMA transport on both sides"};
  }
  if (same_island)
    return {TransportKind::kTcp, fmt::format("same island over {}", me.locality.fabric)};
  return {TransportKind::kTcp,
          fmt::format("other island ({} and {})", me.locality.island, peer.locality.island)};
}

}  // namespace holmes::detail
