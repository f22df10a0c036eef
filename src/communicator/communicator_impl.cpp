// The communicator's state: its cost model and the algorithm it would choose, its settings, and
// its failure, revocation and close. How it is made: creation.cpp, split.cpp, shrink.cpp, grow.cpp;
// how calls run: dispatch.cpp, point_to_point.cpp.
#include "communicator/communicator_impl.hpp"

#include "bootstrap/rendezvous.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/link_probe.hpp"
#include "communicator/runtime.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/shared_board.hpp"

namespace holmes::detail {
namespace {

// How long a call that lost a peer waits for that peer's revocation notice (settle): the notice
// travels on the tcp control plane and can land a little after the shm endpoint's close, as
// the tcp transport's own notice grace (kNoticeGrace) allows for a reset connection.
constexpr std::chrono::milliseconds kRevocationGrace{50};

}  // namespace

CommunicatorImpl::CommunicatorImpl(Params params)
    : rank_(params.rank),
      size_(params.size),
      context_(std::move(params.context)),
      transport_(std::move(params.router)),
      timeout_(params.timeout),
      chunk_bytes_(params.chunk_bytes),
      transport_options_(std::move(params.transport_options)),
      topology_(std::move(params.topology)),
      facts_(params.facts),
      cost_model_(params.facts.cost_model),
      measured_(std::move(params.measured)),
      declared_(std::move(params.declared)),
      settings_(std::move(params.settings)),
      forced_(params.facts.forced),
      store_(std::move(params.store)),
      sent_to_(static_cast<std::size_t>(size_), 0) {
  cost_model_.chunk_bytes = static_cast<double>(chunk_bytes_);
  if (facts_.localities.size() != static_cast<std::size_t>(size_)) {
    facts_.localities.assign(static_cast<std::size_t>(size_),
                             Locality{"host", "island", "ethernet"});
  }
  cost_model_.ranks_per_core = ranks_per_core(facts_.localities);
  adopt_measurements();
  EngineOptions engine_options;
  engine_options.setting = settings_.text(Setting::kGroupEngine);
  // The model prices the islands' phases on the engine host buffers will get there.
  cost_model_.two_level_islands = host_buffers_take_two_level(engine_options.setting);
  engine_options.ipc_window_bytes =
      static_cast<std::size_t>(settings_.integer(Setting::kIpcWindowBytes));
  engine_options.timeout = timeout_;
  engine_options.process_device = [] { return Runtime::get().device_memory(); };
  engines_ = std::make_unique<CommunicatorEngines>(std::move(engine_options), facts_.localities,
                                                   engine_store());
  // Unset in close(), before any member the observer touches is gone.
  transport_->set_failure_observer(
      [this](int peer, hm_status_t status, const std::string& message) {
        on_peer_failure(peer, status, message);
      });
}

void CommunicatorImpl::adopt_measurements() {
  if (measured_.reduce_gbytes_per_s && !(cost_model_.set_by_setting & CostModel::kSetReduce)) {
    cost_model_.reduce_gbytes_per_s = *measured_.reduce_gbytes_per_s;
  }
  hierarchy_ = make_hierarchy();
}

Hierarchy CommunicatorImpl::make_hierarchy() const {
  std::vector<std::string> hosts;
  std::vector<std::string> islands;
  for (const auto& l : facts_.localities) {
    hosts.push_back(l.host);
    islands.push_back(l.island);
  }
  // Ranks that share cores share their pace (CostModel::crowded).
  const auto shared = [this](const LinkCost& link) { return cost_model_.crowded(link); };
  const TierLinks tiers = tier_links();
  Hierarchy h =
      holmes::make_hierarchy(hosts, islands, shared(tiers[Tier::kSameHost]),
                             shared(tiers[Tier::kSameIsland]), shared(tiers[Tier::kOtherIsland]));
  // Every rank has a board or none: it follows from the routes, which all ranks agree on.
  if (SharedBoard* board = transport_->shared_board()) h.board_bytes = board->slot_bytes();
  return h;
}

CommunicatorImpl::TierLinks CommunicatorImpl::tier_links() const {
  // Each tier's numbers follow the slowest transport any rank uses on it: every rank knows the
  // same facts, so every rank makes the same choice. Per tier, a HOLMES_COST_* variable wins,
  // then the probe's numbers, then the topology file's, then the defaults.
  const auto pick = [this](Tier tier, const LinkCost& nominal, unsigned setting_bit) {
    if (cost_model_.set_by_setting & setting_bit) return nominal;
    if (measured_[tier]) return *measured_[tier];
    return declared_[tier].value_or(nominal);
  };
  const bool host_tcp = facts_.host_tier_tcp;
  const bool island_tcp = facts_.island_tier_tcp || !facts_.island_tier_rdma;
  TierLinks tiers;
  tiers.links = {
      pick(Tier::kSameHost, host_tcp ? cost_model_.host_tcp : cost_model_.shm,
           host_tcp ? CostModel::kSetHostTcp : CostModel::kSetShm),
      pick(Tier::kSameIsland, island_tcp ? cost_model_.island_tcp : cost_model_.island_rdma,
           island_tcp ? CostModel::kSetIslandTcp : CostModel::kSetIslandRdma),
      pick(Tier::kOtherIsland, cost_model_.inter_island, CostModel::kSetInterIsland)};
  return tiers;
}

void CommunicatorImpl::calibrate() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> all(kProbeValues * static_cast<std::size_t>(size_));
  CollectiveCall call;
  call.kind = CollectiveKind::kLinkProbe;
  call.send = all.data();  // unused: each rank's values go straight to its block
  call.recv = all.data();
  call.count = kProbeValues;
  call.dtype = HM_FLOAT64;
  collective(call, CallMode::kBlocking);
  measured_ = agree_measurements(all);
  adopt_measurements();
  if (rank_ == 0) {
    HM_LOG_INFO(
        "cost probe of {} ranks ({:.0f} ms): {}", size_,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
        measured_.describe());
  }
}

std::string CommunicatorImpl::settings_dump() const {
  Settings shown = settings_;
  // The tiers' numbers as the cost model takes them from the file (make_hierarchy's choice of
  // setting per tier).
  const bool host_tcp = facts_.host_tier_tcp;
  const bool island_tcp = facts_.island_tier_tcp || !facts_.island_tier_rdma;
  const std::pair<Tier, Setting> tiers[] = {
      {Tier::kSameHost, host_tcp ? Setting::kCostHostTcp : Setting::kCostShm},
      {Tier::kSameIsland, island_tcp ? Setting::kCostIslandTcp : Setting::kCostIslandRdma},
      {Tier::kOtherIsland, Setting::kCostInterIsland}};
  for (const auto& [tier, setting] : tiers) {
    if (shown.given(setting) || !declared_[tier] || !topology_) continue;
    shown.set(setting,
              fmt::format("{:g},{:g}", declared_[tier]->latency_us, declared_[tier]->gbytes_per_s),
              SettingSource::kTopologyFile, *topology_);
  }
  return shown.dump();
}

LinkCost CommunicatorImpl::link_cost(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  // The tier's own numbers (the hierarchy holds them as ranks that share cores see them).
  return tier_links()[hierarchy_.tier(rank_, peer)];
}

void CommunicatorImpl::set_algorithm(CollectiveKind kind, Algorithm algorithm) {
  if (algorithm != Algorithm::kAuto && !algorithm_applies(kind, algorithm)) {
    fail(HM_ERR_INVALID_ARGUMENT, "{} has no algorithm '{}'", collective_name(kind),
         algorithm_name(algorithm));
  }
  std::lock_guard lock(algorithm_mutex_);
  forced_.set(kind, algorithm);
}

Prediction CommunicatorImpl::query_algorithm(CollectiveKind kind, std::size_t count,
                                             hm_dtype_t dtype, const CostModel* model) const {
  require(dtype_valid(dtype), "unknown dtype {} (valid: 0..{})", static_cast<int>(dtype),
          HM_DTYPE_COUNT - 1);
  double bytes = static_cast<double>(count) * static_cast<double>(dtype_size(dtype));
  if (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllgather ||
      kind == CollectiveKind::kAlltoall) {
    bytes *= size_;
  }
  Algorithm forced;
  {
    std::lock_guard lock(algorithm_mutex_);
    forced = forced_.get(kind);
  }
  return choose(hierarchy_, model != nullptr ? *model : cost_model_, kind, bytes, forced);
}

CommunicatorImpl::~CommunicatorImpl() { close(); }

Route CommunicatorImpl::peer_route(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  return transport_->route(peer);
}

std::string CommunicatorImpl::peer_link(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  return transport_->link(peer).description;
}

EngineStore CommunicatorImpl::engine_store() const {
  auto need_store = [](const std::shared_ptr<Rendezvous>& store) -> Rendezvous& {
    if (store == nullptr) {
      fail(HM_ERR_UNSUPPORTED,
           "a group engine needs the job's store, and this communicator has none");
    }
    return *store;
  };
  const std::string prefix = context_ + "/engine/";
  return {[store = store_, prefix, need_store](const std::string& key, const std::string& value) {
            need_store(store).set(prefix + key, value);
          },
          [store = store_, prefix, need_store, timeout = timeout_](const std::string& key) {
            return need_store(store).get(prefix + key, Deadline::after(timeout));
          }};
}

PeerEngine CommunicatorImpl::peer_engine(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  return engines_->for_peer(rank_, peer);
}

void CommunicatorImpl::check_usable() const {
  std::lock_guard lock(state_mutex_);
  if (closed_) fail(HM_ERR_ABORTED, "the communicator was destroyed");
  if (error_ == HM_ERR_ABORTED) fail(HM_ERR_ABORTED, "the communicator was {}", error_message_);
  if (error_ != HM_SUCCESS) fail(error_, "the communicator failed earlier: {}", error_message_);
}

void CommunicatorImpl::poison(hm_status_t status, const std::string& message) noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (error_ == HM_SUCCESS) {
      error_ = status;
      error_message_ = message;
    }
  }
  transport_->shutdown(status, message, ShutdownWait::kUntilReleased);
}

void CommunicatorImpl::abort() noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (error_ == HM_SUCCESS) {
      error_ = HM_ERR_ABORTED;
      error_message_ = "aborted (hm_comm_abort was called)";
    }
  }
  transport_->shutdown(HM_ERR_ABORTED, fmt::format("rank {}: hm_comm_abort was called", rank_),
                       ShutdownWait::kReturnAtOnce);
}

void CommunicatorImpl::revoke() noexcept {
  revoke_because(fmt::format("rank {} called hm_comm_revoke", rank_));
}

void CommunicatorImpl::revoke_because(const std::string& why) noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (closed_) return;
    if (error_ != HM_ERR_ABORTED) {
      // A revocation overrides an earlier failure: the caller revokes to start recovering, and
      // every later call should say so.
      error_ = HM_ERR_ABORTED;
      error_message_ = "revoked (" + why + ")";
    }
  }
  revoked_.notify_all();
  transport_->revoke(why);
}

Error CommunicatorImpl::settle(const Error& error) {
  if (error.status() != HM_ERR_PEER_FAILED) return error;
  std::unique_lock lock(state_mutex_);
  if (!revoked_.wait_for(lock, kRevocationGrace, [&] { return error_ == HM_ERR_ABORTED; })) {
    return error;
  }
  return Error(HM_ERR_ABORTED, fmt::format("the communicator was {}", error_message_));
}

void CommunicatorImpl::on_peer_failure(int peer, hm_status_t status,
                                       const std::string& message) noexcept {
  if (status == HM_ERR_ABORTED) {
    revoke_because(message);
    return;
  }
  std::lock_guard lock(state_mutex_);
  suspects_.insert(peer);
}

void CommunicatorImpl::close() noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (closed_) return;
    closed_ = true;
  }
  if (transport_) {
    transport_->set_failure_observer(nullptr);
    transport_->shutdown(HM_ERR_ABORTED, "the communicator was destroyed",
                         ShutdownWait::kUntilReleased);
  }
  queue_.stop();
  stream_waiter_.stop();
}

hm_status_t CommunicatorImpl::async_error() const {
  std::lock_guard lock(state_mutex_);
  return error_;
}

}  // namespace holmes::detail
