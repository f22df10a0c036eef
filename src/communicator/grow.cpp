// hm_comm_grow and hm_comm_join: processes started later (a replacement for a lost rank) join a
// communicator's ranks. They meet through the job's store: the growing communicator's rank 0
// publishes one seat per joiner under a job-wide counter, each joiner takes the next seat
// number and waits for its seat, which says where to meet; then all of them wire the new
// communicator through the store as a shrink does, the old ranks first, in order.
#include <sstream>

#include "bootstrap/rendezvous.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/runtime.hpp"
#include "communicator/shaping.hpp"
#include "communicator/shrink_agreement.hpp"
#include "communicator/store_exchange.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "topology/merge.hpp"

namespace holmes::detail {
namespace {

// Job-wide keys: the seats published so far, and the joiners that took a number.
constexpr char kSeatsKey[] = "holmes/grow/seats";
constexpr char kJoinersKey[] = "holmes/grow/joiners";
constexpr int kMaxJoining = 4096;
constexpr std::chrono::milliseconds kStorePoll{5};

std::string seat_key(std::int64_t seat) { return fmt::format("holmes/grow/seat{}", seat); }

// What a seat tells its joiner.
struct Seat {
  int old_size = 0;
  int joining = 0;
  int position = 0;     // among the joiners: its rank is old_size + position
  std::string prefix;   // store keys of the grow's exchanges
  std::string context;  // the new communicator's name (transport proofs)

  std::string format() const {
    return fmt::format("{} {} {} {} {}", old_size, joining, position, prefix, context);
  }
  static Seat parse(const std::string& text) {
    Seat s;
    std::istringstream in(text);
    if (!(in >> s.old_size >> s.joining >> s.position >> s.prefix >> s.context) || s.old_size < 1 ||
        s.joining < 1 || s.joining > kMaxJoining || s.position < 0 || s.position >= s.joining) {
      fail(HM_ERR_TRANSPORT, "hm_comm_join: the seat in the store is malformed: '{}'",
           text.substr(0, 200));
    }
    return s;
  }
};

}  // namespace

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::grow(int joining) {
  check_usable();
  require(joining >= 1 && joining <= kMaxJoining, "hm_comm_grow: n_joining {} is outside [1, {}]",
          joining, kMaxJoining);
  if (!store_) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "hm_comm_grow: this communicator was not created through a store for joiners to meet "
         "it in");
  }
  const std::uint64_t index = grows_++;
  Seat seat;
  seat.old_size = size_;
  seat.joining = joining;
  seat.prefix = fmt::format("holmes/{}/grow{}/", context_, index);
  seat.context = fmt::format("{}/grow{}", context_, index);
  if (rank_ == 0) {
    const std::int64_t last = store_->add(kSeatsKey, joining);
    for (int p = 0; p < joining; ++p) {
      seat.position = p;
      const auto key = seat_key(last - joining + 1 + p);
      store_->set(key, seat.format());
      store_->add(key + ".set", 1);
    }
  }
  const int new_size = size_ + joining;
  const Deadline deadline = Deadline::after(timeout_);
  int exchange = 0;
  const GatherStrings gather = [&](const std::string& mine) {
    return store_gather(*store_, fmt::format("{}exchange{}/", seat.prefix, exchange++), rank_,
                        new_size, mine, deadline, {}, nullptr);
  };
  HM_LOG_INFO("rank {}: growing {} ranks to {}", rank_, size_, new_size);
  return derive(rank_, new_size, seat.context, gather, deadline, Lineage::kSuperset);
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::join(const ResolvedConfig& config) {
  const Deadline deadline = Deadline::after(config.timeout);
  auto store = store_for(config, deadline);
  const std::int64_t number = store->add(kJoinersKey, 1);
  const auto key = seat_key(number);
  if (!ShrinkAgreement::await_counted(*store, key + ".set", deadline, kStorePoll)) {
    fail(HM_ERR_TIMEOUT,
         "hm_comm_join: no communicator was grown for this process (joiner {} of the job) within "
         "{} ms",
         number, config.timeout.count());
  }
  const Seat seat = Seat::parse(store->get(key, deadline));
  const int rank = seat.old_size + seat.position;
  const int size = seat.old_size + seat.joining;
  const TransportOptions options = transport_options_for(config, *store, seat.context);
  int exchange = 0;
  const GatherStrings gather = [&](const std::string& mine) {
    return store_gather(*store, fmt::format("{}exchange{}/", seat.prefix, exchange++), rank, size,
                        mine, deadline, {}, nullptr);
  };
  WiringFacts facts;
  auto router = wire(rank, size, options, config.settings, locality_from(config, rank), gather,
                     deadline, &facts);
  auto links =
      topology_links(facts.localities, rank, config.topology, shaping_mode(config.settings));
  router->set_shaping(std::move(links.shapes));

  Params params = params_from(config, rank, size, options);
  params.router = std::move(router);
  params.facts = std::move(facts);
  params.declared = std::move(links.costs);
  params.store = std::move(store);
  HM_LOG_INFO("joined as rank {} of {}", rank, size);
  return std::make_shared<CommunicatorImpl>(std::move(params));
}

}  // namespace holmes::detail
