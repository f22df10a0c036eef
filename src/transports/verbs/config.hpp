// Tunables of the verbs transport, built by the communicator from its settings
// (communicator/transport_setup.cpp; the ranges and documentation are in
// core/setting_registry.cpp); nothing here reads the environment:
//   HOLMES_IB_DEVICE      device[:port][,device[:port]...]  which port(s); default: auto
//   HOLMES_IB_GID_INDEX   GID table index (RoCE); default: auto (RoCE v2, IPv4-mapped first)
//   HOLMES_IB_SLOTS       receive slots per data queue pair, 4..4096 (default 32)
//   HOLMES_IB_SLOT_BYTES  bytes per data slot, 1 KiB..16 MiB (default 64 KiB)
//   HOLMES_IB_SL          InfiniBand service level, 0..15 (default 0)
//   HOLMES_IB_TC          traffic class (RoCE DSCP << 2), 0..255 (default 0)
//   HOLMES_IB_TIMEOUT     local ACK timeout exponent: 4.096 us * 2^n, 1..31 (default 18, ~1 s)
//   HOLMES_IB_RETRY_CNT   transport retries before a peer is declared unreachable, 1..7 (7)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace holmes::verbs {

struct VerbsConfig {
  std::uint32_t data_slots = 32;
  std::uint32_t slot_bytes = 64u << 10;
  // Slots of the direction that only returns credits and says goodbye.
  std::uint32_t control_slots = 8;
  std::uint8_t service_level = 0;
  std::uint8_t traffic_class = 0;
  std::uint8_t ack_timeout = 18;
  std::uint8_t retry_count = 7;
  // How long a closing endpoint waits for its goodbyes to be acknowledged before it destroys
  // its queue pairs (a dead peer never acknowledges).
  std::chrono::milliseconds goodbye_wait{2000};
};

// `config` itself; throws HM_ERR_INVALID_ARGUMENT for slot counts or sizes the transport cannot
// run with.
const VerbsConfig& checked_verbs_config(const VerbsConfig& config);

// HOLMES_IB_DEVICE and HOLMES_IB_GID_INDEX (unset: automatic), and the local rank that spreads a
// host's ranks over its ports (HOLMES_LOCAL_RANK, LOCAL_RANK, SLURM_LOCALID,
// OMPI_COMM_WORLD_LOCAL_RANK; 0).
struct PortPreferences {
  std::optional<std::string> device;
  std::optional<int> gid_index;
  int local_rank = 0;
};

}  // namespace holmes::verbs
