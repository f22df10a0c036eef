// How communicators come to be: the world, wired through the job's store, and the communicators
// derived from one (split.cpp, shrink.cpp, grow.cpp), wired through an exchange of their own.
#include <optional>

#include "bootstrap/auth.hpp"
#include "bootstrap/rendezvous.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/runtime.hpp"
#include "communicator/shaping.hpp"
#include "communicator/wiring.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "topology/merge.hpp"

namespace holmes::detail {
namespace {

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (auto b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::create_world(const ResolvedConfig& config) {
  if (config.serve_store) {
    Runtime::get().serve_store(config.store.host, config.store.port, config.token);
  }
  const Deadline deadline = Deadline::after(config.timeout);
  auto shared_store = store_for(config, deadline);
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
    router = wire(config.rank, config.world_size, options, config.settings,
                  locality_from(config, config.rank), gather, deadline, &facts);
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

  Params params = params_from(config, config.rank, config.world_size, options);
  params.router = std::move(router);
  params.facts = std::move(facts);
  params.declared = std::move(declared);
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

std::shared_ptr<Rendezvous> CommunicatorImpl::store_for(const ResolvedConfig& config,
                                                        const Deadline& deadline) {
  std::optional<std::string> route_hint;
  if (!config.store.host.empty()) route_hint = config.store.host;
  return std::make_shared<Rendezvous>(
      config.kv_store
          ? Rendezvous::brought(config.kv_store, route_hint)
          : Rendezvous::connect(config.store.host, config.store.port, config.token, deadline));
}

CommunicatorImpl::Params CommunicatorImpl::params_from(const ResolvedConfig& config, int rank,
                                                       int size, const TransportOptions& options) {
  Params params;
  params.rank = rank;
  params.size = size;
  params.context = options.context;
  params.timeout = config.timeout;
  params.chunk_bytes = config.chunk_bytes;
  params.transport_options = options;
  params.topology = config.topology;
  params.settings = config.settings;
  return params;
}

LocalitySource CommunicatorImpl::locality_from(const ResolvedConfig& config, int rank) {
  return [&config, rank] {
    std::string note;
    Locality mine = topology::rank_locality(config.topology,
                                            LocalOverrides::from_settings(config.settings), &note);
    if (!note.empty()) HM_LOG_INFO("rank {}: {}", rank, note);
    return mine;
  };
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::derive(int new_rank, int new_size,
                                                           std::string context,
                                                           const GatherStrings& gather,
                                                           const Deadline& deadline,
                                                           Lineage lineage) {
  TransportOptions options = transport_options_;
  options.context = std::move(context);
  WiringFacts facts;
  // Every old rank sits where it sat here.
  const Locality mine = facts_.localities.at(static_cast<std::size_t>(rank_));
  auto router = wire(
      new_rank, new_size, options, settings_, [&] { return mine; }, gather, deadline, &facts);
  // A subset's ranks all come from this communicator's job; a grown one's new ranks do not.
  const bool subset = lineage == Lineage::kSubset;
  auto links = topology_links(facts.localities, new_rank, topology_, shaping_mode(settings_),
                              subset ? &facts_.localities : nullptr);
  router->set_shaping(std::move(links.shapes));

  Params params;
  params.rank = new_rank;
  params.size = new_size;
  params.context = options.context;
  params.router = std::move(router);
  params.timeout = timeout_;
  params.chunk_bytes = chunk_bytes_;
  params.transport_options = std::move(options);
  params.topology = topology_;
  params.facts = std::move(facts);
  // Measured tier numbers go to a subset; joiners have none, and every rank must model the
  // links alike.
  if (subset) params.measured = measured_;
  params.declared = std::move(links.costs);
  params.settings = settings_;
  params.store = store_;
  return std::make_shared<CommunicatorImpl>(std::move(params));
}

}  // namespace holmes::detail
