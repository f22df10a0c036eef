#include "transports/shm/shm_transport.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bootstrap/auth.hpp"
#include "core/clock.hpp"
#include "core/env.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/common/caller_drivers.hpp"
#include "transports/common/caller_progress.hpp"
#include "transports/common/peer_table.hpp"
#include "transports/common/progress_engine.hpp"
#include "transports/common/turn_lock.hpp"
#include "transports/matcher.hpp"
#include "transports/shared_board.hpp"
#include "transports/shm/cma.hpp"
#include "transports/shm/doorbell.hpp"
#include "transports/shm/layout.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/segment.hpp"

namespace holmes::shm {
namespace {

using namespace std::chrono_literals;

// While requests are pending, peers' processes are looked for this often.
constexpr auto kLivenessPeriod = 500ms;
// An idle endpoint still wakes this often (every wait has a bound).
constexpr auto kIdleWait = 2s;
// A sender waiting for ring space is woken by the receiver; this only bounds the wait should a
// wakeup be lost to a receiver that has not mapped this endpoint yet.
constexpr auto kSpaceWait = 100ms;
// Longest pause between two looks at a peer segment that is not ready yet.
constexpr auto kMaxAttachBackoff = 20ms;
// Work one peer gets per pass of the progress loop before the others get theirs.
constexpr std::uint64_t kPassBytes = 4u << 20;
// process_vm_readv is done in pieces of this size, so one huge message does not hold up the
// other peers' traffic.
constexpr std::uint64_t kPullBytes = 4u << 20;

std::uint64_t floor_power_of_two(std::uint64_t v) {
  std::uint64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

// Whether process `pid` has ended: gone, or a zombie its parent has not reaped yet (kill() still
// succeeds on those).
bool process_ended(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const std::size_t n = std::fread(line, 1, sizeof(line) - 1, f);
  std::fclose(f);
  // "pid (comm) S ...": the state follows the last ')' (comm may contain anything).
  const std::string_view text(line, n);
  const auto close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state == 'Z' || state == 'X';
}

// Records why this endpoint closes in its segment header, for peers waiting on it.
void write_close_reason(SegmentHeader& header, hm_status_t status, const std::string& why) {
  const std::size_t n = std::min(why.size(), kCloseReasonBytes - 1);
  std::memcpy(header.closed_reason, why.data(), n);
  header.closed_reason[n] = '\0';
  store_release(header.closed_status, static_cast<std::uint32_t>(status));
}

// A peer's closing as this rank reports it: the status its waiters get (a disagreement stays a
// disagreement; anything else is the peer failing) and the message, with the peer's reason
// when it gave one that says more than a plain destroy. The bytes come from another process:
// copied once, cut at the buffer's end, non-printable characters replaced.
std::pair<hm_status_t, std::string> close_reason(SegmentHeader& header, const std::string& peer) {
  const auto status = static_cast<hm_status_t>(load_acquire(header.closed_status));
  char copy[kCloseReasonBytes];
  std::memcpy(copy, header.closed_reason, sizeof(copy));
  std::string reason(copy, strnlen(copy, sizeof(copy)));
  for (char& c : reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  const bool failed = status != HM_SUCCESS && status != HM_ERR_ABORTED && !reason.empty();
  if (!failed) {
    return {HM_ERR_PEER_FAILED,
            fmt::format("{} closed its shm endpoint (process exited or communicator destroyed) "
                        "while this rank waits for data from it",
                        peer)};
  }
  return {status == HM_ERR_MISMATCH ? HM_ERR_MISMATCH : HM_ERR_PEER_FAILED,
          fmt::format("{} failed and closed its shm endpoint: {}: {}", peer, status_name(status),
                      reason)};
}

std::string mib(std::uint64_t bytes) {
  return bytes % (1u << 20) == 0 ? fmt::format("{} MiB", bytes >> 20)
                                 : fmt::format("{} KiB", bytes >> 10);
}

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
  bool ending_logged = true;
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

class ShmTransport final : public Transport, public SharedBoard {
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
  void shutdown(hm_status_t status, const std::string& why, bool wait) override;
  LinkProperties link(int peer) const override;
  std::chrono::microseconds yield_before_sleep(int) const override { return tuning_.poll_window; }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;
  void set_peer_failure_listener(PeerFailureListener listener) override {
    failure_listener_.set(std::move(listener));
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
  SharedBoard* shared_board() override { return this; }
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
  void peer_gone(int peer, hm_status_t status, const std::string& message, bool log);
  // peer_gone once the ring from `peer` is drained: messages it wrote before are still delivered.
  void end_after_drain(int peer, hm_status_t status, std::string message, bool log);
  void do_shutdown(hm_status_t status, const std::string& why);
  // How long the progress thread may sleep (counting the liveness checks or not).
  std::chrono::nanoseconds sleep_bound(Clock::time_point now, bool liveness = true) const;
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

ShmTransport::ShmTransport(const TransportOptions& options, const ShmTuning& tuning)
    : options_(options),
      tuning_(tuning),
      proofs_(options.token, options.context),
      own_(options.context) {
  const auto nonce = auth::random_nonce();
  std::memcpy(&cma_probe_, nonce.data(), sizeof(cma_probe_));
  cma_probe_ |= 1;  // never 0, which an unset word would read as
}

ShmTransport::~ShmTransport() {
  caller_progress_->detach();
  shutdown(HM_ERR_ABORTED, "the communicator was destroyed", true);
  thread_.join();
}

void ShmTransport::set_peers(int rank, std::vector<std::string> addresses) {
  const auto size = static_cast<int>(addresses.size());
  directory_.check(rank, addresses.size());
  require(size <= static_cast<int>(kMaxRings), "shm: {} ranks, at most {} supported", size,
          kMaxRings);
  std::vector<bool> serve(addresses.size(), false);
  int served = 0;
  for (int p = 0; p < size; ++p) {
    serve[static_cast<std::size_t>(p)] =
        p != rank && !addresses[static_cast<std::size_t>(p)].empty();
    served += serve[static_cast<std::size_t>(p)] ? 1 : 0;
  }
  // Rings shrink for large communicators so the whole segment stays within the budget.
  std::uint64_t ring = tuning_.ring_bytes;
  while (ring > kMinRingBytes &&
         static_cast<std::uint64_t>(served) * (ring + kRingControlBytes) > tuning_.segment_budget) {
    ring /= 2;
  }
  own_.set_layout(rank, static_cast<std::uint32_t>(size), ring, serve, proofs_);

  peers_.resize(addresses.size());
  board_peers_ = std::make_unique<std::atomic<PeerSegment*>[]>(addresses.size());
  board_failed_ = std::make_unique<std::atomic<bool>[]>(addresses.size());
  board_failures_.resize(addresses.size());
  for (int p = 0; p < size; ++p) {
    peers_[static_cast<std::size_t>(p)].address = addresses[static_cast<std::size_t>(p)];
    peers_[static_cast<std::size_t>(p)].served = serve[static_cast<std::size_t>(p)];
  }
  served_ = served;
  std::lock_guard lock(mutex_);
  if (!accepting_) return;  // shut down before it started
  directory_.set(rank, std::move(addresses));
  thread_.start([this] { run(); });
}

CompletionPtr ShmTransport::submit_request(Command command) {
  CompletionPtr request = command.request;
  if (!submit(std::move(command))) {
    std::lock_guard lock(mutex_);
    request->complete(final_status_, final_why_);
  }
  return request;
}

bool ShmTransport::submit(Command command) {
  {
    std::lock_guard lock(mutex_);
    if (!accepting_ || !thread_.started()) return false;
    commands_.push_back(std::move(command));
    commands_queued_.store(true, std::memory_order_release);
  }
  wake();
  return true;
}

CompletionPtr ShmTransport::connect_all() {
  auto done = std::make_shared<Completion>();
  Command c;
  c.kind = Command::Kind::kConnect;
  c.request = done;
  return submit_request(std::move(c));
}

CompletionPtr ShmTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  auto request = std::make_shared<Completion>();
  std::uint64_t sent = 0;
  if (write_directly(peer, tag, signature, data, sent)) {
    request->complete();
    return request;
  }
  if (tuning_.caller_progress) request->set_progress(caller_progress_);
  Command c;
  c.kind = Command::Kind::kSend;
  c.peer = peer;
  c.tag = tag;
  c.signature = signature;
  c.send_data = data;
  c.sent = sent;
  c.request = request;
  return submit_request(std::move(c));
}

bool ShmTransport::write_directly(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data, std::uint64_t& sent) {
  // Writing here instead of on the progress thread saves a hand-off (a wakeup, on a busy host
  // a wait for the scheduler) and copies data the caller has usually just produced while it is
  // still in this core's cache; the send completes at once.
  auto& p = peers_[static_cast<std::size_t>(peer)];
  SendLane& lane = *p.lane;
  std::lock_guard lock(lane.mutex);
  sent = 0;
  if (lane.open && lane.handed_off == 0) {
    RingWriter& writer = *p.writer;
    const bool by_cma =
        tuning_.cma && data.size() >= tuning_.cma_min_bytes &&
        load_acquire(writer.control().cma) == static_cast<std::uint32_t>(CmaState::kWorks);
    bool written = false;
    while (!by_cma && (sent < data.size() || !written)) {
      const std::uint64_t length = std::min(writer.max_payload(), data.size() - sent);
      RecordHeader h{};
      h.kind = static_cast<std::uint32_t>(RecordKind::kData);
      h.signature = signature;
      h.tag = tag;
      h.total = data.size();
      h.offset = sent;
      h.length = length;
      // Full (or corrupt, which the progress thread then finds): it takes the rest.
      if (writer.write(h, data.subspan(sent, length)) != RingWriter::Result::kWritten) break;
      sent += length;
      written = true;
      ring_doorbell(p.segment->header());
    }
    if (written && sent == data.size()) return true;
  }
  ++lane.handed_off;  // from here on the progress thread owns the lane's order
  return false;
}

CompletionPtr ShmTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<std::byte> data) {
  return post_receive(peer, tag, signature, data, std::nullopt);
}

CompletionPtr ShmTransport::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data, const ReceiveCombine& combine) {
  // The fragments are reduced from the ring into `data` by whichever thread delivers them (this
  // one when it polls or posts directly, else the progress thread): one read of the ring instead
  // of a copy into the caller's scratch and a second read from there. Cross-memory messages and
  // fragments moved out of the ring are combined from a bounce buffer (Matcher).
  if (!tuning_.fused_reduce) return nullptr;
  require(combine_fits(combine, data.size()),
          "shm: a combining receive of {} bytes of dtype {} and op {}", data.size(),
          static_cast<int>(combine.dtype), static_cast<int>(combine.op));
  return post_receive(peer, tag, signature, data, combine);
}

CompletionPtr ShmTransport::post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data,
                                         const std::optional<ReceiveCombine>& combine) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  if (tuning_.caller_progress) request->set_progress(caller_progress_);
  Command c;
  c.kind = Command::Kind::kRecv;
  c.peer = peer;
  c.tag = tag;
  c.signature = signature;
  c.recv_data = data;
  c.combine = combine;
  c.request = request;
  if (post_directly(c)) return request;
  return submit_request(std::move(c));
}

bool ShmTransport::post_directly(Command& c) {
  // A completion callback run by a pass on this thread may post a receive: that one goes the
  // long way (the pass is in the middle of its work; try_run refuses it).
  if (!tuning_.caller_progress) return false;
  bool posted = false;
  bool wake_needed = false;
  turn_.try_run([&] {
    if (closed_.closed()) return;
    {
      std::lock_guard queue(mutex_);
      if (!accepting_ || !thread_.started()) return;
    }
    posted = true;
    take_commands();  // whatever was queued before this receive goes first
    if (!closed_.closed()) {
      try {
        handle(c);
      } catch (const std::exception& e) {  // out of memory in the matcher: fail this request only
        c.request->complete(HM_ERR_OUT_OF_MEMORY, fmt::format("shm: {}", e.what()));
      }
    } else {
      std::lock_guard queue(mutex_);
      c.request->complete(final_status_, final_why_);
    }
    wake_needed = progress_thread_needed(Clock::now());
  });
  if (wake_needed) wake();
  return posted;
}

void ShmTransport::poll(const Completion*) {
  // One whole pass even when the awaited request is done early in it: a pass is cheap (no system
  // call) and leaves every ring read.
  bool ended = false;
  turn_.try_run([&] {
    if (closed_.closed()) return;
    pass();
    ended = closed_.closed();
  });
  if (ended) wake();  // the progress thread finishes the shutdown
}

void ShmTransport::begin_caller_drive() {
  // Only where waiters poll: a caller that would sleep at once could not keep its promise.
  if (!tuning_.caller_progress || tuning_.poll_window.count() == 0) return;
  drivers_.add();
  shm::start_polling(own_.header());
}

void ShmTransport::end_caller_drive() {
  // Dropped already when the thread went to sleep in a wait (stop_polling).
  if (drivers_.remove()) stop_polling(true);
}

void ShmTransport::stop_polling(bool satisfied) {
  shm::stop_polling(own_.header());
  // A waiter about to sleep hands over to the progress thread, and so ends its drive: peers
  // must wake that thread again.
  if (!satisfied || turn_.held_here()) {
    if (!satisfied && drivers_.remove()) shm::stop_polling(own_.header());
    wake();
    return;
  }
  // A driving thread still counts as polling and passes again soon (end_caller_drive at the
  // latest): nothing to hand over.
  if (drivers_.contains()) return;
  // Peers skipped the wake system call while this thread polled. News that came after its last
  // pass is read by one more pass here (peers wake the progress thread again from now on, unless
  // someone else polls). When another thread is in a pass, wake the progress thread instead:
  // that costs no system call when it is the one awake.
  bool wake_needed = true;
  turn_.try_run([&] {
    if (!closed_.closed() && doorbell_value(own_.header()) != last_pass_seen_) pass();
    wake_needed = closed_.closed() || progress_thread_needed(Clock::now());
  });
  if (wake_needed) wake();
}

bool ShmTransport::progress_thread_needed(Clock::time_point now) {
  // Work due before the progress thread wakes by itself (a parked message's grace, a pull to
  // continue, an attach to retry) needs it now, and so do copies a pass started and only the
  // progress thread would go on with. The liveness check does not: the thread wakes for it every
  // period anyway.
  for (const auto& p : peers_) {
    if (!p.pulls.empty() || (!p.sends.empty() && !p.waiting_for_space)) return true;
  }
  return now + sleep_bound(now, false) < progress_sleep_until_;
}

// ---------------------------------------------------------------------------------------------
// The board
// ---------------------------------------------------------------------------------------------

std::span<std::byte> ShmTransport::own_slot(std::uint64_t round) {
  return {board_data(own_.base(), round), kBoardSlotBytes};
}

void ShmTransport::publish(std::uint64_t round, std::uint64_t sequence, std::uint32_t signature,
                           int root, std::size_t bytes) {
  require(bytes <= kBoardSlotBytes, "shm: {} bytes do not fit a board slot of {}", bytes,
          kBoardSlotBytes);
  BoardSlotHeader& slot = board_slot(own_.base(), round);
  slot.sequence = sequence;
  slot.signature = signature;
  slot.root = root;
  slot.bytes = static_cast<std::uint32_t>(bytes);
  store_release(slot.round, round);
  publish_word(slot.round_word, static_cast<std::uint32_t>(round), slot.waiters);
}

PeerSegment* ShmTransport::board_peer(int peer) {
  PeerSegment* segment =
      board_peers_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire);
  // Communicators above the eager-connect size attach on first use: ask once for all of them.
  if (segment == nullptr && !board_attach_asked_.exchange(true)) connect_all();
  return segment;
}

std::optional<BoardEntry> ShmTransport::read(int peer, std::uint64_t round) {
  require(peer >= 0 && peer < directory_.size() && peer != directory_.rank(),
          "shm: no board of rank {} to read", peer);
  if (load_acquire(own_.header().closed) != 0) {
    std::lock_guard lock(mutex_);
    throw Error(final_status_, final_why_);
  }
  // What the peer published is read even after it failed or closed, as its ring messages are.
  PeerSegment* segment = board_peer(peer);
  if (segment != nullptr) {
    BoardSlotHeader& slot = board_slot(segment->base(), round);
    const std::uint64_t published = load_acquire(slot.round);
    if (published == round) {
      BoardEntry entry;
      entry.sequence = slot.sequence;
      entry.signature = slot.signature;
      entry.root = slot.root;
      const std::uint32_t bytes = slot.bytes;
      if (bytes > kBoardSlotBytes) {
        fail(HM_ERR_TRANSPORT, "{} published {} bytes in a board slot of {}", peer_name(peer),
             bytes, kBoardSlotBytes);
      }
      entry.data = {board_data(segment->base(), round), bytes};
      return entry;
    }
    if (published > round) {
      fail(HM_ERR_MISMATCH,
           "{} published board round {} while this rank waits for round {}: the ranks ran "
           "different algorithms for an earlier call",
           peer_name(peer), published, round);
    }
  }
  if (board_failed_[static_cast<std::size_t>(peer)].load(std::memory_order_acquire)) {
    std::lock_guard lock(board_mutex_);
    const auto& [status, message] = board_failures_[static_cast<std::size_t>(peer)];
    throw Error(status, message);
  }
  if (segment != nullptr && load_acquire(segment->header().closed) != 0) {
    const auto [status, message] = close_reason(segment->header(), peer_name(peer));
    throw Error(status, message);
  }
  return std::nullopt;
}

void ShmTransport::sleep_until_published(int peer, std::uint64_t round,
                                         std::chrono::microseconds timeout) {
  PeerSegment* segment = board_peer(peer);
  if (segment == nullptr) {
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(timeout, 100us));
    return;
  }
  BoardSlotHeader& slot = board_slot(segment->base(), round);
  wait_for_word(slot.round_word, static_cast<std::uint32_t>(round), slot.waiters, timeout);
}

void ShmTransport::fail_peer(int peer, hm_status_t status, const std::string& message) {
  Command c;
  c.kind = Command::Kind::kFailPeer;
  c.peer = peer;
  c.status = status;
  c.message = message;
  submit(std::move(c));
}

void ShmTransport::shutdown(hm_status_t status, const std::string& why, bool wait) {
  auto done = std::make_shared<std::promise<void>>();
  auto finished = done->get_future();
  Command c;
  c.kind = Command::Kind::kShutdown;
  c.status = status;
  c.message = why;
  c.done = done;
  if (!submit(std::move(c))) {
    // Never started (no set_peers yet) or already stopped: nothing can touch a buffer.
    std::lock_guard lock(mutex_);
    if (accepting_) {
      accepting_ = false;
      final_status_ = status;
      final_why_ = why;
      write_close_reason(own_.header(), status, why);
      store_release(own_.header().closed, 1u);
      own_.unlink();
    }
    return;
  }
  if (wait && !thread_.here()) {
    // The progress thread never blocks for long (its copies are bounded per pass), so this is
    // quick; the bound only guards against a wedged thread.
    finished.wait_for(30s);
  }
}

LinkProperties ShmTransport::link(int peer) const {
  const std::string where = directory_.address(peer);
  const auto ring = own_.ring_bytes();
  return {"shm",
          fmt::format("shm {} ring {}{}", where, mib(ring),
                      tuning_.cma ? fmt::format(", cma from {}", mib(tuning_.cma_min_bytes))
                                  : std::string()),
          0, 0};
}

std::string ShmTransport::peer_name(int peer) const {
  const std::string where = directory_.address(peer);
  return fmt::format("rank {} (shm {})", peer, where);
}

// ---------------------------------------------------------------------------------------------
// The progress loop
// ---------------------------------------------------------------------------------------------

void ShmTransport::run() {
  turn_.run([this] { next_liveness_ = Clock::now() + kLivenessPeriod; });
  // What one turn of the loop leaves to do outside the lock.
  struct Next {
    bool stop = false;
    bool busy = false;
    std::uint32_t seen = 0;  // the doorbell when the pass began
    std::chrono::nanoseconds bound{0};
  };
  while (true) {
    const Next next = turn_.run([this] {
      Next n;
      if (closed_.closed()) {
        n.stop = true;
        return n;
      }
      progress_sleep_until_ = Clock::time_point::max();
      // Read the doorbell before looking for work: anything that arrives after this moves it.
      n.busy = pass();
      n.seen = last_pass_seen_;
      if (closed_.closed()) {
        n.stop = true;
      } else if (!n.busy) {
        const auto now = Clock::now();
        n.bound = sleep_bound(now);
        progress_sleep_until_ = now + n.bound;
      }
      return n;
    });
    if (next.stop) break;
    if (next.busy) continue;
    const std::uint32_t seen = next.seen;
    const auto bound = next.bound;
    // Peers answer within microseconds while a collective runs: yield the core a little before
    // sleeping on the doorbell (a futex wake-up costs tens of microseconds). Not while a caller
    // polls the rings itself: it sees the news first.
    bool moved = false;
    if (load_relaxed(own_.header().polling) == 0) {
      const auto spin_until = Clock::now() + kYieldBeforeSleep;
      while (!moved && Clock::now() < spin_until && load_relaxed(own_.header().polling) == 0) {
        std::this_thread::yield();
        moved = doorbell_value(own_.header()) != seen;
      }
    }
    if (!moved) sleep_on_doorbell(own_.header(), seen, bound);
  }
  // Stopped: whatever is queued now, or arrives later, fails at once.
  std::vector<Command> left;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    left.swap(commands_);
  }
  for (auto& c : left) {
    if (c.request) c.request->complete(final_status_, final_why_);
    if (c.done) c.done->set_value();
  }
}

bool ShmTransport::pass() {
  last_pass_seen_ = doorbell_value(own_.header());
  bool busy = take_commands();
  if (closed_.closed()) return busy;
  try {
    const auto now = Clock::now();
    busy |= attach_peers(now);
    busy |= read_rings(now);
    busy |= expire_parked(now);
    busy |= continue_pulls();
    busy |= write_rings();
    check_liveness(now);
    maybe_unlink();
  } catch (const std::exception& e) {
    // Nothing here throws by design; should memory run out, fail everything cleanly rather
    // than terminate the process from this thread.
    const bool memory = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    const auto why = fmt::format("shm: the progress loop failed: {}", e.what());
    HM_LOG_ERROR("shm rank {}: {}", directory_.rank(), why);
    do_shutdown(memory ? HM_ERR_OUT_OF_MEMORY : HM_ERR_INTERNAL, why);
  }
  return busy;
}

std::chrono::nanoseconds ShmTransport::sleep_bound(Clock::time_point now, bool liveness) const {
  // The liveness check's period bounds every sleep (it only looks when requests are pending, but
  // waking when nothing is costs two wake-ups a second and keeps the bound simple for callers
  // that post receives themselves).
  Clock::time_point until = now + kIdleWait;
  if (liveness) until = std::min(until, std::max(now, next_liveness_));
  for (const auto& p : peers_) {
    if (p.attach_wanted && !p.segment && !p.failure.failed()) {
      until = std::min(until, p.next_attach_try);
    }
    if (p.waiting_for_space) until = std::min(until, now + kSpaceWait);
    if (p.stuck_since) until = std::min(until, *p.stuck_since + tuning_.park_grace);
    for (const auto& [tag, parked] : p.parked) {
      until = std::min(until, parked.since + tuning_.park_grace);
    }
  }
  return std::max<std::chrono::nanoseconds>(until - now, 0ns);
}

bool ShmTransport::take_commands() {
  // Callers poll many times per message: look before taking the lock.
  if (!commands_queued_.load(std::memory_order_acquire)) return false;
  std::vector<Command> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(commands_);
    commands_queued_.store(false, std::memory_order_relaxed);
  }
  for (auto& c : batch) {
    if (closed_.closed()) {
      if (c.request) c.request->complete(final_status_, final_why_);
      if (c.done) c.done->set_value();
      continue;
    }
    try {
      handle(c);
    } catch (const std::exception& e) {  // out of memory in the matcher: fail this request only
      if (c.request) c.request->complete(HM_ERR_OUT_OF_MEMORY, fmt::format("shm: {}", e.what()));
      if (c.done) c.done->set_value();
    }
  }
  return !batch.empty();
}

void ShmTransport::handle(Command& c) {
  switch (c.kind) {
    case Command::Kind::kSend: {
      auto& p = peers_[static_cast<std::size_t>(c.peer)];
      if (!p.served || p.failure.failed()) {
        {
          std::lock_guard lock(p.lane->mutex);
          --p.lane->handed_off;
        }
        if (!p.served) {
          c.request->complete(HM_ERR_INVALID_ARGUMENT,
                              fmt::format("shm: rank {} is not reached through shm", c.peer));
        } else {
          c.request->complete(p.failure.status, p.failure.message);
        }
      } else {
        p.sends.push_back(SendOp{c.request, c.tag, c.signature, c.send_data, c.sent});
        want_attach(c.peer);
      }
      break;
    }
    case Command::Kind::kRecv: {
      auto& p = peers_[static_cast<std::size_t>(c.peer)];
      if (!p.served) {
        c.request->complete(HM_ERR_INVALID_ARGUMENT,
                            fmt::format("shm: rank {} is not reached through shm", c.peer));
        break;
      }
      if (matcher_.post(c.peer, c.tag, c.signature, c.recv_data, c.request, c.combine)) break;
      if (p.failure.failed()) {
        matcher_.fail_posted(c.peer, c.tag, p.failure.status, p.failure.message);
        break;
      }
      // Delivered receives leave their entry behind (erased here in bulk rather than on every
      // delivery, which would cost a lookup per fragment).
      if (p.posted.size() >= 64) {
        std::erase_if(p.posted, [](const auto& entry) { return entry.second->done(); });
      }
      p.posted[c.tag] = c.request;
      // Mapping the sender's segment lets this rank see it close even if it never writes
      // (and is needed anyway to wake it when its ring has room again).
      want_attach(c.peer);
      deliver_held(c.peer, c.tag);
      if (auto it = p.parked.find(c.tag); it != p.parked.end()) {
        const Parked parked = it->second;
        p.parked.erase(it);
        start_pull(c.peer, parked);
      }
      break;
    }
    case Command::Kind::kConnect:
      connect_waiters_.add(c.request);
      for (std::size_t p = 0; p < peers_.size(); ++p) {
        if (peers_[p].served) want_attach(static_cast<int>(p));
      }
      check_connected();
      break;
    case Command::Kind::kFailPeer:
      // The router calls this when the tcp control plane closes, which races with data the peer
      // wrote into its ring just before it finished: deliver that first. (The caller logs.)
      if (c.peer >= 0 && static_cast<std::size_t>(c.peer) < peers_.size() &&
          peers_[static_cast<std::size_t>(c.peer)].served) {
        end_after_drain(c.peer, c.status, c.message, false);
      }
      break;
    case Command::Kind::kCancelRecv:
      if (c.peer >= 0 && static_cast<std::size_t>(c.peer) < peers_.size()) {
        matcher_.fail_posted(c.peer, c.tag, HM_ERR_ABORTED, "shm: the receive was cancelled");
      }
      break;
    case Command::Kind::kShutdown:
      do_shutdown(c.status, c.message);
      c.done->set_value();
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Attaching to peers' segments
// ---------------------------------------------------------------------------------------------

void ShmTransport::want_attach(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.attach_wanted || p.segment || p.failure.failed() || !p.ending.empty()) return;
  p.attach_wanted = true;
  const auto now = Clock::now();
  p.attach_deadline = now + options_.connect_timeout;
  p.next_attach_try = now;
}

bool ShmTransport::attach_peers(Clock::time_point now) {
  bool busy = false;
  const PeerSegment::Expect base{-1, static_cast<std::uint32_t>(peers_.size()), context_hash_};
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (!p.attach_wanted || p.segment || p.failure.failed() || now < p.next_attach_try) {
      continue;
    }
    const int peer = static_cast<int>(i);
    std::unique_ptr<PeerSegment> segment;
    try {
      auto expect = base;
      expect.owner_rank = peer;
      segment = PeerSegment::open(p.address, expect, proofs_);
    } catch (const Error& e) {
      const auto message = fmt::format("shm: cannot reach rank {}: {}", peer, e.what());
      if (e.status() == HM_ERR_PEER_FAILED) {
        // Its segment is gone: it closed or died, maybe after writing to this rank. Read that
        // first, then fail the rest.
        end_after_drain(peer, e.status(), message, true);
        busy = true;
      } else {
        peer_gone(peer, e.status(), message, true);
      }
      continue;
    }
    if (!segment) {  // its owner has not published its layout yet
      if (now >= p.attach_deadline) {
        peer_gone(peer, HM_ERR_TIMEOUT,
                  fmt::format("shm: {} did not set up its segment within {} ms", peer_name(peer),
                              options_.connect_timeout.count()),
                  true);
        continue;
      }
      p.next_attach_try = now + p.attach_backoff;
      p.attach_backoff =
          std::min<std::chrono::milliseconds>(p.attach_backoff * 2, kMaxAttachBackoff);
      continue;
    }
    attach(peer, std::move(segment));
    busy = true;
  }
  return busy;
}

void ShmTransport::attach(int peer, std::unique_ptr<PeerSegment> segment) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const int rank = directory_.rank();
  RingControl& control = segment->control(rank);
  if (load_acquire(control.attached) != 0) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: the ring for rank {} in {}'s segment {} is already taken: two "
                          "endpoints claim rank {}",
                          rank, peer_name(peer), segment->name(), rank),
              true);
    return;
  }
  control.producer_pid = getpid();
  control.producer_pid_namespace = pid_namespace_id();
  const auto nonce = auth::random_nonce();
  std::memcpy(control.producer_nonce, nonce.data(), kNonceBytes);
  control.cma_probe_address = reinterpret_cast<std::uintptr_t>(&cma_probe_);
  control.cma_probe_value = cma_probe_;
  proofs_.producer_mac(segment->header(), control, rank, peer, control.producer_mac);
  store_release(control.attached, 1u);
  p.writer.emplace(control, segment->ring_data(rank), segment->ring_bytes());
  if (p.pid == 0 && segment->same_pid_namespace()) {
    p.pid = segment->owner_pid();
    p.pid_checkable = true;
  }
  p.segment = std::move(segment);
  board_peers_[static_cast<std::size_t>(peer)].store(p.segment.get(), std::memory_order_release);
  p.attach_wanted = false;
  {
    std::lock_guard lock(p.lane->mutex);
    p.lane->open = true;
  }
  ring_doorbell(p.segment->header());
  if (p.owe_wakeup) {
    p.owe_wakeup = false;
    ring_doorbell(p.segment->header());
  }
  check_connected();
}

void ShmTransport::check_connected() {
  connect_waiters_.settle(
      static_cast<int>(peers_.size()),
      [this](int peer) {
        const auto& p = peers_[static_cast<std::size_t>(peer)];
        if (!p.served) return ConnectWaiters::Peer::kNotServed;
        return p.segment ? ConnectWaiters::Peer::kConnected : ConnectWaiters::Peer::kConnecting;
      },
      [this](int peer) -> const PeerFailure& {
        return peers_[static_cast<std::size_t>(peer)].failure;
      });
}

void ShmTransport::maybe_unlink() {
  // Every sender has mapped the segment: the name has done its job, and removing it now means a
  // crash later leaves nothing behind in /dev/shm.
  if (own_.linked() && verified_ == served_) own_.unlink();
}

// ---------------------------------------------------------------------------------------------
// Receiving
// ---------------------------------------------------------------------------------------------

bool ShmTransport::read_rings(Clock::time_point now) {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].served && !peers_[i].failure.failed()) {
      busy |= read_ring(static_cast<int>(i), now);
    }
  }
  return busy;
}

bool ShmTransport::verify_producer(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const int rank = directory_.rank();
  RingControl& control = own_.control(peer);
  if (!proofs_.proves_producer(own_.header(), control, peer, rank)) {
    peer_gone(peer, HM_ERR_AUTH,
              fmt::format("shm: the ring of rank {} in this rank's segment {} carries no valid "
                          "proof of the job token (HOLMES_TOKEN differs, or a stranger wrote it)",
                          peer, own_.name()),
              true);
    return false;
  }
  const bool same_namespace =
      control.producer_pid_namespace != 0 && control.producer_pid_namespace == pid_namespace_id();
  if (same_namespace && control.producer_pid > 0) {
    p.pid = control.producer_pid;
    p.pid_checkable = true;
  }
  // Test cross-memory attach on this very pair: the producer published a word and its value.
  CmaState cma = CmaState::kRefused;
  if (tuning_.cma && p.pid_checkable) {
    std::uint64_t probe = 0;
    const int error =
        read_process_memory(p.pid, control.cma_probe_address,
                            std::as_writable_bytes(std::span<std::uint64_t>(&probe, 1)));
    if (error == 0 && probe == control.cma_probe_value) cma = CmaState::kWorks;
    if (error != 0) {
      HM_LOG_DEBUG(
          "shm rank {}: cross-memory attach to rank {} refused ({}); the ring carries "
          "everything",
          rank, peer, std::strerror(error));
    }
  }
  p.cma_from = cma == CmaState::kWorks;
  store_release(control.cma, static_cast<std::uint32_t>(cma));
  p.reader.emplace(control, own_.ring_data(peer), own_.ring_bytes());
  ++verified_;
  // Map the producer's segment too: to ring its doorbell after freeing space, and to send.
  want_attach(peer);
  return true;
}

bool ShmTransport::read_ring(int peer, Clock::time_point now) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  RingControl& control = own_.control(peer);
  if (!p.reader) {
    if (load_acquire(control.attached) != 0) return verify_producer(peer);
    // Never attached here; if it has closed (or died) nothing will come from it.
    if (p.segment && load_acquire(p.segment->header().closed) != 0) {
      const auto [status, message] = close_reason(p.segment->header(), peer_name(peer));
      peer_gone(peer, status, message, false);
    } else if (!p.ending.empty()) {
      peer_gone(peer, p.ending_status, p.ending, p.ending_logged);
    }
    return false;
  }
  // Read the closed marks before the ring: whatever it wrote before closing is read first.
  const bool closed = load_acquire(control.closed) != 0 ||
                      (p.segment && load_acquire(p.segment->header().closed) != 0);
  const bool ending = !p.ending.empty();
  bool busy = false;
  std::uint64_t bytes = 0;
  std::string corrupt;
  while (bytes < kPassBytes && !p.failure.failed()) {
    auto record = p.reader->next(corrupt);
    if (!record) break;
    busy = true;
    const std::uint64_t size = record->end - record->start;
    bytes += size;
    bool keep = !closed && !ending;
    if (!on_record(peer, *record, keep) || p.failure.failed()) return true;
    if (keep) {
      p.held_by_tag[record->header.tag].push_back(p.held_base + p.held.size());
      p.held_bytes += size;
    }
    p.held.push_back(Held{record->end, size, record->header, record->payload, !keep});
  }
  if (!corrupt.empty()) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} corrupted its ring: {}", peer_name(peer), corrupt), true);
    return true;
  }
  // Fragments wait in the ring for their receive (space is freed in ring order, so a waiting
  // fragment also holds back everything read after it) until the producer needs the room; see
  // must_make_room. Once it has closed they all are copied out: what it wrote is still
  // delivered, as unexpected messages.
  release_done(peer);
  if (closed || ending) {
    evict_held(peer, 0);
  } else if (must_make_room(peer, now)) {
    evict_held(peer, p.reader->bytes() / 4);
  }
  // Once it has closed, messages parked for a receive never come (it let go of them).
  if ((closed || ending) && p.pulls.empty() && p.reader->drained()) {
    if (!closed) {  // gone without closing: say how it was found out
      peer_gone(peer, p.ending_status, p.ending, p.ending_logged);
    } else if (p.segment) {
      const auto [status, message] = close_reason(p.segment->header(), peer_name(peer));
      peer_gone(peer, status, message, false);
    } else {
      peer_gone(peer, HM_ERR_PEER_FAILED,
                fmt::format("{} closed its shm endpoint (process exited or communicator "
                            "destroyed) while this rank waits for data from it",
                            peer_name(peer)),
                false);
    }
  }
  return busy;
}

bool ShmTransport::must_make_room(int peer, Clock::time_point now) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.held_bytes == 0 || load_acquire(own_.control(peer).producer_waiting) == 0) {
    p.stuck_since.reset();
    return false;
  }
  // Copying a fragment out costs an allocation and a second copy, and a producer that waits for
  // space is ordinary flow control while this rank's receives trail its sends (a pipelined
  // collective sends a whole block at once and receives a few chunks ahead): the fragments are
  // then copied once, from the ring, as their receives are posted. They are moved aside only
  // when something else needs the room: a receive posted here waits for bytes the producer
  // cannot write (they are behind the waiting fragments), or the producer has made no progress
  // for a while (its send may have to complete before this rank posts the receive).
  for (const auto& [tag, request] : p.posted) {
    if (!request->done()) {
      p.stuck_since.reset();
      return true;
    }
  }
  if (!p.stuck_since || p.stuck_released != p.reader->released()) {
    p.stuck_since = now;
    p.stuck_released = p.reader->released();
    return false;
  }
  if (now - *p.stuck_since < tuning_.park_grace) return false;
  p.stuck_since = now;  // one round per grace period, should this one not free anything
  return true;
}

void ShmTransport::release_done(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.reader) return;
  std::uint64_t released = 0;
  while (!p.held.empty() && p.held.front().done) {
    released = p.held.front().end;
    p.held.pop_front();
    ++p.held_base;
  }
  if (released == 0) return;
  p.reader->release(released);
  // A producer that ran out of space waits for this: tail store then flag load, in the same
  // total order as its flag store then tail load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (load_relaxed(own_.control(peer).producer_waiting) != 0) {
    if (p.segment) {
      ring_doorbell(p.segment->header());
    } else {
      p.owe_wakeup = true;
      want_attach(peer);
    }
  }
}

void ShmTransport::deliver_held(int peer, std::uint64_t tag) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const auto it = p.held_by_tag.find(tag);
  if (it == p.held_by_tag.end()) return;
  const auto sequences = std::move(it->second);
  p.held_by_tag.erase(it);
  for (const auto sequence : sequences) {
    Held& h = p.held[static_cast<std::size_t>(sequence - p.held_base)];
    h.done = true;
    p.held_bytes -= h.bytes;
    if (!deliver(peer, h.header, h.payload)) return;
  }
  release_done(peer);
}

void ShmTransport::evict_held(int peer, std::uint64_t limit) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  while (!p.failure.failed() && p.held_bytes > 0 && !p.held.empty() &&
         p.reader->cursor() - p.reader->released() > limit) {
    Held& h = p.held.front();  // the oldest: release_done() leaves a waiting one in front
    if (h.done) {
      release_done(peer);
      continue;
    }
    h.done = true;
    p.held_bytes -= h.bytes;
    auto& sequences = p.held_by_tag[h.header.tag];  // it is the first of its tag too
    if (!sequences.empty()) sequences.erase(sequences.begin());
    if (sequences.empty()) p.held_by_tag.erase(h.header.tag);
    if (!deliver(peer, h.header, h.payload)) return;
    release_done(peer);
  }
}

bool ShmTransport::deliver(int peer, const RecordHeader& h, std::span<const std::byte> payload) {
  const FragmentHeader fragment{h.tag, h.signature, h.total, h.offset, h.length};
  if (matcher_.deliver(peer, fragment, payload)) return true;
  peer_gone(peer, HM_ERR_TRANSPORT,
            fmt::format("shm: {} broke the protocol: fragments of message {:#x} disagree on its "
                        "size",
                        peer_name(peer), h.tag),
            true);
  return false;
}

bool ShmTransport::on_record(int peer, const RingReader::Record& record, bool& keep) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const RecordHeader& h = record.header;
  const FragmentHeader fragment{h.tag, h.signature, h.total, h.offset, h.length};
  const auto protocol_error = [&](const std::string& what) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} broke the protocol: {}", peer_name(peer), what), true);
    return false;
  };
  if (h.total > kMaxMessageBytes || h.offset > h.total || h.length > h.total - h.offset) {
    return protocol_error(fmt::format("a record claims bytes [{}, +{}) of a {}-byte message",
                                      h.offset, h.length, h.total));
  }
  if (h.kind == static_cast<std::uint32_t>(RecordKind::kData)) {
    // Control messages (probes, verdicts) are empty and consumed by the matcher at once: never
    // held in the ring for a receive that will not come.
    if (keep && decode_control_tag(h.tag)) keep = false;
    if (keep) {
      const auto it = p.posted.find(h.tag);
      keep = it == p.posted.end() || it->second->done();  // wait in the ring for the receive
    }
    if (!keep) return deliver(peer, h, record.payload);
    // A message of another call in a slot this rank has receives posted for fails them now.
    matcher_.note_arrival(peer, h.tag, h.signature);
    // Checked now as the matcher would: fragments of one message agree on what it is.
    if (const auto it = p.held_by_tag.find(h.tag);
        it != p.held_by_tag.end() && !it->second.empty()) {
      const RecordHeader& first =
          p.held[static_cast<std::size_t>(it->second.front() - p.held_base)].header;
      if (first.total != h.total || first.signature != h.signature) {
        return protocol_error(
            fmt::format("fragments of message {:#x} disagree on its size", h.tag));
      }
    }
    return true;
  }
  keep = false;
  // kRts: the only other kind the reader lets through.
  if (!p.cma_from) return protocol_error("a cross-memory request, though this rank refused them");
  if (h.offset != 0 || h.length != h.total || h.total == 0 || h.cookie != p.rts_seen + 1) {
    return protocol_error(fmt::format("a malformed cross-memory request (cookie {}, expected {})",
                                      h.cookie, p.rts_seen + 1));
  }
  p.rts_seen = h.cookie;
  const Parked parked{fragment, h.address, h.cookie, Clock::now()};
  const auto it = p.posted.find(h.tag);
  if ((it != p.posted.end() && !it->second->done()) || tuning_.park_grace.count() == 0) {
    return start_pull(peer, parked);  // straight into the receive buffer, or not waiting for it
  }
  if (!p.parked.emplace(h.tag, parked).second) {
    return protocol_error(fmt::format("two messages with tag {:#x} at once", h.tag));
  }
  return true;
}

bool ShmTransport::start_pull(int peer, const Parked& parked) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  std::optional<Matcher::Landing> landing;
  try {
    landing = matcher_.land(peer, parked.header);  // unposted: a buffer of the message's size
  } catch (const std::bad_alloc&) {
    peer_gone(peer, HM_ERR_OUT_OF_MEMORY,
              fmt::format("shm: {} sent a message of {} bytes before its receive was posted, and "
                          "this rank cannot hold it",
                          peer_name(peer), parked.header.total),
              true);
    return false;
  }
  if (!landing) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} broke the protocol: fragments of message {:#x} disagree on "
                          "its size",
                          peer_name(peer), parked.header.tag),
              true);
    return false;
  }
  if (landing->target == nullptr) {
    // Refused (size or signature mismatch, the receive has failed): nothing to read.
    acknowledge_rts(peer, parked.cookie);
    return true;
  }
  p.pulls.push_back(Pull{parked.header, std::move(*landing), parked.address, parked.cookie, 0});
  return true;
}

bool ShmTransport::expire_parked(Clock::time_point now) {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    for (auto it = p.parked.begin(); it != p.parked.end() && !p.failure.failed();) {
      if (now - it->second.since < tuning_.park_grace) {
        ++it;
        continue;
      }
      const Parked parked = it->second;
      it = p.parked.erase(it);
      busy = true;
      if (!start_pull(static_cast<int>(i), parked)) break;
    }
  }
  return busy;
}

void ShmTransport::acknowledge_rts(int peer, std::uint64_t cookie) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  store_release(own_.control(peer).rts_acked[cookie % kAckSlots], cookie);
  if (p.segment) {
    ring_doorbell(p.segment->header());
  } else {
    p.owe_wakeup = true;
    want_attach(peer);
  }
}

bool ShmTransport::continue_pulls() {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (p.pulls.empty() || p.failure.failed()) continue;
    const int peer = static_cast<int>(i);
    busy = true;
    Pull& pull = p.pulls.front();
    const std::uint64_t piece = std::min(kPullBytes, pull.header.total - pull.done);
    const int error =
        read_process_memory(p.pid, pull.address + pull.done,
                            {pull.landing.target + pull.done, static_cast<std::size_t>(piece)});
    if (error != 0) {
      peer_gone(peer, error == ESRCH ? HM_ERR_PEER_FAILED : HM_ERR_TRANSPORT,
                error == ESRCH
                    ? fmt::format("{} (pid {}) exited while its message was being read",
                                  peer_name(peer), p.pid)
                    : fmt::format("shm: cannot read {}'s message {:#x} from its memory: {}",
                                  peer_name(peer), pull.header.tag, std::strerror(error)),
                true);
      continue;
    }
    pull.done += piece;
    // The producer only lets go of its buffer after marking its ring closed; so if it is not
    // closed now, everything read so far was read from the live buffer.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (load_acquire(own_.control(peer).closed) != 0) {
      const auto message = fmt::format(
          "{} closed its shm endpoint while its message was being read", peer_name(peer));
      for (const auto& dropped : p.pulls) {
        if (dropped.landing.request) {
          matcher_.fail_posted(peer, dropped.header.tag, HM_ERR_PEER_FAILED, message);
        }
      }
      p.pulls.clear();  // read_ring sees the closed ring next and fails the rest
      continue;
    }
    if (pull.done < pull.header.total) continue;
    Pull done = std::move(pull);
    p.pulls.pop_front();
    // Release the sender first: once the receive below completes this rank may close, and the
    // sender must find its message acknowledged before it finds this endpoint closed.
    acknowledge_rts(peer, done.cookie);
    matcher_.landed(peer, done.header, done.landing);
  }
  return busy;
}

// ---------------------------------------------------------------------------------------------
// Sending
// ---------------------------------------------------------------------------------------------

bool ShmTransport::write_rings() {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (p.writer && !p.failure.failed() && (!p.sends.empty() || !p.awaiting.empty())) {
      busy |= write_ring(static_cast<int>(i));
    }
  }
  return busy;
}

bool ShmTransport::write_ring(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  bool busy = complete_acknowledged(p);
  // Completed sends are completed once the lane is unlocked: a completion may run a callback
  // that sends again.
  std::vector<CompletionPtr> completed;
  bool corrupted = false;
  {
    std::lock_guard lock(p.lane->mutex);
    busy |= write_sends(p, completed, corrupted);
  }
  for (auto& request : completed) request->complete();
  if (corrupted) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} corrupted the ring this rank writes to", peer_name(peer)), true);
    return true;
  }
  return busy;
}

bool ShmTransport::write_sends(Peer& p, std::vector<CompletionPtr>& completed, bool& corrupted) {
  RingWriter& writer = *p.writer;
  RingControl& control = writer.control();
  bool busy = false;
  const auto corrupt = [&] {
    corrupted = true;
    return true;
  };

  const bool cma =
      tuning_.cma && load_acquire(control.cma) == static_cast<std::uint32_t>(CmaState::kWorks);
  // A message goes whole by cross-memory attach or whole through the ring, decided before its
  // first byte moves (the peer may start allowing CMA in the middle of one). With every
  // acknowledgement slot in use, large messages take the ring until one frees up.
  const auto by_cma = [&](const SendOp& op) {
    return cma && op.data.size() >= tuning_.cma_min_bytes && op.sent == 0 &&
           (p.awaiting.empty() || p.awaiting.begin()->first + kAckSlots > p.next_cookie);
  };
  std::uint64_t written = 0;
  bool full = false;
  while (!p.sends.empty() && written < kPassBytes) {
    SendOp& op = p.sends.front();
    const std::uint64_t size = op.data.size();
    RecordHeader h{};
    h.signature = op.signature;
    h.tag = op.tag;
    h.total = size;
    if (by_cma(op)) {
      h.kind = static_cast<std::uint32_t>(RecordKind::kRts);
      h.offset = 0;
      h.length = size;
      h.address = reinterpret_cast<std::uintptr_t>(op.data.data());
      h.cookie = p.next_cookie;
      const auto result = writer.write(h, {});
      if (result == RingWriter::Result::kCorrupt) return corrupt();
      if (result == RingWriter::Result::kFull) {
        full = true;
        break;
      }
      op.cookie = p.next_cookie++;
      p.awaiting.emplace(op.cookie, std::move(op));
      p.sends.pop_front();
      --p.lane->handed_off;
      written += kRecordHeaderBytes;
      busy = true;
      ring_doorbell(p.segment->header());
      continue;
    }
    const std::uint64_t length = std::min(writer.max_payload(), size - op.sent);
    h.kind = static_cast<std::uint32_t>(RecordKind::kData);
    h.offset = op.sent;
    h.length = length;
    const auto result = writer.write(h, op.data.subspan(op.sent, length));
    if (result == RingWriter::Result::kCorrupt) return corrupt();
    if (result == RingWriter::Result::kFull) {
      full = true;
      break;
    }
    op.sent += length;
    written += length + kRecordHeaderBytes;
    busy = true;
    ring_doorbell(p.segment->header());
    if (op.sent == size) {
      completed.push_back(std::move(op.request));
      p.sends.pop_front();
      --p.lane->handed_off;
    }
  }

  if (full) {
    // Ask the peer for a wakeup when it frees space, then look once more: it may have freed
    // space between the failed write and the flag.
    if (!p.waiting_for_space) {
      p.waiting_for_space = true;
      store_release(control.producer_waiting, 1u);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // The consumer may be holding fragments in the ring for receives not posted yet: this
      // tells it to move them out of the way.
      ring_doorbell(p.segment->header());
      const SendOp& op = p.sends.front();
      if (writer.fits(by_cma(op) ? 0 : std::min(writer.max_payload(), op.data.size() - op.sent))) {
        busy = true;  // loop again at once
      }
    }
  } else if (p.waiting_for_space) {
    p.waiting_for_space = false;
    store_release(control.producer_waiting, 0u);
  }
  return busy;
}

bool ShmTransport::complete_acknowledged(Peer& p) {
  if (!p.writer) return false;
  bool busy = false;
  RingControl& control = p.writer->control();
  for (auto it = p.awaiting.begin(); it != p.awaiting.end();) {
    if (load_acquire(control.rts_acked[it->first % kAckSlots]) == it->first) {
      auto request = std::move(it->second.request);
      it = p.awaiting.erase(it);
      request->complete();
      busy = true;
    } else {
      ++it;
    }
  }
  return busy;
}

// ---------------------------------------------------------------------------------------------
// Failures and shutdown
// ---------------------------------------------------------------------------------------------

void ShmTransport::check_liveness(Clock::time_point now) {
  if (now < next_liveness_) return;
  next_liveness_ = now + kLivenessPeriod;
  bool pending = false;
  for (auto& p : peers_) {
    std::erase_if(p.posted, [](const auto& entry) { return entry.second->done(); });
    pending = pending || !p.posted.empty() || !p.sends.empty() || !p.awaiting.empty() ||
              !p.pulls.empty() || !p.parked.empty();
  }
  if (!pending) return;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (!p.served || p.failure.failed() || !p.pid_checkable || p.pid <= 0 || !p.ending.empty()) {
      continue;
    }
    if (process_ended(p.pid)) {
      // Read what it wrote before it died, then fail the rest.
      p.pulls.clear();
      end_after_drain(static_cast<int>(i), HM_ERR_PEER_FAILED,
                      fmt::format("{} (pid {}) exited without closing its shm endpoint (killed or "
                                  "crashed)",
                                  peer_name(static_cast<int>(i)), p.pid),
                      true);
    }
  }
}

void ShmTransport::end_after_drain(int peer, hm_status_t status, std::string message, bool log) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed() || !p.ending.empty()) return;
  p.ending = std::move(message);
  p.ending_status = status;
  p.ending_logged = log;
  p.attach_wanted = false;
  // read_ring does the rest, on this pass or the next (the doorbell makes sure there is one).
  wake();
}

void ShmTransport::peer_gone(int peer, hm_status_t status, const std::string& message, bool log) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failure.failed()) return;
  if (log) HM_LOG_WARN("shm rank {}: {}", directory_.rank(), message);
  p.failure.set(status, message);
  {
    std::lock_guard lock(board_mutex_);
    board_failures_[static_cast<std::size_t>(peer)] = {status, message};
  }
  board_failed_[static_cast<std::size_t>(peer)].store(true, std::memory_order_release);
  p.attach_wanted = false;
  p.pulls.clear();
  p.parked.clear();
  p.posted.clear();
  p.held.clear();
  p.held_by_tag.clear();
  p.held_bytes = 0;
  p.stuck_since.reset();
  if (p.writer) {
    // Nothing more goes to it, and any message of ours it may be reading is about to be
    // released: tell it before failing the sends.
    {
      std::lock_guard lock(p.lane->mutex);
      p.lane->open = false;
    }
    store_release(p.writer->control().closed, 1u);
    ring_doorbell(p.segment->header());
    complete_acknowledged(p);  // messages it finished reading succeeded
  }
  for (auto& [cookie, op] : p.awaiting) op.request->complete(status, message);
  p.awaiting.clear();
  for (auto& op : p.sends) op.request->complete(status, message);
  p.sends.clear();
  matcher_.fail_peer(peer, status, message);
  check_connected();
  failure_listener_(peer, status, message);
}

void ShmTransport::do_shutdown(hm_status_t status, const std::string& why) {
  if (!closed_.close(status, why)) return;
  {
    std::lock_guard lock(mutex_);
    final_status_ = status;
    final_why_ = why;
  }
  // Tell the peers first: the rings this rank writes, then its own segment, then their doorbells.
  for (auto& p : peers_) {
    if (p.writer) {
      {
        std::lock_guard lock(p.lane->mutex);
        p.lane->open = false;
      }
      store_release(p.writer->control().closed, 1u);
    }
  }
  write_close_reason(own_.header(), status, why);
  store_release(own_.header().closed, 1u);
  for (auto& p : peers_) {
    if (p.segment) ring_doorbell(p.segment->header());
  }
  // From here on no copy touches a caller's buffer.
  for (auto& p : peers_) {
    p.pulls.clear();
    p.parked.clear();
    p.posted.clear();
    p.held.clear();
    p.held_by_tag.clear();
    p.held_bytes = 0;
    p.stuck_since.reset();
    complete_acknowledged(p);
    for (auto& [cookie, op] : p.awaiting) op.request->complete(status, why);
    p.awaiting.clear();
    for (auto& op : p.sends) op.request->complete(status, why);
    p.sends.clear();
  }
  matcher_.fail_all(status, why);
  connect_waiters_.complete_all(status, why);
  own_.unlink();
}

}  // namespace

ShmTuning ShmTuning::from_env() {
  ShmTuning tuning;
  if (auto bytes = env_int("HOLMES_SHM_RING_BYTES", static_cast<std::int64_t>(kMinRingBytes),
                           static_cast<std::int64_t>(kMaxRingBytes))) {
    tuning.ring_bytes = floor_power_of_two(static_cast<std::uint64_t>(*bytes));
  }
  if (auto cma = env_int("HOLMES_SHM_CMA", 0, 1)) tuning.cma = *cma == 1;
  if (auto min = env_int("HOLMES_SHM_CMA_MIN_BYTES", 1, std::int64_t{1} << 40)) {
    tuning.cma_min_bytes = static_cast<std::uint64_t>(*min);
  }
  if (auto park = env_int("HOLMES_SHM_PARK_US", 0, 1000000)) {
    tuning.park_grace = std::chrono::microseconds(*park);
  }
  if (auto poll = env_int("HOLMES_SHM_POLL", 0, 1)) tuning.caller_progress = *poll == 1;
  if (auto window = env_int("HOLMES_SHM_POLL_US", 0, 1000000)) {
    tuning.poll_window = std::chrono::microseconds(*window);
  }
  if (auto fused = env_int("HOLMES_SHM_FUSED_REDUCE", 0, 1)) tuning.fused_reduce = *fused == 1;
  return tuning;
}

bool shm_available(std::string* why) {
  // Checked once per process (a function-local static: whether /dev/shm works does not change
  // under a running job); the same pass removes segments that dead processes left behind.
  static const std::string reason = [] {
    const std::string name = fmt::format("{}probe-{}", kNamePrefix, getpid());
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      return fmt::format("cannot create POSIX shared memory ({}): is /dev/shm mounted?",
                         std::strerror(errno));
    }
    if (fd >= 0) {
      close(fd);
      shm_unlink(name.c_str());
    }
    remove_stale_segments();
    return std::string();
  }();
  if (why != nullptr) *why = reason;
  return reason.empty();
}

std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options) {
  return make_shm_transport(options, ShmTuning::from_env());
}

std::unique_ptr<Transport> make_shm_transport(const TransportOptions& options,
                                              const ShmTuning& tuning) {
  require(tuning.ring_bytes >= kMinRingBytes && tuning.ring_bytes <= kMaxRingBytes &&
              (tuning.ring_bytes & (tuning.ring_bytes - 1)) == 0,
          "shm: ring size {} is not a power of two in [{}, {}]", tuning.ring_bytes, kMinRingBytes,
          kMaxRingBytes);
  return std::make_unique<ShmTransport>(options, tuning);
}

}  // namespace holmes::shm
