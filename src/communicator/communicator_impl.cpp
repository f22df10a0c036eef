#include "communicator/communicator_impl.hpp"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <optional>

#include "bootstrap/auth.hpp"
#include "bootstrap/rendezvous.hpp"
#include "collectives/algorithms.hpp"
#include "collectives/staging.hpp"
#include "communicator/runtime.hpp"
#include "communicator/shaping.hpp"
#include "communicator/wiring.hpp"
#include "core/bytes.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "topology/merge.hpp"
#include "transports/shared_board.hpp"

namespace holmes::detail {
namespace {

// Bytes a single buffer may span. No process has more than 2^48 bytes of address space (x86-64
// and arm64 user space), so a larger count is a bug in the caller (often a negative number
// converted to size_t), refused before it could overflow pointer arithmetic or a memcpy.
constexpr std::size_t kMaxBufferBytes = std::size_t{1} << 48;
// Calls up to this size drive their transport from the caller's thread (begin_caller_drive):
// they are over in microseconds to a few milliseconds and wait polling, and each of their steps
// would otherwise cost two thread wake-ups (the transport's, then the caller's). 4-rank allreduce
// here (BENCHMARKS.md), driving against not: tcp 256 KiB 0.71 against 0.36 GB/s busbw, 1 MiB
// 1.16 against 0.74; shm 256 KiB 2.3 against 1.9, 1 MiB 6.4 against 4.9; from 2 MiB on it made
// no difference or cost a little, so larger calls leave the transport's thread to move data
// while the caller reduces.
constexpr std::size_t kCallerDriveMaxBytes = std::size_t{1} << 20;
// Device buffers stage through host memory, and a caller waiting for a staging copy sleeps on a
// condition variable: while it drives, that holds the tcp io thread parked for up to its lease
// (1 ms) per wait, so only small device calls drive.
constexpr std::size_t kDeviceCallerDriveMaxBytes = std::size_t{64} << 10;
// How long a call that lost a peer waits for that peer's revocation notice (settle): the notice
// travels on the tcp control plane and can land a little after the shm endpoint's close, as
// the tcp transport's own notice grace (kNoticeGrace) allows for a reset connection.
constexpr std::chrono::milliseconds kRevocationGrace{50};

// The sequence number of the next point-to-point message with `peer` and `tag`, counted on.
std::uint64_t next_p2p(std::vector<std::uint64_t>& untagged,
                       std::map<std::pair<int, std::uint32_t>, std::uint64_t>& tagged, int peer,
                       std::uint32_t tag) {
  if (tag == 0) return untagged[static_cast<std::size_t>(peer)]++;
  return tagged[{peer, tag}]++;
}

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (auto b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

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
  adopt_measurements();
  // Unset in close(), before any member the observer touches is gone.
  transport_->set_failure_observer(
      [this](int peer, hm_status_t status, const std::string& message) {
        on_peer_failure(peer, status, message);
      });
}

void CommunicatorImpl::adopt_measurements() {
  if (measured_.reduce_gbytes_per_s && !(cost_model_.set_by_env & CostModel::kSetReduce)) {
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
  // Each tier's numbers follow the slowest transport any rank uses on it: every rank knows the
  // same facts, so every rank makes the same choice. Per tier, a HOLMES_COST_* variable wins,
  // then the probe's numbers, then the topology file's, then the defaults.
  const auto pick = [this](Tier tier, const LinkCost& nominal, unsigned env_bit) {
    if (cost_model_.set_by_env & env_bit) return nominal;
    if (measured_[tier]) return *measured_[tier];
    return declared_[tier].value_or(nominal);
  };
  const bool host_tcp = facts_.host_tier_tcp;
  const bool island_tcp = facts_.island_tier_tcp || !facts_.island_tier_rdma;
  const LinkCost same_host =
      pick(Tier::kSameHost, host_tcp ? cost_model_.host_tcp : cost_model_.shm,
           host_tcp ? CostModel::kSetHostTcp : CostModel::kSetShm);
  const LinkCost same_island =
      pick(Tier::kSameIsland, island_tcp ? cost_model_.island_tcp : cost_model_.island_rdma,
           island_tcp ? CostModel::kSetIslandTcp : CostModel::kSetIslandRdma);
  const LinkCost other_island =
      pick(Tier::kOtherIsland, cost_model_.inter_island, CostModel::kSetInterIsland);
  Hierarchy h = holmes::make_hierarchy(hosts, islands, same_host, same_island, other_island);
  // Every rank has a board or none: it follows from the routes, which all ranks agree on.
  if (SharedBoard* board = transport_->shared_board()) h.board_bytes = board->slot_bytes();
  return h;
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
  collective(call, true);
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
  return hierarchy_.link(rank_, peer);
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
                                             hm_dtype_t dtype) const {
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
  return choose(hierarchy_, cost_model_, kind, bytes, forced);
}

CommunicatorImpl::~CommunicatorImpl() { close(); }

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::create_world(const ResolvedConfig& config) {
  if (config.serve_store) {
    Runtime::get().serve_store(config.store.host, config.store.port, config.token);
  }
  const Deadline deadline = Deadline::after(config.timeout);
  std::optional<std::string> route_hint;
  if (!config.store.host.empty()) route_hint = config.store.host;
  auto shared_store = std::make_shared<Rendezvous>(
      config.kv_store
          ? Rendezvous::brought(config.kv_store, route_hint)
          : Rendezvous::connect(config.store.host, config.store.port, config.token, deadline));
  Rendezvous& store = *shared_store;
  // Ranks may create several worlds over one store (tests, restarts); the n-th init of every
  // rank meets the n-th init of the others.
  const auto generation = store.add(fmt::format("holmes/rank{}/inits", config.rank), 1);
  const std::string prefix = fmt::format("holmes/world{}/", generation);
  // Rank 0 names this job instance; the name is bound into every data-plane proof, so ranks of
  // one job never accept connections meant for another that shares the token.
  std::string job;
  if (config.rank == 0) {
    job = hex(auth::random_nonce());
    store.set(prefix + "job", job);
  } else {
    job = store.get(prefix + "job", deadline);
  }
  const TransportOptions options =
      transport_options_for(config, store, fmt::format("{}/world{}", job, generation));
  // Exchanges go through the store: every rank sets its string, then reads everyone's. The
  // world size travels along, so ranks started with different sizes fail, naming each other.
  int round = 0;
  const GatherStrings gather = [&](const std::string& mine) {
    const std::string base = prefix + fmt::format("exchange{}/", round++);
    store.set(base + std::to_string(config.rank), fmt::format("{} {}", config.world_size, mine));
    std::vector<std::string> all(static_cast<std::size_t>(config.world_size));
    for (int i = 0; i < config.world_size; ++i) {
      const auto value = store.get(base + std::to_string(i), deadline);
      const auto space = value.find(' ');
      const std::string their_size = value.substr(0, space);
      if (space == std::string::npos || their_size != std::to_string(config.world_size)) {
        fail(HM_ERR_MISMATCH, "rank {} was started with world size {}, this rank (rank {}) with {}",
             i, their_size, config.rank, config.world_size);
      }
      all[static_cast<std::size_t>(i)] = value.substr(space + 1);
    }
    return all;
  };
  std::unique_ptr<Router> router;
  WiringFacts facts;
  TierCosts declared;
  std::optional<Error> failure;
  try {
    const LocalitySource locality = [&] {
      std::string note;
      Locality mine = topology::rank_locality(
          config.topology, LocalOverrides::from_settings(config.settings), &note);
      if (!note.empty()) HM_LOG_INFO("rank {}: {}", config.rank, note);
      return mine;
    };
    router = wire(config.rank, config.world_size, options, config.settings, locality, gather,
                  deadline, &facts);
    auto links = topology_links(facts.localities, config.rank, config.topology,
                                shaping_mode(config.settings));
    router->set_shaping(std::move(links.shapes));
    declared = std::move(links.costs);
  } catch (const Error& e) {
    failure = e;  // every rank finished the exchanges: leave together all the same
  }
  // Leave together, failed or not: nobody returns while another rank may still need the store
  // (which rank 0's process serves, and which goes when it exits). After a failure the wait is
  // short and its own errors are dropped: the failure is what the caller must hear about.
  try {
    if (store.add(prefix + "joined", 1) == config.world_size) store.set(prefix + "ready", "1");
    store.get(prefix + "ready", failure ? Deadline::after(std::chrono::seconds(5)) : deadline);
  } catch (const Error&) {
    if (!failure) throw;
  }
  if (failure) throw *failure;

  Params params;
  params.rank = config.rank;
  params.size = config.world_size;
  params.context = options.context;
  params.router = std::move(router);
  params.timeout = config.timeout;
  params.chunk_bytes = config.chunk_bytes;
  params.transport_options = options;
  params.topology = config.topology;
  params.facts = std::move(facts);
  params.declared = std::move(declared);
  params.settings = config.settings;
  params.store = std::move(shared_store);
  auto comm = std::make_shared<CommunicatorImpl>(std::move(params));
  if (comm->cost_model_.probe) comm->calibrate();
  return comm;
}

TransportOptions CommunicatorImpl::transport_options_for(const ResolvedConfig& config,
                                                         const Rendezvous& store,
                                                         std::string context) {
  TransportOptions options;
  options.listen_host = config.local_addr.value_or(store.default_listen_address());
  options.token = config.token;
  options.context = std::move(context);
  options.connect_timeout = config.timeout;
  options.sockets_per_peer = config.sockets_per_peer;
  options.checksum = config.checksum;
  options.tcp_fused_reduce = config.tcp_fused_reduce;
  options.tcp_congestion = config.tcp_congestion;
  return options;
}

std::vector<std::string> CommunicatorImpl::allgather_strings(const std::string& mine) {
  // Lengths first, then every string padded to the longest.
  const auto length = static_cast<std::uint64_t>(mine.size());
  std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size_));
  CollectiveCall call;
  call.kind = CollectiveKind::kSplit;
  call.send = &length;
  call.recv = lengths.data();
  call.count = 1;
  call.dtype = HM_UINT64;
  collective(call, true);
  const std::uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  require(longest <= (64u << 20), "exchange of {} bytes per rank is too large", longest);
  std::string padded = mine;
  padded.resize(longest);
  std::string all(longest * static_cast<std::size_t>(size_), '\0');
  call.send = padded.data();
  call.recv = all.data();
  call.count = longest;
  call.dtype = HM_UINT8;
  collective(call, true);
  std::vector<std::string> out;
  for (int i = 0; i < size_; ++i) {
    out.push_back(
        all.substr(static_cast<std::size_t>(i) * longest, lengths[static_cast<std::size_t>(i)]));
  }
  return out;
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::split(int color, int key) {
  check_usable();
  const bool bad_color = color < 0 && color != HM_COLOR_UNDEFINED;
  const bool member = color >= 0;
  const std::uint64_t index = splits_++;

  // Every rank takes part in every exchange, even with a bad color or none, so that no rank is
  // left waiting; a bad color is reported afterwards.
  const auto colors = allgather_strings(fmt::format("{} {}", member ? color : -1, key));
  struct Member {
    int key;
    int parent_rank;
  };
  std::vector<Member> members;
  for (int i = 0; i < size_; ++i) {
    int their_color = -1;
    int their_key = 0;
    if (std::sscanf(colors[static_cast<std::size_t>(i)].c_str(), "%d %d", &their_color,
                    &their_key) != 2) {
      fail(HM_ERR_INTERNAL, "comm_split: rank {} sent a malformed color", i);
    }
    if (member && their_color == color) members.push_back({their_key, i});
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.parent_rank < b.parent_rank;
  });
  int new_rank = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].parent_rank == rank_) new_rank = static_cast<int>(i);
  }
  if (!member) {
    // Stay in step with the members' exchanges, which go through this communicator.
    for (int i = 0; i < kWiringExchanges; ++i) allgather_strings("");
    require(!bad_color, "hm_comm_split: color {} is negative and not HM_COLOR_UNDEFINED", color);
    return nullptr;
  }
  TransportOptions options = transport_options_;
  options.context = fmt::format("{}/split{}:{}", context_, index, color);
  const GatherStrings gather = [&](const std::string& mine) {
    const auto all = allgather_strings(mine);
    std::vector<std::string> ours;
    for (const auto& m : members) ours.push_back(all[static_cast<std::size_t>(m.parent_rank)]);
    return ours;
  };
  WiringFacts facts;
  // A split's ranks sit where they sat in the parent.
  const Locality mine = facts_.localities.at(static_cast<std::size_t>(rank_));
  auto router = wire(
      new_rank, static_cast<int>(members.size()), options, settings_, [&] { return mine; }, gather,
      Deadline::after(timeout_), &facts);
  auto links = topology_links(facts.localities, new_rank, topology_, shaping_mode(settings_),
                              &facts_.localities);
  router->set_shaping(std::move(links.shapes));

  Params params;
  params.rank = new_rank;
  params.size = static_cast<int>(members.size());
  params.context = options.context;
  params.router = std::move(router);
  params.timeout = timeout_;
  params.chunk_bytes = chunk_bytes_;
  params.transport_options = transport_options_;
  params.topology = topology_;
  params.facts = std::move(facts);
  params.measured = measured_;
  params.declared = std::move(links.costs);
  params.settings = settings_;
  params.store = store_;
  return std::make_shared<CommunicatorImpl>(std::move(params));
}

Route CommunicatorImpl::peer_route(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  return transport_->route(peer);
}

std::string CommunicatorImpl::peer_link(int peer) const {
  require(peer >= 0 && peer < size_, "peer {} is outside [0, {})", peer, size_);
  return transport_->link(peer).description;
}

void CommunicatorImpl::validate(const CollectiveCall& call) const {
  const char* name = collective_name(call.kind);
  require(dtype_valid(call.dtype), "{}: unknown dtype {} (valid: 0..{})", name,
          static_cast<int>(call.dtype), HM_DTYPE_COUNT - 1);
  require(op_valid(call.op), "{}: unknown reduction op {} (valid: 0..{})", name,
          static_cast<int>(call.op), HM_OP_COUNT - 1);
  require(call.root >= 0 && call.root < size_, "{}: root {} is outside [0, {})", name, call.root,
          size_);
  // Elements in the largest buffer the call touches.
  const std::size_t es = dtype_size(call.dtype);
  const bool scaled = call.kind == CollectiveKind::kReduceScatter ||
                      call.kind == CollectiveKind::kAllgather ||
                      call.kind == CollectiveKind::kAlltoall;
  const std::size_t factor = scaled ? static_cast<std::size_t>(size_) : 1;
  require(call.count <= kMaxBufferBytes / es / factor,
          "{}: count {} of {} x {} ranks overflows the address space", name, call.count,
          dtype_name(call.dtype), factor);
  if (call.count == 0) return;
  switch (call.kind) {
    case CollectiveKind::kBroadcast:
      require(call.recv != nullptr, "{}: buffer is NULL with count {}", name, call.count);
      break;
    case CollectiveKind::kReduce:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr || rank_ != call.root,
              "{}: recvbuf is NULL on the root (rank {}) with count {}", name, rank_, call.count);
      break;
    case CollectiveKind::kBarrier:
      break;
    default:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr, "{}: recvbuf is NULL with count {}", name, call.count);
  }
}

DeviceMemory* CommunicatorImpl::device_of(const CollectiveCall& call) const {
  DeviceMemory* device = Runtime::get().device_memory();
  if (device == nullptr || call.count == 0) return nullptr;
  const bool send_on_device = call.send != nullptr && device->is_device(call.send);
  const bool recv_on_device = call.recv != nullptr && device->is_device(call.recv);
  if (call.send != nullptr && call.recv != nullptr && send_on_device != recv_on_device) {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: {} is device memory but {} is host memory",
         collective_name(call.kind), send_on_device ? "sendbuf" : "recvbuf",
         send_on_device ? "recvbuf" : "sendbuf");
  }
  if (!send_on_device && !recv_on_device) return nullptr;
  return &device->bound_to(send_on_device ? call.send : call.recv);
}

StagingPool& CommunicatorImpl::staging(DeviceMemory& device) {
  if (!staging_) staging_ = std::make_unique<StagingPool>(device);
  return *staging_;
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

void CommunicatorImpl::execute(const CollectiveCall& call, std::uint64_t sequence,
                               DeviceMemory* device) {
  check_usable();
  // The split exchanges always take the plain ring: they run before anything else is agreed.
  // So does the link probe: it is what gives the model its numbers.
  const bool internal =
      call.kind == CollectiveKind::kSplit || call.kind == CollectiveKind::kLinkProbe;
  const Algorithm algorithm =
      internal ? Algorithm::kRing : query_algorithm(call.kind, call.count, call.dtype).algorithm;
  // The algorithm is part of the signature: ranks that chose differently (a different
  // HOLMES_ALGO or cost numbers) fail with HM_ERR_MISMATCH where their messages meet.
  const auto signature =
      collective_signature(call.kind, call.count, call.dtype, call.op, call.root) ^
      (static_cast<std::uint32_t>(algorithm) * 0x9e3779b9u);
  CollectiveContext ctx(
      *transport_, rank_, size_, sequence, signature, timeout_, chunk_bytes_,
      OperationName{collective_name(call.kind), sequence, algorithm_name(algorithm), rank_},
      CollectiveResources{&scratch_, &progress_, device,
                          device != nullptr ? &staging(*device) : nullptr});
  // A small call is over in microseconds, waits polling all along and never computes for long:
  // its thread drives the transport, so peers need not wake the transport's thread meanwhile.
  // (The shared-memory allreduce sends no messages: nothing to drive.)
  const std::size_t call_bytes = call.count * dtype_size(call.dtype);
  const bool drive =
      call_bytes <= (device != nullptr ? kDeviceCallerDriveMaxBytes : kCallerDriveMaxBytes) &&
      algorithm != Algorithm::kSharedMemory;
  struct DriveScope {
    CallerDrive* transport;
    explicit DriveScope(CallerDrive* t) : transport(t) {
      if (transport != nullptr) transport->begin_caller_drive();
    }
    ~DriveScope() {
      if (transport != nullptr) transport->end_caller_drive();
    }
    DriveScope(const DriveScope&) = delete;
    DriveScope& operator=(const DriveScope&) = delete;
  } scope(drive ? transport_.get() : nullptr);
  const AlgorithmEntry* entry = find_algorithm(call.kind, algorithm);
  if (entry == nullptr) {
    fail(HM_ERR_INTERNAL, "{} has no algorithm '{}'", collective_name(call.kind),
         algorithm_name(algorithm));
  }
  try {
    entry->run(ctx, hierarchy_, cost_model_, call);
  } catch (const Error& failure) {
    const Error e = settle(failure);
    poison(e.status(), e.what());
    throw e;
  } catch (const std::bad_alloc&) {
    poison(HM_ERR_OUT_OF_MEMORY, "out of memory");
    throw Error(HM_ERR_OUT_OF_MEMORY,
                fmt::format("{}: out of memory for scratch buffers", collective_name(call.kind)));
  }
}

std::shared_ptr<RequestImpl> CommunicatorImpl::collective(const CollectiveCall& call,
                                                          bool blocking) {
  validate(call);
  DeviceMemory* device = device_of(call);
  check_usable();
  const std::uint64_t sequence = next_sequence_++;
  if (blocking && queue_.idle()) {
    execute(call, sequence, device);
    return nullptr;
  }
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->request = std::make_shared<Completion>();
  request->collective = true;
  request->what = collective_name(call.kind);
  queue_.submit([this, call, sequence, device, done = request->request] {
    try {
      execute(call, sequence, device);
      done->complete();
    } catch (const Error& e) {
      done->complete(e.status(), e.what());
    } catch (const std::exception& e) {
      done->complete(HM_ERR_INTERNAL, e.what());
    }
  });
  if (blocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

std::shared_ptr<RequestImpl> CommunicatorImpl::point_to_point(bool is_send, const void* buffer,
                                                              std::size_t count, hm_dtype_t dtype,
                                                              int peer, bool blocking,
                                                              std::uint32_t user_tag) {
  const char* name = is_send ? "send" : "recv";
  const bool any_source = peer == HM_ANY_SOURCE;
  require(user_tag <= kMaxUserTag, "{}: tag {} is outside [0, {}]", name, user_tag, kMaxUserTag);
  require(dtype_valid(dtype), "{}: unknown dtype {} (valid: 0..{})", name, static_cast<int>(dtype),
          HM_DTYPE_COUNT - 1);
  require(!(any_source && is_send), "send: HM_ANY_SOURCE names no peer (it is for receives)");
  require(!any_source || size_ > 1,
          "recv from HM_ANY_SOURCE: rank {} is alone in its communicator, nobody can send", rank_);
  require(any_source || (peer >= 0 && peer < size_), "{}: peer {} is outside [0, {})", name, peer,
          size_);
  require(peer != rank_, "{}: peer {} is this rank; messages to self are not supported", name,
          peer);
  require(count <= kMaxBufferBytes / dtype_size(dtype), "{}: count {} of {} overflows", name, count,
          dtype_name(dtype));
  require(buffer != nullptr || count == 0, "{}: buffer is NULL with count {}", name, count);
  check_usable();
  const std::size_t bytes = count * dtype_size(dtype);
  // Messages between two ranks are matched in order per tag: the n-th send to a peer with a tag
  // meets that peer's n-th receive from us with that tag. The signature lets the receiver check
  // count and dtype.
  const auto signature = collective_signature(CollectiveKind::kBarrier, count, dtype, -1, -1);
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->peer = any_source ? -1 : peer;
  request->receive = !is_send;
  DeviceMemory* device = Runtime::get().device_memory();
  if (device != nullptr) {
    device = bytes > 0 && device->is_device(buffer) ? &device->bound_to(buffer) : nullptr;
  }
  // Device buffers travel through a pinned slot: copied out before the send, in after the
  // receive (in wait()).
  std::shared_ptr<std::byte> slot;
  if (device != nullptr) slot = staging(*device).acquire(bytes, Deadline::after(timeout_));
  if (is_send) {
    const auto tag = p2p_tag(user_tag, next_p2p(sent_to_, tagged_sent_to_, peer, user_tag));
    request->what = fmt::format("send to rank {}", peer);
    const auto* data = static_cast<const std::byte*>(buffer);
    if (slot) {
      device->to_host(slot.get(), buffer, bytes);
      data = slot.get();
    }
    request->request = transport_->isend(peer, tag, signature, {data, bytes});
    if (slot) request->request->on_complete([slot](const Completion&) {});
  } else {
    auto* target = static_cast<std::byte*>(const_cast<void*>(buffer));
    const std::span<std::byte> into{slot ? slot.get() : target, bytes};
    if (any_source) {
      // Posted once the arrival order names its message (resolve_source).
      request->what = user_tag == 0 ? std::string("recv from any source")
                                    : fmt::format("recv from any source with tag {}", user_tag);
      request->any = std::make_unique<AnySourceReceive>(
          AnySourceReceive{transport_->arrivals().expect_any(user_tag), into, signature});
    } else {
      const auto tag = p2p_tag(user_tag, transport_->arrivals().claim(peer, user_tag));
      request->what = fmt::format("recv from rank {}", peer);
      request->request = transport_->irecv(peer, tag, signature, into);
    }
    if (slot) {
      request->finish = [device, target, slot, bytes]() mutable {
        device->from_host(target, slot.get(), bytes);
        slot.reset();
      };
    }
  }
  if (blocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

void CommunicatorImpl::wait(RequestImpl& r) {
  if (r.collective) {
    // The worker bounds each of its own waits by the timeout; leave room for the operations
    // queued ahead of this one.
    const auto ahead = static_cast<long long>(queue_.pending()) + 1;
    const auto bound = timeout_ * ahead + std::chrono::seconds(5);
    if (!r.request->wait_until(Deadline::after(bound))) {
      const auto message =
          fmt::format("{}: no result after {} ms (worker stuck)", r.what, bound.count());
      poison(HM_ERR_TIMEOUT, message);
      r.request->wait_until(Deadline::after(std::chrono::seconds(30)));
      fail(HM_ERR_TIMEOUT, "{}", message);
    }
    if (r.request->status() != HM_SUCCESS) throw Error(r.request->status(), r.request->message());
    return;
  }
  if (r.any) resolve_source(r, /*block=*/true);
  if (!r.request->wait_until(Deadline::after(timeout_), transport_->yield_before_sleep(r.peer))) {
    const auto message = fmt::format("{} on rank {}: timed out after {} ms ({})", r.what, rank_,
                                     timeout_.count(), transport_->link(r.peer).description);
    poison(HM_ERR_TIMEOUT, message);
    fail(HM_ERR_TIMEOUT, "{}", message);
  }
  if (r.request->status() != HM_SUCCESS) {
    const Error e = settle(Error(r.request->status(), fmt::format("{} on rank {}: {}", r.what,
                                                                  rank_, r.request->message())));
    poison(e.status(), e.what());
    throw e;
  }
  if (r.finish) {
    auto finish = std::move(r.finish);
    r.finish = nullptr;
    finish();
  }
}

bool CommunicatorImpl::test(RequestImpl& r) {
  if (r.any && !resolve_source(r, /*block=*/false)) return false;
  if (!r.request->done()) return false;
  wait(r);  // done: returns at once, or throws its error
  return true;
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
}

hm_status_t CommunicatorImpl::async_error() const {
  std::lock_guard lock(state_mutex_);
  return error_;
}

}  // namespace holmes::detail
