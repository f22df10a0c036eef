#include "communicator/wiring.hpp"

#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "communicator/peer_card.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// Up to this many ranks every pair connects when the communicator is created, so that a rank
// that fails or closes is seen at once by all the others (its sockets close). Larger
// communicators connect on first use, to keep the number of sockets per rank bounded.
constexpr int kEagerConnectMaxRanks = 64;

// Marks, in the exchanged route rows, "this rank" and "no route (see the error)".
constexpr char kSelf = '-';
constexpr char kNoRoute = 'x';

char route_char(TransportKind kind) { return static_cast<char>('0' + static_cast<int>(kind)); }

std::string describe(const std::vector<Route>& routes, int rank, const Locality& here) {
  // "shm -> 1,2,3 (same host); tcp -> 4,5 (other island ...)"
  std::map<std::pair<int, std::string>, std::string> groups;
  for (std::size_t peer = 0; peer < routes.size(); ++peer) {
    if (static_cast<int>(peer) == rank) continue;
    auto& list = groups[{static_cast<int>(routes[peer].kind), routes[peer].reason}];
    list += (list.empty() ? "" : ",") + std::to_string(peer);
  }
  std::string out = fmt::format("rank {}/{} on host {} (island {}, {}):", rank, routes.size(),
                                here.host, here.island, here.fabric);
  for (const auto& [key, peers] : groups) {
    out += fmt::format(" {} -> {} ({});", transport_name(static_cast<TransportKind>(key.first)),
                       peers, key.second);
  }
  if (groups.empty()) out += " no peers";
  return out;
}

}  // namespace

std::unique_ptr<Router> wire(int rank, int size, const TransportOptions& options,
                             const GatherStrings& gather, const Deadline& deadline) {
  // 1. This rank's transports. A failure here is still reported through the exchange, so that
  //    the other ranks fail at once instead of waiting for this one.
  PeerCard card;
  std::vector<std::unique_ptr<Transport>> transports(std::size(kAllTransportKinds));
  std::optional<Error> local_error;
  try {
    card.locality = local_locality();
    card.forced = forced_transport_from_env();
    card.addresses.resize(std::size(kAllTransportKinds));
    for (auto kind : kAllTransportKinds) {
      const bool wanted = kind == TransportKind::kTcp || !card.forced || *card.forced == kind;
      if (!wanted || !transport_available(kind, nullptr)) continue;
      auto& t = transports[static_cast<std::size_t>(kind)];
      t = make_transport(kind, options);
      card.available.push_back(kind);
      card.addresses[static_cast<std::size_t>(kind)] = t->listen_address();
    }
  } catch (const Error& e) {
    local_error = e;
  }
  nlohmann::json mine = local_error ? nlohmann::json{{"error", local_error->what()}}
                                    : nlohmann::json::parse(card.encode());

  // 2. Everyone's card.
  const auto texts = gather(mine.dump());
  std::vector<std::optional<PeerCard>> cards(static_cast<std::size_t>(size));
  std::vector<std::string> card_errors(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) {
    const auto& text = texts.at(static_cast<std::size_t>(i));
    try {
      const auto j = nlohmann::json::parse(text);
      if (j.contains("error")) {
        card_errors[static_cast<std::size_t>(i)] = j["error"].get<std::string>();
      } else {
        cards[static_cast<std::size_t>(i)] = PeerCard::decode(text, i);
      }
    } catch (const std::exception& e) {
      card_errors[static_cast<std::size_t>(i)] = e.what();
    }
  }

  // 3. Routes, computed for every peer before anything is thrown, then cross-checked.
  std::vector<Route> routes(static_cast<std::size_t>(size));
  std::vector<std::optional<Error>> route_errors(static_cast<std::size_t>(size));
  std::string row(static_cast<std::size_t>(size), kNoRoute);
  row[static_cast<std::size_t>(rank)] = kSelf;
  for (int peer = 0; peer < size && !local_error; ++peer) {
    if (peer == rank) continue;
    const auto p = static_cast<std::size_t>(peer);
    if (!cards[p]) {
      route_errors[p] = Error(HM_ERR_PEER_FAILED, fmt::format("rank {} could not start its "
                                                              "transports: {}",
                                                              peer, card_errors[p]));
      continue;
    }
    try {
      routes[p] = choose_route(card, *cards[p], peer);
      row[p] = route_char(routes[p].kind);
    } catch (const Error& e) {
      route_errors[p] = e;
    }
  }
  const auto rows = gather(row);
  if (local_error) throw *local_error;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const auto p = static_cast<std::size_t>(peer);
    if (route_errors[p]) throw *route_errors[p];
    const std::string& theirs = rows.at(p);
    const char their_choice = theirs.size() == static_cast<std::size_t>(size)
                                  ? theirs[static_cast<std::size_t>(rank)]
                                  : kNoRoute;
    if (their_choice != row[p]) {
      const auto name = [](char c) {
        return c >= '0' && c < route_char(TransportKind::kVerbs) + 1
                   ? std::string(transport_name(static_cast<TransportKind>(c - '0')))
                   : std::string("no transport");
      };
      fail(HM_ERR_MISMATCH,
           "rank {} chose {} for the link to this rank (rank {}), this rank chose {}: the ranks "
           "disagree about the link between them",
           peer, name(their_choice), rank, name(row[p]));
    }
  }

  // 4. Keep the transports some route uses (tcp always), tell each where its peers are.
  std::vector<std::vector<std::string>> addresses(
      std::size(kAllTransportKinds), std::vector<std::string>(static_cast<std::size_t>(size)));
  std::vector<bool> used(std::size(kAllTransportKinds), false);
  used[static_cast<std::size_t>(TransportKind::kTcp)] = true;
  for (int peer = 0; peer < size; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    const PeerCard& c = peer == rank ? card : *cards[p];
    addresses[static_cast<std::size_t>(TransportKind::kTcp)][p] = c.address(TransportKind::kTcp);
    if (peer == rank) continue;
    const auto k = static_cast<std::size_t>(routes[p].kind);
    used[k] = true;
    addresses[k][p] = c.address(routes[p].kind);
  }
  for (std::size_t k = 0; k < transports.size(); ++k) {
    if (!used[k]) transports[k].reset();
    // A transport keeps its own address for the peers it serves.
    if (transports[k]) addresses[k][static_cast<std::size_t>(rank)] = card.addresses[k];
  }
  routes[static_cast<std::size_t>(rank)] = {TransportKind::kTcp, "this rank"};
  HM_LOG_INFO("{}", describe(routes, rank, card.locality));
  auto router = std::make_unique<Router>(rank, std::move(transports), routes, addresses);
  if (size <= kEagerConnectMaxRanks) {
    const auto connected = router->connect_all();
    if (!connected->wait_until(deadline)) {
      fail(HM_ERR_TIMEOUT, "could not connect to every rank in time");
    }
    if (connected->status() != HM_SUCCESS) throw Error(connected->status(), connected->message());
  }
  return router;
}

}  // namespace holmes::detail
