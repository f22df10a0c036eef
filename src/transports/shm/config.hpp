// The shm transport's settings (ShmTuning): the communicator builds them from its HOLMES_SHM_*
// settings (communicator/transport_setup.cpp; core/setting_registry.cpp holds the ranges and
// documentation); the transport takes the rest from TransportOptions (token, context,
// connect_timeout). Nothing here reads the environment.
#pragma once

#include <chrono>
#include <cstdint>

namespace holmes::shm {

// Knobs, with the settings that set them:
//   HOLMES_SHM_RING_BYTES      ring size per sending peer (power of two, 64 KiB .. 256 MiB;
//                              default 2 MiB: 1 and 4 MiB measured no better on 4 ranks)
//   HOLMES_SHM_CMA             0 turns cross-memory attach off (everything through the rings;
//                              default 1)
//   HOLMES_SHM_CMA_MIN_BYTES   smallest message sent by cross-memory attach (default 1 MiB)
//   HOLMES_SHM_PARK_US         how long a cross-memory message waits for its receive, and a
//                              stuck producer for fragments held in its ring (default 2000)
//   HOLMES_SHM_POLL            0: waiting callers leave all progress to the progress thread
//                              (default 1: they poll the rings themselves while they wait)
//   HOLMES_SHM_POLL_US         how long a waiting caller polls (yielding between looks) before
//                              it sleeps (default 1000)
//   HOLMES_SHM_FUSED_REDUCE    0: combining receives (CombiningReceive::irecv_reduce) are refused,
//   so
//                              collectives copy each chunk into scratch and reduce from there
//                              (default 1: reduced straight from the ring into the destination)
struct ShmTuning {
  std::uint64_t ring_bytes = 2u << 20;
  // All of an endpoint's rings together stay within this (rings shrink, down to 64 KiB, for
  // large communicators), so that 64 ranks on one host reserve about 2 GiB, not 16.
  std::uint64_t segment_budget = 32u << 20;
  bool cma = true;
  std::uint64_t cma_min_bytes = 1u << 20;
  // How long a cross-memory message waits for its receive to be posted before it is read into a
  // temporary buffer (0: at once). Reading into the receive buffer saves an allocation and two
  // passes over the data; the bound keeps a send completing when its receiver posts the
  // receive only after its own send has completed (which would otherwise deadlock), at the
  // price of this delay.
  std::chrono::microseconds park_grace{2000};
  // Whether waiting callers run the progress loop themselves, and for how long before sleeping.
  bool caller_progress = true;
  // 1 ms, not less: with more ranks than cores a peer's answer often comes only after the
  // scheduler has run the other ranks; a waiter that sleeps sooner pays a futex wake-up per
  // message (BENCHMARKS.md: 8-byte allreduce on 4 ranks, 2 vCPUs, median 9.8 us against 11.4 us
  // at 50 us, the bandwidth runs unchanged). A wait longer than that costs 1 ms of yielding.
  std::chrono::microseconds poll_window{1000};
  // Whether irecv_reduce is offered (a receive that reduces from the ring as it delivers).
  bool fused_reduce = true;
};

// `tuning` itself; throws HM_ERR_INVALID_ARGUMENT for a ring size the transport cannot run with.
const ShmTuning& checked_shm_tuning(const ShmTuning& tuning);

}  // namespace holmes::shm
