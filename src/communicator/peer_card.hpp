// What a rank tells the others when a communicator is created: where it sits (locality), which
// transports it can run, whether HOLMES_TRANSPORT forces one, and where each of its transports
// listens. From two cards both ranks compute the same route for the link between them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/settings.hpp"
#include "topology/locality.hpp"
#include "transports/kinds.hpp"

namespace holmes::detail {

struct PeerCard {
  Locality locality;
  std::vector<TransportKind> available;
  std::optional<TransportKind> forced;
  std::vector<std::string> addresses;  // indexed by TransportKind; "" where not created

  bool can(TransportKind kind) const;
  const std::string& address(TransportKind kind) const;

  std::string encode() const;  // JSON
  // Throws HM_ERR_TRANSPORT naming `rank` when the text is not a card.
  static PeerCard decode(std::string_view text, int rank);
};

// HOLMES_TRANSPORT: tcp, shm, ucx or verbs forces that transport to every peer; auto or unset
// lets the communicator choose. Throws HM_ERR_INVALID_ARGUMENT for anything else.
std::optional<TransportKind> forced_transport(const Settings& settings);

// The route between two ranks. Deterministic and symmetric: both ranks compute the same route
// from the same two cards. Throws HM_ERR_MISMATCH when the ranks force different transports,
// HM_ERR_UNSUPPORTED when a forced transport is missing on either side, and
// HM_ERR_INVALID_ARGUMENT when it cannot reach the peer (shm to another host).
Route choose_route(const PeerCard& me, const PeerCard& peer, int peer_rank);

}  // namespace holmes::detail
