// Strings exchanged through the job's store, for communicators whose members cannot talk yet or
// no longer can: the survivors of a shrink, the old and new ranks of a grow.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "bootstrap/rendezvous.hpp"
#include "core/clock.hpp"

namespace holmes::detail {

// Every member's string (index = rank among `size`): each member sets its own under `prefix`,
// raises a counter that says it is there, and reads everyone's. A member that has not shown by
// `deadline` is named in the HM_ERR_TIMEOUT; `who` maps an index to the name used for it (e.g.
// the rank in the old communicator), and `missing`, when given, receives that name.
std::vector<std::string> store_gather(Rendezvous& store, const std::string& prefix, int rank,
                                      int size, const std::string& mine, const Deadline& deadline,
                                      const std::vector<int>& who, std::set<int>* missing);

}  // namespace holmes::detail
