// shm transport: ranks on the same host, through POSIX shared memory.
//
// - Each endpoint owns one segment in /dev/shm (its name is the listen address) holding a
//   doorbell and one single-producer/single-consumer ring per peer that sends to it. A sender
//   maps the receiver's segment, checks it (magic, version, communicator, layout, the owner's
//   proof of the job token), proves the token itself and then writes records into its ring.
//   Once every expected sender has attached, the receiver unlinks the name, so even a crash
//   leaves nothing in /dev/shm; segments of dead processes found at startup are removed.
// - Messages travel through the ring as fragments of at most 256 KiB, several in flight; a send
//   completes once its last fragment is in the ring. The caller's thread writes them itself when
//   the ring has room and nothing sent to that peer earlier is still queued (no hand-off, and the
//   data is usually still in its cache); otherwise the progress thread writes the rest. A
//   fragment whose receive is not posted yet waits in the ring and is copied once, straight into
//   the receive buffer; it is moved aside (into memory of its own) only when its producer waits
//   for room and either a receive posted here waits for bytes behind it or the producer has made
//   no progress for the park grace.
// - A combining receive (irecv_reduce: a collective's reduce-scatter step) is not copied at all:
//   each fragment is reduced with the receiver's own input straight from the ring into the
//   destination, by whichever thread delivers it, so the chunk is read once and no scratch copy
//   is written and read again. Fragments that went by cross-memory attach or were moved out of
//   the ring are reduced from where they were put (the matcher's bounce buffer).
// - From 1 MiB up, when the kernel allows cross-memory attach between the two processes (tested
//   per pair), the ring carries only a request and the receiver copies the message once from
//   the sender's buffer (process_vm_readv); the send completes when the receiver has read it.
//   Collectives' chunks (512 KiB by default) stay below that on purpose: their algorithms wait
//   for a chunk's send before reusing its buffer, and a ring send completes without waiting for
//   the receiver to be scheduled, which on an oversubscribed host is worth more than the copy.
// - One progress thread per endpoint does every other copy and sleeps on its doorbell (a futex in
//   shared memory) when idle: a sender bumps the receiver's doorbell after writing, a receiver
//   bumps the sender's after freeing ring space, callers bump their own endpoint's. Nothing
//   spins; every sleep has a timeout.
// - On shutdown an endpoint marks itself and the rings it writes closed and rings its peers, so
//   their receives from it fail with HM_ERR_PEER_FAILED once they have read what it sent. While
//   requests are pending, peers' processes are checked every 500 ms (kill(pid, 0)), so a peer
//   killed without closing is noticed too; the router also reports deaths the tcp control plane
//   sees (fail_peer).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transports/options.hpp"
#include "transports/transport.hpp"

namespace holmes::shm {

// Knobs, with defaults from the environment:
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
//   HOLMES_SHM_FUSED_REDUCE    0: combining receives (Transport::irecv_reduce) are refused, so
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

  // Defaults overridden by the environment; throws HM_ERR_INVALID_ARGUMENT naming a bad variable.
  static ShmTuning from_env();
};

// Whether this machine can create shared-memory segments (checked once per process); when not,
// `why` says so.
bool shm_available(std::string* why);

// Creates the endpoint's segment at once (peers are set later, Transport::set_peers); reads
// options.token, context and connect_timeout. Throws HM_ERR_TRANSPORT when it cannot.
std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options);
std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options,
                                              const ShmTuning& tuning);

}  // namespace holmes::shm
