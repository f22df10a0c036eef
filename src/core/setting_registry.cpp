#include "core/setting_registry.hpp"

#include <array>
#include <climits>

namespace holmes {
namespace {

using S = Setting;
using T = SettingType;
using Scope = SettingScope;
using V = std::string_view;

constexpr V kRankAliases[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
constexpr V kWorldSizeAliases[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
                                   "PMI_SIZE"};
constexpr V kLocalRankAliases[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"};
constexpr V kFabrics[] = {"ib", "roce", "ethernet"};
constexpr V kTransports[] = {"auto", "tcp", "shm", "ucx", "verbs"};
constexpr V kShapingModes[] = {"1", "0", "one-network"};
constexpr V kUcxTlsAliases[] = {"UCX_TLS"};
constexpr V kUcxNetDevicesAliases[] = {"UCX_NET_DEVICES"};
constexpr V kReduceIsas[] = {"auto", "portable", "avx2"};
constexpr V kGroupEngines[] = {"auto", "ring", "blockwise", "ipc", "nccl"};
constexpr V kLogLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;

// Rows by type: the fields each type uses.
constexpr SettingSpec integer(Setting id, V name, Scope scope, V owner, V default_value,
                              std::int64_t min, std::int64_t max, V doc,
                              std::span<const V> aliases = {}) {
  return {id, name, T::kInteger, scope, owner, default_value, min, max, {}, aliases, doc};
}
constexpr SettingSpec flag(Setting id, V name, Scope scope, V owner, V default_value, V doc) {
  return {id, name, T::kFlag, scope, owner, default_value, 0, 1, {}, {}, doc};
}
constexpr SettingSpec choice(Setting id, V name, Scope scope, V owner, V default_value,
                             std::span<const V> choices, V doc) {
  return {id, name, T::kChoice, scope, owner, default_value, 0, 0, choices, {}, doc};
}
constexpr SettingSpec text(Setting id, V name, Scope scope, V owner, V default_value, V doc,
                           std::span<const V> aliases) {
  return {id, name, T::kText, scope, owner, default_value, 0, 0, {}, aliases, doc};
}
constexpr SettingSpec typed(Setting id, V name, T type, Scope scope, V owner, V default_value,
                            V doc) {
  return {id, name, type, scope, owner, default_value, 0, 0, {}, {}, doc};
}

// Ranges follow the transports' and collectives' own limits (shm/layout.hpp, verbs/wire.hpp,
// verbs/qp_info.hpp); unit.SettingsTest.* checks that the defaults agree with the structs that hold
// them.
constexpr SettingSpec kTable[] = {
    // Launch.
    integer(S::kRank, "HOLMES_RANK", Scope::kProcess, "launch", "", 0, INT_MAX - 1,
            "this rank, in [0, world size); else torchrun's `RANK`, Slurm's `SLURM_PROCID`, Open "
            "MPI's `OMPI_COMM_WORLD_RANK`, `PMI_RANK`",
            kRankAliases),
    integer(S::kWorldSize, "HOLMES_WORLD_SIZE", Scope::kProcess, "launch", "", 1, INT_MAX,
            "the number of ranks; else `WORLD_SIZE`, `SLURM_NTASKS`, `OMPI_COMM_WORLD_SIZE`, "
            "`PMI_SIZE`",
            kWorldSizeAliases),
    integer(S::kLocalRank, "HOLMES_LOCAL_RANK", Scope::kProcess, "launch", "0", 0, INT_MAX - 1,
            "rank on this host (else `LOCAL_RANK`, `SLURM_LOCALID`, `OMPI_COMM_WORLD_LOCAL_RANK`); "
            "spreads ranks over RDMA ports",
            kLocalRankAliases),
    typed(S::kStore, "HOLMES_STORE", T::kAddress, Scope::kProcess, "launch", "",
          "rendezvous store `host:port` (also `[v6addr]:port`); else torchrun's `MASTER_ADDR` + "
          "`MASTER_PORT`"),
    flag(S::kStoreServe, "HOLMES_STORE_SERVE", Scope::kProcess, "launch", "",
         "`1`/`0`: whether this rank serves the store; unset: rank 0 does (holmes-run serves it "
         "itself and sets `0`)"),
    typed(S::kToken, "HOLMES_TOKEN", T::kText, Scope::kProcess, "launch", "",
          "job token; every store and data connection proves it by HMAC-SHA256 challenge-response, "
          "never sending it (the dump hides it)"),
    typed(S::kTopology, "HOLMES_TOPOLOGY", T::kText, Scope::kProcess, "launch", "",
          "topology file (`docs/topology.md`): a rank whose host it lists takes its island and "
          "fabric from it; the planner takes link classes, GPU models and NICs from it"),
    integer(S::kTimeoutMs, "HOLMES_TIMEOUT_MS", Scope::kProcess, "launch", "300000", 1, INT_MAX,
            "bound on every blocking wait, in milliseconds"),
    typed(S::kAddr, "HOLMES_ADDR", T::kText, Scope::kProcess, "launch", "",
          "address to listen on for peers; unset: the one this host uses to reach the store"),
    // Placement.
    typed(S::kHost, "HOLMES_HOST", T::kText, Scope::kProcess, "placement", "",
          "host name; unset: the hostname plus the boot id (`/proc/sys/kernel/random/boot_id`); "
          "how ranks in network namespaces describe an emulated cluster"),
    typed(S::kIsland, "HOLMES_ISLAND", T::kText, Scope::kProcess, "placement", "",
          "island (the hosts one RDMA fabric joins); unset: the topology file's, else the fabric "
          "and its subnet, else the host itself"),
    choice(S::kFabric, "HOLMES_FABRIC", Scope::kProcess, "placement", "", kFabrics,
           "this host's fabric; unset: the topology file's, else from `/sys/class/infiniband`"),
    // Transports.
    choice(S::kTransport, "HOLMES_TRANSPORT", Scope::kAgreed, "transport choice", "auto",
           kTransports,
           "`auto`: chosen per peer (same host shm, same island ucx or verbs, else tcp); a name "
           "forces it for every peer (testing); ranks that disagree fail init with "
           "`HM_ERR_MISMATCH` naming the peer"),
    choice(S::kShaping, "HOLMES_SHAPING", Scope::kProcess, "shaping", "", kShapingModes,
           "emulated links (`docs/topology.md`, \"Emulation: the shaping layer\"): unset: sends to "
           "ranks on other hosts are held to the topology's link rates / `emulation_scale` and "
           "latencies when the `HOLMES_TOPOLOGY` file has `emulation_scale` > 1; `1`: always "
           "(nominal link classes without a file); `0`: never; `one-network`: shaped, but every "
           "link to another host at the inter-island rate (NCCL's one network per job; the demo's "
           "naive baseline)"),
    integer(S::kSockets, "HOLMES_SOCKETS", Scope::kTransport, "tcp", "2", 1, 16,
            "tcp sockets per peer and direction"),
    flag(S::kChecksum, "HOLMES_CHECKSUM", Scope::kTransport, "tcp", "0",
         "`1`: a CRC32C after every tcp fragment; a corrupted chunk fails the receive "
         "(`HM_ERR_TRANSPORT`) naming the peer, never reduced (`docs/reliability.md`)"),
    flag(S::kTcpFusedReduce, "HOLMES_TCP_FUSED_REDUCE", Scope::kTransport, "tcp", "1",
         "`1`: a reduce-scatter step's chunk is reduced into its destination as each fragment "
         "lands, on the thread that reads the socket; `0`: received into scratch, then reduced by "
         "the collective. Results are bitwise the same; ranks may differ"),
    typed(S::kTcpCongestion, "HOLMES_TCP_CONGESTION", T::kText, Scope::kTransport, "tcp", "auto",
          "TCP congestion control of the tcp links: `auto` (links within one host get `cubic`, "
          "else `reno`; links between hosts keep the kernel's default), `system` (never set), or a "
          "name (`bbr`, `cubic`, `dctcp`, ...) for every link; a name the kernel refuses fails at "
          "start naming what is allowed"),
    typed(S::kTcpNics, "HOLMES_TCP_NICS", T::kText, Scope::kTransport, "tcp", "",
          "NICs the tcp links stripe over, each with its own connections and a share of every "
          "message by its rate: `eth0@25,eth1@25` (interface or address, `@Gbit/s` optional), "
          "`auto` (every interface up with an IPv4 address), `off`; unset: this host's NICs of an "
          "ethernet link class in the `HOLMES_TOPOLOGY` file when it lists two or more and this "
          "host has them, else the listen address alone"),
    integer(S::kShmRingBytes, "HOLMES_SHM_RING_BYTES", Scope::kTransport, "shm", "2097152",
            64 * kKiB, 256 * kMiB,
            "ring size per sending peer, rounded down to a power of two (shrunk for large jobs)"),
    flag(S::kShmCma, "HOLMES_SHM_CMA", Scope::kTransport, "shm", "1",
         "`0` turns cross-memory attach off (everything through the rings)"),
    integer(S::kShmCmaMinBytes, "HOLMES_SHM_CMA_MIN_BYTES", Scope::kTransport, "shm", "1048576", 1,
            std::int64_t{1} << 40, "smallest message sent by cross-memory attach"),
    integer(S::kShmParkUs, "HOLMES_SHM_PARK_US", Scope::kTransport, "shm", "2000", 0, 1000000,
            "how long a cross-memory message waits for its receive, and a stuck producer for "
            "fragments held in its ring, in microseconds"),
    flag(S::kShmPoll, "HOLMES_SHM_POLL", Scope::kTransport, "shm", "1",
         "`1`: waiting callers poll the rings themselves; `0`: they leave all progress to the "
         "progress thread"),
    integer(S::kShmPollUs, "HOLMES_SHM_POLL_US", Scope::kTransport, "shm", "1000", 0, 1000000,
            "how long a waiting caller polls (yielding between looks) before it sleeps, in "
            "microseconds"),
    flag(S::kShmFusedReduce, "HOLMES_SHM_FUSED_REDUCE", Scope::kTransport, "shm", "1",
         "`1`: a ring reduce-scatter step reduces each chunk straight from the shared-memory ring "
         "into its destination; `0`: copies it into scratch first. Results are bitwise the same; "
         "ranks may differ"),
    typed(S::kIbDevice, "HOLMES_IB_DEVICE", T::kText, Scope::kTransport, "verbs", "",
          "`device[:port][,device[:port]...]`: the RDMA ports to use; unset: the ACTIVE ones, "
          "spread by local rank"),
    integer(S::kIbGidIndex, "HOLMES_IB_GID_INDEX", Scope::kTransport, "verbs", "", 0, 65535,
            "RoCE GID table index; unset: the RoCE v2 IPv4-mapped one first"),
    integer(S::kIbSl, "HOLMES_IB_SL", Scope::kTransport, "verbs", "0", 0, 15,
            "InfiniBand service level"),
    integer(S::kIbTc, "HOLMES_IB_TC", Scope::kTransport, "verbs", "0", 0, 255,
            "traffic class (RoCE DSCP << 2)"),
    integer(S::kIbTimeout, "HOLMES_IB_TIMEOUT", Scope::kTransport, "verbs", "18", 1, 31,
            "local ACK timeout exponent: 4.096 us * 2^n (18: about 1 s)"),
    integer(S::kIbRetryCnt, "HOLMES_IB_RETRY_CNT", Scope::kTransport, "verbs", "7", 1, 7,
            "transport retries before a peer is declared unreachable"),
    integer(S::kIbSlots, "HOLMES_IB_SLOTS", Scope::kTransport, "verbs", "32", 4, 4096,
            "receive slots per data queue pair"),
    integer(S::kIbSlotBytes, "HOLMES_IB_SLOT_BYTES", Scope::kTransport, "verbs", "65536", 1024,
            16 * kMiB, "bytes per receive slot"),
    text(S::kUcxTls, "HOLMES_UCX_TLS", Scope::kTransport, "ucx", "",
         "UCX's transports (UCX's own `UCX_TLS`, read as an alias); unset: UCX's choice, less "
         "its shared-memory transports (`^sm`) where all of a rank's UCX peers are on other hosts",
         kUcxTlsAliases),
    text(S::kUcxNetDevices, "HOLMES_UCX_NET_DEVICES", Scope::kTransport, "ucx", "",
         "UCX's network devices (UCX's own `UCX_NET_DEVICES`, read as an alias); unset: the "
         "interface Holmes listens on and the RDMA ports",
         kUcxNetDevicesAliases),
    // Collectives.
    integer(S::kChunkBytes, "HOLMES_CHUNK_BYTES", Scope::kAgreed, "collectives", "524288", 4096,
            64 * kMiB, "pipeline chunk size of the collectives"),
    typed(S::kAlgo, "HOLMES_ALGO", T::kText, Scope::kAgreed, "collectives", "auto",
          "force algorithms: one name for every collective that has it (`ring`, `rd`, `rhd`, "
          "`tree`, `chain`, `pairwise`, `hier`, `dissemination`, `shm`) or a list "
          "`allreduce=hier,broadcast=tree`; `auto`: the cost model picks"),
    choice(S::kGroupEngine, "HOLMES_GROUP_ENGINE", Scope::kAgreed, "collectives", "auto",
           kGroupEngines,
           "what carries the phases inside each host and island (a hierarchical "
           "collective's groups, or a whole one-island communicator): `auto` (device buffers: "
           "`ipc` inside a host where every member maps the others' memory, else NCCL where "
           "Holmes has NCCL and a GPU, else `ring`; host buffers: the `two-level` engine in an "
           "island of hosts with the same number of ranks each, else `ring`), `ring` (Holmes's "
           "own, device buffers staged through pinned memory), "
           "`blockwise` (each block reduced to its owner and broadcast from it, NCCL's "
           "decomposition over Holmes's transports; host buffers too), `ipc` (inside a host, "
           "device to device through CUDA IPC; HM_ERR_UNSUPPORTED where the members cannot map "
           "each other's memory), `nccl` (HM_ERR_UNSUPPORTED without NCCL)"),
    integer(S::kIpcWindowBytes, "HOLMES_IPC_WINDOW_BYTES", Scope::kAgreed, "collectives",
            "67108864", 64 * kKiB, 4096 * kMiB,
            "device memory each rank shares with the others of its host for the `ipc` engine "
            "(two halves, each holding one round of a phase): larger windows take fewer rounds"),
    typed(S::kCostShm, "HOLMES_COST_SHM", T::kLink, Scope::kAgreed, "cost model", "10,4",
          "the same-host tier over shared memory, as `latency_us,GB/s`; set, it wins over the "
          "probe and the topology file"),
    typed(S::kCostHostTcp, "HOLMES_COST_HOST_TCP", T::kLink, Scope::kAgreed, "cost model", "25,1",
          "the same-host tier over tcp (forced)"),
    typed(S::kCostIslandRdma, "HOLMES_COST_ISLAND_RDMA", T::kLink, Scope::kAgreed, "cost model",
          "5,12", "hosts of one RDMA island (ucx, verbs)"),
    typed(S::kCostIslandTcp, "HOLMES_COST_ISLAND_TCP", T::kLink, Scope::kAgreed, "cost model",
          "50,1.25", "hosts of one island over tcp"),
    typed(S::kCostInterIsland, "HOLMES_COST_INTER_ISLAND", T::kLink, Scope::kAgreed, "cost model",
          "100,1.25", "links between islands"),
    typed(S::kCostReduceGbps, "HOLMES_COST_REDUCE_GBPS", T::kRate, Scope::kAgreed, "cost model",
          "3", "the CPU reduction speed, GB/s of result"),
    flag(S::kCostProbe, "HOLMES_COST_PROBE", Scope::kAgreed, "cost model", "0",
         "`1`: measure the tiers when the communicator is created (one host's ranks, then one "
         "pair of ranks per other tier, each at a time: 8-byte, 64 KiB and 1 MiB exchanges; every "
         "rank's reduction) and use the numbers, except for tiers a `HOLMES_COST_*` setting "
         "gives; about 25 ms on one host, 150 ms with a 1 Gbit/s tier"),
    // Process.
    choice(S::kReduceIsa, "HOLMES_REDUCE_ISA", Scope::kProcess, "reduction", "auto", kReduceIsas,
           "CPU reduction kernels: `auto` (AVX2+F16C when the CPU has them), `portable`, `avx2`; "
           "results are bitwise the same; one choice per process"),
    choice(S::kLogLevel, "HOLMES_LOG_LEVEL", Scope::kProcess, "logging", "warn", kLogLevels,
           "`info` prints each rank's per-peer transport line; at `debug` a segmented hierarchical "
           "allreduce, allgather or reduce-scatter logs how long its lane across islands carried "
           "data, at `trace` when each phase of each segment ran"),
};

constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<std::size_t>(kTable[i].id) != i) return false;
  }
  return std::size(kTable) == kSettingCount;
}
static_assert(in_order(), "kTable lists every Setting once, in the enum's order");

}  // namespace

std::span<const SettingSpec> all_settings() { return kTable; }

const SettingSpec& setting_spec(Setting id) { return kTable[static_cast<std::size_t>(id)]; }

const SettingSpec* find_setting(std::string_view name) {
  for (const auto& spec : kTable) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

const char* setting_type_name(SettingType type) {
  switch (type) {
    case SettingType::kFlag:
      return "flag";
    case SettingType::kInteger:
      return "integer";
    case SettingType::kChoice:
      return "choice";
    case SettingType::kText:
      return "text";
    case SettingType::kAddress:
      return "host:port";
    case SettingType::kLink:
      return "latency_us,GB/s";
    case SettingType::kRate:
      return "GB/s";
  }
  return "?";
}

const char* setting_scope_name(SettingScope scope) {
  switch (scope) {
    case SettingScope::kProcess:
      return "process";
    case SettingScope::kAgreed:
      return "agreed";
    case SettingScope::kTransport:
      return "transport";
  }
  return "?";
}

}  // namespace holmes
