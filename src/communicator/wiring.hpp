// How a communicator's transports come up, the same way for the world (exchanging through the
// store) and for split communicators (exchanging through the parent):
//  1. this rank creates tcp (the control plane) and every other transport it can run;
//  2. the ranks exchange peer cards (locality, transports, addresses);
//  3. each rank chooses the route to every peer (choose_route), and the ranks exchange their
//     choices: a rank whose choice for a link differs from its peer's fails with
//     HM_ERR_MISMATCH naming the peer, on both sides, after the exchange (never a hang);
//  4. a Router over the transports in use connects every pair (small communicators);
//  5. a last exchange: no rank returns before every rank is connected (or every rank fails,
//     naming the one that could not connect).
// One log line at info level says which transport serves which peers, and why.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/algorithm.hpp"
#include "collectives/tuning.hpp"
#include "core/clock.hpp"
#include "core/settings.hpp"
#include "topology/locality.hpp"
#include "transports/options.hpp"
#include "transports/router.hpp"

namespace holmes::detail {

// Gives every rank's string to every rank (index = rank in the group being formed).
using GatherStrings = std::function<std::vector<std::string>(const std::string& mine)>;

// The number of GatherStrings calls wire() makes, always (ranks that stay out of the new
// communicator but share the exchange medium make the same number of empty calls).
constexpr int kWiringExchanges = 3;

// What every rank of the new communicator knows alike after wiring, for the cost model (which
// must make the same choice on every rank).
struct WiringFacts {
  std::vector<Locality> localities;  // every rank's, index = rank
  // Transports used on each tier by any rank: same host, and hosts of one island.
  bool host_tier_tcp = false;
  bool island_tier_tcp = false;
  bool island_tier_rdma = false;
  // The settings that steer the algorithm choice, read (and checked) once, at wiring.
  CostModel cost_model;
  ForcedAlgorithms forced;
};

// The settings of scope kAgreed steer the algorithm choice: every rank must have the same
// values, or init fails with HM_ERR_MISMATCH naming the setting and the rank. (HOLMES_TRANSPORT,
// agreed too, is compared per link by the peer cards, which name the link.)

// Where this rank sits, asked for inside wiring so that a failure (a malformed topology file)
// travels through the exchanges and fails every rank at once.
using LocalitySource = std::function<Locality()>;

// `facts`, when given, receives what the ranks agreed on. Every transport is configured from
// `settings` (transport_setup.hpp), which are checked first: a bad value fails every rank.
std::unique_ptr<Router> wire(int rank, int size, const TransportOptions& options,
                             const Settings& settings, const LocalitySource& locality,
                             const GatherStrings& gather, const Deadline& deadline,
                             WiringFacts* facts = nullptr);

}  // namespace holmes::detail
