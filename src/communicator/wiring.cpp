#include "communicator/wiring.hpp"

#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "communicator/config.hpp"
#include "communicator/peer_card.hpp"
#include "communicator/transport_setup.hpp"
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
                             const Settings& settings, const LocalitySource& locality,
                             const GatherStrings& gather, const Deadline& deadline,
                             WiringFacts* facts) {
  const auto n = static_cast<std::size_t>(size);
  const auto me = static_cast<std::size_t>(rank);
  // Failures before the exchanges end are carried through them, so that every rank fails at
  // once (naming the culprit) instead of waiting for the one that gave up.
  std::optional<Error> local_error;

  // 1. tcp (the control plane) and this rank's card: where it sits and what it can run.
  PeerCard card;
  std::vector<std::unique_ptr<Transport>> transports(std::size(kAllTransportKinds));
  try {
    // Settings used later, checked now: a bad value fails every rank at init, naming it.
    settings.check();
    card.locality = locality();
    apply_process_settings(settings);
    const auto model = CostModel::from_settings(settings);
    const auto forced = ForcedAlgorithms::from_settings(settings);
    if (facts != nullptr) {
      facts->cost_model = model;
      facts->forced = forced;
    }
    card.forced = forced_transport(settings);
    card.addresses.resize(std::size(kAllTransportKinds));
    for (auto kind : kAllTransportKinds) {
      const bool wanted = kind == TransportKind::kTcp || !card.forced || *card.forced == kind;
      if (wanted && transport_usable(kind, settings, nullptr)) card.available.push_back(kind);
    }
    auto& tcp = transports[static_cast<std::size_t>(TransportKind::kTcp)];
    TransportOptions tcp_options = options;
    tcp_options.tcp_nics = tcp_nics(settings, card.locality.host);
    tcp = create_transport(TransportKind::kTcp, tcp_options, settings);
    card.addresses[static_cast<std::size_t>(TransportKind::kTcp)] = tcp->listen_address();
  } catch (const Error& e) {
    local_error = e;
  }
  const nlohmann::json my_card = local_error ? nlohmann::json{{"error", local_error->what()}}
                                             : nlohmann::json::parse(card.encode());
  const auto texts = gather(my_card.dump());
  std::vector<std::optional<PeerCard>> cards(n);
  std::vector<std::string> card_errors(n);
  for (std::size_t i = 0; i < n; ++i) {
    try {
      const auto j = nlohmann::json::parse(texts.at(i));
      if (j.contains("error")) {
        card_errors[i] = j["error"].get<std::string>();
      } else {
        cards[i] = PeerCard::decode(texts[i], static_cast<int>(i));
      }
    } catch (const std::exception& e) {
      card_errors[i] = e.what();
    }
  }

  // 2. Routes to every peer, computed before anything is thrown.
  std::vector<Route> routes(n);
  std::vector<std::optional<Error>> route_errors(n);
  std::string row(n, kNoRoute);
  row[me] = kSelf;
  for (std::size_t p = 0; p < n && !local_error; ++p) {
    if (p == me) continue;
    if (!cards[p]) {
      route_errors[p] = Error(HM_ERR_PEER_FAILED, fmt::format("rank {} could not start its "
                                                              "transports: {}",
                                                              p, card_errors[p]));
      continue;
    }
    try {
      routes[p] = choose_route(card, *cards[p], static_cast<int>(p));
      row[p] = route_char(routes[p].kind);
    } catch (const Error& e) {
      route_errors[p] = e;
    }
  }

  // 3. Only now the transports some route uses: a communicator whose peers are all on this host
  //    never starts UCX or opens an RDMA device. Their addresses travel with the routes.
  nlohmann::json second = {{"row", row}, {"addresses", nlohmann::json::object()}};
  if (!local_error) {
    try {
      TransportOptions ucx_options = options;
      ucx_options.ucx_same_host_peers = false;
      for (std::size_t p = 0; p < n; ++p) {
        if (p == me || row[p] == kNoRoute || routes[p].kind != TransportKind::kUcx) continue;
        if (cards[p]->locality.host == card.locality.host) ucx_options.ucx_same_host_peers = true;
      }
      for (std::size_t p = 0; p < n; ++p) {
        if (p == me || row[p] == kNoRoute) continue;
        const auto kind = routes[p].kind;
        auto& t = transports[static_cast<std::size_t>(kind)];
        if (!t) {
          t = create_transport(kind, kind == TransportKind::kUcx ? ucx_options : options, settings);
        }
      }
      for (auto kind : kAllTransportKinds) {
        if (const auto& t = transports[static_cast<std::size_t>(kind)]) {
          second["addresses"][transport_name(kind)] = t->listen_address();
        }
      }
    } catch (const Error& e) {
      local_error = e;
      second["error"] = e.what();
    }
  } else {
    second["error"] = local_error->what();
  }
  // The transport this rank uses on each tier ('t' tcp, 'f' faster, '-' no such peer), and the
  // variables every rank must agree on.
  std::string tiers = "--";
  for (std::size_t p = 0; p < n && !local_error; ++p) {
    if (p == me || !cards[p] || row[p] == kNoRoute) continue;
    const bool same_host = cards[p]->locality.host == card.locality.host;
    const bool same_island = cards[p]->locality.island == card.locality.island;
    char& tier = same_host ? tiers[0] : tiers[1];
    if (!same_host && !same_island) continue;
    if (routes[p].kind == TransportKind::kTcp) {
      tier = 't';
    } else if (tier != 't') {
      tier = 'f';
    }
  }
  second["tiers"] = tiers;
  // The agreed settings as given ("" for the default: a value given equal to the default
  // still counts, since a HOLMES_COST_* value that is given wins over the probe).
  nlohmann::json agreed = nlohmann::json::object();
  for (const auto& spec : all_settings()) {
    if (spec.scope != SettingScope::kAgreed || spec.id == Setting::kTransport) continue;
    agreed[std::string(spec.name)] = settings.value(spec.id).text.value_or("");
  }
  second["settings"] = agreed;
  const auto replies = gather(second.dump());

  // 4-5 may fail on one rank only (a connection refused, a timeout): that error, like one from
  // before the exchanges, is carried through the last exchange so that every rank leaves at once,
  // naming the one that failed.
  std::unique_ptr<Router> router;
  std::optional<Error> late_error = local_error;
  if (!late_error) {
    try {
      // 4. Every link agreed on by both ends, and where each peer listens on its route.
      std::vector<std::vector<std::string>> addresses(std::size(kAllTransportKinds),
                                                      std::vector<std::string>(n));
      for (std::size_t p = 0; p < n; ++p) {
        nlohmann::json reply;
        try {
          reply = nlohmann::json::parse(replies.at(p));
        } catch (const std::exception& e) {
          fail(HM_ERR_TRANSPORT, "rank {} sent a malformed route reply: {}", p, e.what());
        }
        if (p != me) {
          if (route_errors[p]) throw *route_errors[p];
          if (reply.contains("error")) {
            fail(HM_ERR_PEER_FAILED, "rank {} could not start its transports: {}", p,
                 reply["error"].get<std::string>());
          }
          const std::string theirs = reply.value("row", "");
          const char their_choice = theirs.size() == n ? theirs[me] : kNoRoute;
          if (their_choice != row[p]) {
            const auto name = [](char c) {
              return c >= '0' && c <= route_char(TransportKind::kVerbs)
                         ? std::string(transport_name(static_cast<TransportKind>(c - '0')))
                         : std::string("no transport");
            };
            fail(HM_ERR_MISMATCH,
                 "rank {} chose {} for the link to this rank (rank {}), this rank chose {}: the "
                 "ranks disagree about the link between them",
                 p, name(their_choice), rank, name(row[p]));
          }
        }
        if (facts != nullptr) {
          const std::string their_tiers = reply.value("tiers", "--");
          if (their_tiers.size() == 2) {
            facts->host_tier_tcp |= their_tiers[0] == 't';
            facts->island_tier_tcp |= their_tiers[1] == 't';
            facts->island_tier_rdma |= their_tiers[1] == 'f';
          }
        }
        if (p != me) {
          const auto theirs = reply.value("settings", nlohmann::json::object());
          for (const auto& [variable, value] : agreed.items()) {
            const std::string mine = value.get<std::string>();
            const std::string their_value = theirs.value(variable, "");
            if (mine != their_value) {
              fail(HM_ERR_MISMATCH,
                   "rank {} runs with {}='{}', this rank (rank {}) with '{}': every rank must use "
                   "the "
                   "same value (it steers which algorithm each collective runs)",
                   p, variable, their_value, rank, mine);
            }
          }
        }
        const auto& published = reply.value("addresses", nlohmann::json::object());
        for (auto kind : kAllTransportKinds) {
          const auto k = static_cast<std::size_t>(kind);
          const bool needed = kind == TransportKind::kTcp || (p != me && routes[p].kind == kind) ||
                              (p == me && transports[k]);
          if (!needed) continue;
          const auto it = published.find(transport_name(kind));
          if (it == published.end() || !it->is_string()) {
            fail(HM_ERR_TRANSPORT, "rank {} published no {} address", p, transport_name(kind));
          }
          addresses[k][p] = it->get<std::string>();
        }
      }
      routes[me] = {TransportKind::kTcp, "this rank"};
      if (facts != nullptr) {
        facts->localities.clear();
        for (std::size_t p = 0; p < n; ++p) {
          facts->localities.push_back(p == me ? card.locality : cards[p]->locality);
        }
      }
      HM_LOG_INFO("{}", describe(routes, rank, card.locality));
      router = std::make_unique<Router>(rank, std::move(transports), routes, addresses);
      if (size <= kEagerConnectMaxRanks) {
        const auto connected = router->connect_all();
        if (!connected->wait_until(deadline)) {
          fail(HM_ERR_TIMEOUT, "could not connect to every rank in time");
        }
        if (connected->status() != HM_SUCCESS)
          throw Error(connected->status(), connected->message());
      }
    } catch (const Error& e) {
      late_error = e;
    }
  }
  // 6. Nobody returns before everyone is connected: a rank that destroyed the new communicator
  // at once would otherwise close endpoints that slower ranks are still connecting to.
  const auto ready = gather(late_error ? std::string("failed ") + late_error->what() : "ready");
  if (late_error) throw *late_error;
  for (std::size_t p = 0; p < n; ++p) {
    if (ready[p] != "ready") {
      fail(HM_ERR_PEER_FAILED, "rank {} could not finish connecting: {}", p,
           ready[p].size() > 7 ? ready[p].substr(7) : ready[p]);
    }
  }
  return router;
}

}  // namespace holmes::detail
