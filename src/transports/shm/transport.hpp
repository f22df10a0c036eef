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
//
// Files: connect.cpp (set_peers, attaching to peers' segments and verifying theirs), send.cpp
// (rings out, from the caller or the progress thread), receive.cpp (rings in, into the
// matcher), cross_memory.cpp (messages read from the sender's memory), board.cpp
// (SharedBoard), progress.cpp (the progress loop, waiting and driving callers' passes),
// close.cpp (liveness, failures, shutdown), transport.cpp (construction, link names,
// factories), config.cpp (ShmTuning).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/clock.hpp"
#include "core/completion.hpp"
#include "transports/capabilities.hpp"
#include "transports/common/caller_drivers.hpp"
#include "transports/common/caller_progress.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/common/turn_lock.hpp"
#include "transports/matcher.hpp"
#include "transports/options.hpp"
#include "transports/shared_board.hpp"
#include "transports/shm/config.hpp"
#include "transports/shm/doorbell.hpp"
#include "transports/shm/layout.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace holmes::shm {

// Whether this machine can create shared-memory segments (checked once per process); when not,
// `why` says so.
bool shm_available(std::string* why);

// Creates the endpoint's segment at once (peers are set later, Transport::set_peers); reads
// options.token, context and connect_timeout, and the tuning (the communicator's HOLMES_SHM_*
// settings). Throws HM_ERR_TRANSPORT when it cannot, HM_ERR_INVALID_ARGUMENT for a tuning it
// cannot run with.
std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options,
                                              const ShmTuning& tuning = {});

// While requests are pending, peers' processes are looked for this often.
constexpr std::chrono::milliseconds kLivenessPeriod{500};
// An idle endpoint still wakes this often (every wait has a bound).
constexpr std::chrono::seconds kIdleWait{2};
// A sender waiting for ring space is woken by the receiver; this only bounds the wait should a
// wakeup be lost to a receiver that has not mapped this endpoint yet.
constexpr std::chrono::milliseconds kSpaceWait{100};
// Longest pause between two looks at a peer segment that is not ready yet.
constexpr std::chrono::milliseconds kMaxAttachBackoff{20};
// Work one peer gets per pass of the progress loop before the others get theirs.
constexpr std::uint64_t kPassBytes = 4u << 20;
// process_vm_readv is done in pieces of this size, so one huge message does not hold up the
// other peers' traffic.
constexpr std::uint64_t kPullBytes = 4u << 20;

// Whether a peer's failure gets a warning in the log: not when it only closed, nor when the
// router reports what its control plane saw (the router's side logs that).
enum class FailureLog : bool { kQuiet = false, kWarn = true };
// Whether the progress thread's sleep bound counts the next liveness check (it always wakes for
// those by itself).
enum class Liveness : bool { kNotCounted = false, kCounted = true };

// One isend.
struct SendOp {
  CompletionPtr request;
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::span<const std::byte> data;
  std::uint64_t sent = 0;    // bytes already in the ring
  std::uint64_t cookie = 0;  // set when it went as an RTS record
};

// A record read from a peer's ring whose space is not freed yet: a fragment waiting in the ring
// for its receive to be posted (so that it is copied once, into the receive buffer), or one that
// is done but behind a waiting one (space is freed in ring order).
struct Held {
  std::uint64_t end = 0;    // ring position after it
  std::uint64_t bytes = 0;  // ring space it takes
  RecordHeader header;
  std::span<const std::byte> payload;
  bool done = false;
};

// An RTS message waiting for its receive to be posted.
struct Parked {
  FragmentHeader header;  // offset 0, length == total
  std::uint64_t address = 0;
  std::uint64_t cookie = 0;
  Clock::time_point since;
};

// An RTS message being copied from the producer's memory.
struct Pull {
  FragmentHeader header;  // offset 0, length == total
  Matcher::Landing landing;
  std::uint64_t address = 0;
  std::uint64_t cookie = 0;
  std::uint64_t done = 0;
};

// What a caller thread needs to write a message into a peer's ring itself (ShmTransport::isend),
// shared with the progress thread and guarded by `mutex`.
struct SendLane {
  std::mutex mutex;
  // The ring is attached and the peer healthy: set by the progress thread once it has attached,
  // cleared (for good) before it fails the peer or shuts down.
  bool open = false;
  // Sends handed to the progress thread that have not left its queue: while there are any, a
  // new send joins the queue too, so that messages enter the ring in the order they were sent.
  std::uint64_t handed_off = 0;
};

struct Peer {
  std::string address;
  std::unique_ptr<SendLane> lane = std::make_unique<SendLane>();
  bool served = false;
  PeerFailure failure;

  // Sending: the peer's segment and this rank's ring in it.
  std::unique_ptr<PeerSegment> segment;
  std::optional<RingWriter> writer;
  bool attach_wanted = false;
  Clock::time_point attach_deadline;
  Clock::time_point next_attach_try;
  std::chrono::milliseconds attach_backoff{1};
  std::deque<SendOp> sends;                  // not yet (wholly) in the ring, in order
  std::map<std::uint64_t, SendOp> awaiting;  // RTS written, waiting for the peer to read them
  std::uint64_t next_cookie = 1;
  bool waiting_for_space = false;
  bool owe_wakeup = false;  // freed its ring space before this rank could ring it

  // Receiving: its ring in this rank's segment, once its attach is verified.
  std::optional<RingReader> reader;
  std::deque<Held> held;         // records read and not yet freed, in ring order
  std::uint64_t held_base = 0;   // sequence number of held.front()
  std::uint64_t held_bytes = 0;  // ring bytes of the records waiting for a receive
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> held_by_tag;  // sequence numbers
  // Since when its producer has waited for space without this rank freeing any (nullopt: it
  // does not wait), and how far the ring was freed then.
  std::optional<Clock::time_point> stuck_since;
  std::uint64_t stuck_released = 0;
  pid_t pid = 0;
  bool pid_checkable = false;
  bool cma_from = false;  // its large messages come as RTS records
  std::uint64_t rts_seen = 0;
  std::unordered_map<std::uint64_t, CompletionPtr> posted;  // receives waiting, by tag
  std::unordered_map<std::uint64_t, Parked> parked;         // RTS waiting for a receive, by tag
  std::deque<Pull> pulls;                                   // RTS being read, in order
  // Set when it was found gone (its process ended, its segment vanished, the router says so):
  // its traffic fails with this once what it wrote before is read.
  std::string ending;
  hm_status_t ending_status = HM_ERR_PEER_FAILED;
  FailureLog ending_log = FailureLog::kWarn;
};

struct Command {
  enum class Kind { kSend, kRecv, kCancelRecv, kConnect, kFailPeer, kShutdown };
  Kind kind = Kind::kSend;
  int peer = -1;
  std::uint64_t tag = 0;
  std::uint32_t signature = 0;
  std::span<const std::byte> send_data;
  std::uint64_t sent = 0;  // bytes of send_data the caller already wrote into the ring
  std::span<std::byte> recv_data;
  std::optional<ReceiveCombine> combine;  // a receive that reduces as it lands (irecv_reduce)
  CompletionPtr request;
  hm_status_t status = HM_SUCCESS;
  std::string message;
  std::shared_ptr<std::promise<void>> done;
};

class ShmTransport final : public Transport,
                           public CombiningReceive,
                           public CallerDrive,
                           public SharedBoardAccess,
                           public SharedBoard {
 public:
  ShmTransport(const TransportOptions& options, const ShmTuning& tuning);
  ~ShmTransport() override;

  const char* name() const override { return "shm"; }
  std::string listen_address() const override { return own_.name(); }
  void set_peers(int rank, std::vector<std::string> addresses) override;
  CompletionPtr connect_all() override;
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override;
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override;
  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine) override;
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait) override;
  LinkProperties link(int peer) const override;
  std::chrono::microseconds yield_before_sleep(int) const override { return tuning_.poll_window; }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;
  void set_peer_failure_listener(PeerFailureListener listener) override {
    failure_listener_.set(std::move(listener));
  }
  void set_arrival_listener(ArrivalListener listener) override {
    matcher_.set_arrival_listener(std::move(listener));
  }

  // For CallerProgress: a waiting caller's share of the progress loop.
  void start_polling() { shm::start_polling(own_.header()); }
  void poll(const Completion* awaited);
  void stop_polling(bool satisfied);
  void begin_caller_drive() override;
  void end_caller_drive() override;
  // None where waiters do not poll (HOLMES_SHM_POLL=0, or no poll window): such a caller could
  // not keep a drive's promise (begin_caller_drive ignores it too).
  Progress* caller_progress() override {
    return tuning_.caller_progress && tuning_.poll_window.count() > 0 ? caller_progress_.get()
                                                                      : nullptr;
  }
  SharedBoard& shared_board() override { return *this; }
  void cancel_receive(int peer, std::uint64_t tag) override {
    Command c;
    c.kind = Command::Kind::kCancelRecv;
    c.peer = peer;
    c.tag = tag;
    submit(std::move(c));
  }

  // SharedBoard: the board lives in each endpoint's own segment (layout.hpp); peers' boards are
  // read through the segments this endpoint attached to write its rings.
  std::size_t slot_bytes() const override { return kBoardSlotBytes; }
  std::uint64_t begin_round() override { return ++board_round_; }
  std::span<std::byte> own_slot(std::uint64_t round) override;
  void publish(std::uint64_t round, std::uint64_t sequence, std::uint32_t signature, int root,
               std::size_t bytes) override;
  std::optional<BoardEntry> read(int peer, std::uint64_t round) override;
  void sleep_until_published(int peer, std::uint64_t round,
                             std::chrono::microseconds timeout) override;

 private:
  // The peer's segment for reading its board once attached (nullptr before); asks for the
  // attach when it is not.
  PeerSegment* board_peer(int peer);

  // Hands a command to the progress thread; false (and nothing queued) once it has stopped.
  bool submit(Command command);
  // Submits a command that carries a request; once the progress thread has stopped, the request
  // fails at once with the endpoint's final status. Returns the request.
  CompletionPtr submit_request(Command command);
  // On the caller's thread: writes as much of a message as fits now into the ring to `peer`,
  // when nothing sent to it earlier is still queued and the message does not go by cross-memory
  // attach. True when all of it is in the ring (the send is complete); otherwise the progress
  // thread has been told to expect the rest, from `sent` bytes on.
  bool write_directly(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data, std::uint64_t& sent);
  void wake() { wake_owner(own_.header()); }
  // On a caller's thread: posts a receive itself when no one else is in a pass; false when it
  // must go to the progress thread instead.
  bool post_directly(Command& command);
  // irecv and irecv_reduce (with `combine`).
  CompletionPtr post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data,
                             const std::optional<ReceiveCombine>& combine);

  // Everything below runs in a turn (turn_): on the progress thread, or on a waiting caller's
  // thread (poll, post_directly).
  void run();
  // One pass of the progress loop; whether it did anything.
  bool pass();
  // Whether the progress thread must be woken now: news arrived since the last pass, or the
  // passes done meanwhile left work due before it would wake by itself.
  bool progress_thread_needed(Clock::time_point now);
  bool take_commands();
  void handle(Command& command);
  void want_attach(int peer);
  bool attach_peers(Clock::time_point now);
  void attach(int peer, std::unique_ptr<PeerSegment> segment);
  bool read_rings(Clock::time_point now);
  bool read_ring(int peer, Clock::time_point now);
  // Whether fragments waiting in the ring from `peer` must be copied out to make room for its
  // producer.
  bool must_make_room(int peer, Clock::time_point now);
  bool verify_producer(int peer);
  // Handles one record; false when it failed the peer. `keep` says whether a fragment whose
  // receive is not posted may stay in the ring.
  bool on_record(int peer, const RingReader::Record& record, bool& keep);
  bool deliver(int peer, const RecordHeader& header, std::span<const std::byte> payload);
  // Delivers the fragments of `tag` waiting in the ring (its receive was just posted).
  void deliver_held(int peer, std::uint64_t tag);
  // Moves the oldest waiting fragments out of the ring into the matcher until at most `limit`
  // bytes of the ring are held back from the producer (or none wait any more).
  void evict_held(int peer, std::uint64_t limit);
  // Frees the ring up to the first record still waiting.
  void release_done(int peer);
  // Starts reading a parked message into its posted receive, or into a temporary; false when
  // that failed the peer.
  bool start_pull(int peer, const Parked& parked);
  bool expire_parked(Clock::time_point now);
  bool continue_pulls();
  void acknowledge_rts(int peer, std::uint64_t cookie);
  // Completes the sends to `peer` whose RTS messages it has read.
  bool complete_acknowledged(Peer& p);
  bool write_rings();
  bool write_ring(int peer);
  // write_ring's part under the lane's lock.
  bool write_sends(Peer& p, std::vector<CompletionPtr>& completed, bool& corrupted);
  void check_liveness(Clock::time_point now);
  void check_connected();
  void maybe_unlink();
  void peer_gone(int peer, hm_status_t status, const std::string& message, FailureLog log);
  // peer_gone once the ring from `peer` is drained: messages it wrote before are still delivered.
  void end_after_drain(int peer, hm_status_t status, std::string message, FailureLog log);
  void do_shutdown(hm_status_t status, const std::string& why);
  // How long the progress thread may sleep (counting the liveness checks or not).
  std::chrono::nanoseconds sleep_bound(Clock::time_point now,
                                       Liveness liveness = Liveness::kCounted) const;
  std::string peer_name(int peer) const;

  TransportOptions options_;
  ShmTuning tuning_;
  Proofs proofs_;
  OwnSegment own_;
  std::uint64_t context_hash_ = context_hash(options_.context);  // what peers' segments must say
  // A word of this process's memory a consumer reads to test cross-memory attach.
  std::uint64_t cma_probe_ = 0;

  // Also read by link() and requests on other threads; set once the progress thread starts.
  PeerDirectory directory_{"shm"};

  // Callers -> progress thread.
  std::mutex mutex_;
  std::vector<Command> commands_;
  std::atomic<bool> commands_queued_{false};  // commands_ is not empty
  bool accepting_ = true;  // false once the progress thread has stopped (or never will start)
  hm_status_t final_status_ = HM_ERR_ABORTED;
  std::string final_why_ = "the shm transport was shut down";
  ProgressThread thread_;

  // Whoever takes a turn may touch the progress state below: the progress thread during its
  // passes, a waiting caller while it polls (try_run only: a caller never waits for it).
  TurnLock turn_;
  std::shared_ptr<CallerProgress<ShmTransport>> caller_progress_ =
      std::make_shared<CallerProgress<ShmTransport>>(*this);
  // Threads inside begin_caller_drive .. end_caller_drive; each counts once in the segment's
  // polling word while it is here.
  CallerDrivers drivers_;

  // The board (SharedBoard). Rounds are counted by the communicator's thread that runs its
  // collectives (one at a time). Attached peer segments are published here by the progress
  // thread (they live as long as the endpoint), and failed peers flagged, so that a reader needs
  // no lock; why a peer failed is kept under board_mutex_.
  std::uint64_t board_round_ = 0;
  std::unique_ptr<std::atomic<PeerSegment*>[]> board_peers_;
  std::unique_ptr<std::atomic<bool>[]> board_failed_;
  std::atomic<bool> board_attach_asked_{false};
  std::mutex board_mutex_;
  std::vector<std::pair<hm_status_t, std::string>> board_failures_;
  // The doorbell's value when the last pass began, and when the progress thread will wake by
  // itself (max while it is awake).
  std::uint32_t last_pass_seen_ = 0;
  Clock::time_point progress_sleep_until_ = Clock::time_point::max();

  // Progress state.
  std::vector<Peer> peers_;
  Matcher matcher_{[this](int peer) { return peer_name(peer); }};
  ConnectWaiters connect_waiters_;
  FailureListener failure_listener_;
  int served_ = 0;
  int verified_ = 0;  // served peers whose attach to this segment was verified
  Clock::time_point next_liveness_{};
  ClosedState closed_;
};

}  // namespace holmes::shm
