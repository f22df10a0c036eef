// The registry of every HOLMES_* setting: its name, type, default, range, scope and one line of
// documentation, in one declarative table (setting_registry.cpp), as NCCL keeps its NCCL_PARAM
// table. Everything that lists, reads, checks or documents a setting goes through it: the
// environment reader and the values (settings.hpp), hm_config_set, the dump of the settings in
// effect (holmes-run --print-settings, hm_config_dump) and the README's table, which is generated
// from it (holmes-run --print-settings --markdown) and checked by a test.
//
// To add a setting: add its Setting below (grouped by the layer that uses it), its row in the
// table (same order: a static_assert checks it), and read it where the communicator builds the
// typed slice of the layer that needs it (communicator/config.cpp, wiring.cpp, transport
// factory); then regenerate the README table.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace holmes {

enum class Setting : std::uint8_t {
  // Launch: who this rank is and how it meets the others.
  kRank,
  kWorldSize,
  kLocalRank,
  kStore,
  kStoreServe,
  kToken,
  kTopology,
  kTimeoutMs,
  kAddr,
  // Placement: where this rank sits.
  kHost,
  kIsland,
  kFabric,
  // Transports: which one, and each one's tunables.
  kTransport,
  kShaping,
  kSockets,
  kChecksum,
  kTcpFusedReduce,
  kTcpCongestion,
  kTcpNics,
  kShmRingBytes,
  kShmCma,
  kShmCmaMinBytes,
  kShmParkUs,
  kShmPoll,
  kShmPollUs,
  kShmFusedReduce,
  kIbDevice,
  kIbGidIndex,
  kIbSl,
  kIbTc,
  kIbTimeout,
  kIbRetryCnt,
  kIbSlots,
  kIbSlotBytes,
  kUcxTls,
  kUcxNetDevices,
  // Collectives: chunking, algorithms and the cost model that picks them.
  kChunkBytes,
  kAlgo,
  kGroupEngine,
  kIpcWindowBytes,
  kCostShm,
  kCostHostTcp,
  kCostIslandRdma,
  kCostIslandTcp,
  kCostInterIsland,
  kCostReduceGbps,
  kCostProbe,
  // Process: kernels and logging.
  kReduceIsa,
  kLogLevel,
};
inline constexpr std::size_t kSettingCount = static_cast<std::size_t>(Setting::kLogLevel) + 1;

enum class SettingType : std::uint8_t {
  kFlag,     // 0 or 1
  kInteger,  // a whole decimal number in [min, max]
  kChoice,   // one of `choices`
  kText,     // free text: a name, a path, or a list its reader parses (HOLMES_ALGO)
  kAddress,  // host:port or [v6]:port
  kLink,     // latency_us,GB/s: a latency >= 0 and a bandwidth > 0
  kRate,     // GB/s > 0
};

enum class SettingScope : std::uint8_t {
  kProcess,    // this rank's own value
  kAgreed,     // every rank of a communicator must hold the same value (HM_ERR_MISMATCH)
  kTransport,  // a tunable of one transport (`owner`), this rank's own
};

struct SettingSpec {
  Setting id;
  std::string_view name;  // the environment variable and the hm_config_set name
  SettingType type;
  SettingScope scope;
  std::string_view owner;  // what reads it: "launch", "tcp", "shm", "verbs", "cost model", ...
  // The value when nothing sets it, as text; empty when the default is computed or "unset"
  // means something of its own (the doc says what).
  std::string_view default_value;
  std::int64_t min = 0;  // kInteger
  std::int64_t max = 0;
  std::span<const std::string_view> choices = {};  // kChoice
  // Other variables read, in order, when `name` is unset (the launchers' own: RANK,
  // SLURM_PROCID, ...). HOLMES_STORE also falls back to MASTER_ADDR + MASTER_PORT.
  std::span<const std::string_view> aliases = {};
  std::string_view doc;  // one line, Markdown
};

std::span<const SettingSpec> all_settings();
const SettingSpec& setting_spec(Setting id);
// The setting called `name` (exactly: "HOLMES_SOCKETS"); nullptr when there is none.
const SettingSpec* find_setting(std::string_view name);

const char* setting_type_name(SettingType type);     // "flag", "integer", ...
const char* setting_scope_name(SettingScope scope);  // "process", "agreed", "transport"

}  // namespace holmes
