#include "communicator/store_exchange.hpp"

#include "communicator/shrink_agreement.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

constexpr std::chrono::milliseconds kStorePoll{5};

}  // namespace

std::vector<std::string> store_gather(Rendezvous& store, const std::string& prefix, int rank,
                                      int size, const std::string& mine, const Deadline& deadline,
                                      const std::vector<int>& who, std::set<int>* missing) {
  store.set(prefix + std::to_string(rank), mine);
  store.add(prefix + std::to_string(rank) + ".set", 1);
  std::vector<std::string> all(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) {
    const std::string key = prefix + std::to_string(i);
    if (!ShrinkAgreement::await_counted(store, key + ".set", deadline, kStorePoll)) {
      const int name = i < static_cast<int>(who.size()) ? who[static_cast<std::size_t>(i)] : i;
      if (missing != nullptr) missing->insert(name);
      fail(HM_ERR_TIMEOUT, "rank {} did not take part in time (store keys {}*)", name, prefix);
    }
    all[static_cast<std::size_t>(i)] = store.get(key, deadline);
  }
  return all;
}

}  // namespace holmes::detail
