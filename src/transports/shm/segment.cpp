#include "transports/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "bootstrap/auth.hpp"
#include "core/status.hpp"

namespace holmes::shm {
namespace {

// Longest context excerpt kept in a name (names are limited to NAME_MAX; the random part keeps
// them unique, the excerpt only helps a person reading /dev/shm).
constexpr std::size_t kContextExcerpt = 48;
constexpr std::size_t kMaxNameBytes = 200;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// A name from a peer, fit for an error message (it may be anything).
std::string printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 120)) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  if (text.size() > 120) out += "...";
  return out;
}

std::string errno_text(int error) { return std::strerror(error); }

auth::Nonce to_nonce(const std::uint8_t (&bytes)[kNonceBytes]) {
  auth::Nonce nonce{};
  std::memcpy(nonce.data(), bytes, kNonceBytes);
  return nonce;
}

bool power_of_two(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string random_suffix() {
  const auto nonce = auth::random_nonce();
  return fmt::format("{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", nonce[0], nonce[1], nonce[2], nonce[3],
                     nonce[4], nonce[5]);
}

Mapping map_shared(int fd, std::size_t bytes, int protection, const std::string& name) {
  void* base = mmap(nullptr, bytes, protection, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    fail(HM_ERR_TRANSPORT, "cannot map shm segment {} ({} bytes): {}", name, bytes,
         errno_text(errno));
  }
  return Mapping(base, bytes);
}

}  // namespace

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

Mapping::Mapping(Mapping&& other) noexcept : base_(other.base_), bytes_(other.bytes_) {
  other.base_ = nullptr;
  other.bytes_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = other.base_;
    bytes_ = other.bytes_;
    other.base_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) close(fd_);
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

bool is_segment_name(std::string_view name) {
  if (name.size() <= kNamePrefix.size() || name.size() > kMaxNameBytes) return false;
  if (name.substr(0, kNamePrefix.size()) != kNamePrefix) return false;
  for (char c : name.substr(1)) {
    if (!name_char(c)) return false;
  }
  return true;
}

std::uint64_t context_hash(std::string_view context) {
  std::uint64_t hash = 14695981039346656037ull;
  for (char c : context) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

std::uint64_t pid_namespace_id() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

namespace {

std::string owner_binding(const std::string& context, const SegmentHeader& header,
                          const std::string& name) {
  return fmt::format("shm-owner|{}|{}|rank {} of {}|ring {}", context, name, header.owner_rank,
                     header.ring_count, header.ring_bytes);
}

std::string producer_binding(const std::string& context, int from, int to) {
  return fmt::format("shm-producer|{}|{}->{}", context, from, to);
}

auth::Mac to_mac(const std::uint8_t (&bytes)[kMacBytes]) {
  auth::Mac mac{};
  std::memcpy(mac.data(), bytes, kMacBytes);
  return mac;
}

}  // namespace

void Proofs::owner_mac(const SegmentHeader& header, const std::string& name,
                       std::uint8_t (&out)[kMacBytes]) const {
  const auto mac = token_.mac(auth::Role::kServer, to_nonce(header.owner_nonce), auth::Nonce{},
                              owner_binding(token_.context(), header, name));
  std::memcpy(out, mac.data(), kMacBytes);
}

bool Proofs::proves_owner(const SegmentHeader& header, const std::string& name) const {
  return token_.proves(to_mac(header.owner_mac), auth::Role::kServer, to_nonce(header.owner_nonce),
                       auth::Nonce{}, owner_binding(token_.context(), header, name));
}

void Proofs::producer_mac(const SegmentHeader& header, const RingControl& control, int from, int to,
                          std::uint8_t (&out)[kMacBytes]) const {
  const auto mac =
      token_.mac(auth::Role::kClient, to_nonce(header.owner_nonce),
                 to_nonce(control.producer_nonce), producer_binding(token_.context(), from, to));
  std::memcpy(out, mac.data(), kMacBytes);
}

bool Proofs::proves_producer(const SegmentHeader& header, const RingControl& control, int from,
                             int to) const {
  return token_.proves(to_mac(control.producer_mac), auth::Role::kClient,
                       to_nonce(header.owner_nonce), to_nonce(control.producer_nonce),
                       producer_binding(token_.context(), from, to));
}

// ---------------------------------------------------------------------------------------------
// The segment this endpoint owns
// ---------------------------------------------------------------------------------------------

OwnSegment::OwnSegment(const std::string& context) {
  std::string excerpt;
  for (char c : context) {
    if (excerpt.size() == kContextExcerpt) break;
    excerpt += name_char(c) ? c : '.';
  }
  if (excerpt.empty()) excerpt = "comm";
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    name_ = fmt::format("{}{}-{}-{}", kNamePrefix, excerpt, getpid(), random_suffix());
    fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      fail(HM_ERR_TRANSPORT, "cannot create shm segment {}: {} (is /dev/shm mounted and writable?)",
           name_, errno_text(errno));
    }
  }
  if (fd < 0) fail(HM_ERR_TRANSPORT, "cannot find a free shm segment name like {}", name_);
  fd_ = FileDescriptor(fd);
  linked_ = true;
  try {
    if (ftruncate(fd, kHeaderBytes) != 0) {
      fail(HM_ERR_TRANSPORT, "cannot size shm segment {}: {}", name_, errno_text(errno));
    }
    if (const int error = posix_fallocate(fd, 0, kHeaderBytes); error != 0) {
      fail(HM_ERR_OUT_OF_MEMORY, "no room in /dev/shm for shm segment {}: {}", name_,
           errno_text(error));
    }
    mapping_ = map_shared(fd, kHeaderBytes, PROT_READ | PROT_WRITE, name_);
  } catch (...) {
    unlink();
    throw;
  }
  SegmentHeader& h = header();
  std::memset(&h, 0, sizeof(h));
  h.magic = kSegmentMagic;
  h.version = kLayoutVersion;
  h.header_bytes = kHeaderBytes;
  h.owner_pid = getpid();
  h.owner_pid_namespace = pid_namespace_id();
  h.context_hash = context_hash(context);
  const auto nonce = auth::random_nonce();
  std::memcpy(h.owner_nonce, nonce.data(), kNonceBytes);
  store_release(h.state, static_cast<std::uint32_t>(SegmentState::kCreated));
}

OwnSegment::~OwnSegment() { unlink(); }

void OwnSegment::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(name_.c_str());
}

void OwnSegment::set_layout(int rank, std::uint32_t ring_count, std::uint64_t ring_bytes,
                            const std::vector<bool>& reserve, const Proofs& proofs) {
  const std::uint64_t stride = kRingControlBytes + ring_bytes;
  const std::uint64_t total = kRingsOffset + ring_count * stride;
  if (ftruncate(fd_.get(), static_cast<off_t>(total)) != 0) {
    fail(HM_ERR_TRANSPORT, "cannot size shm segment {} to {} bytes: {}", name_, total,
         errno_text(errno));
  }
  // Reserve now what the peers will write (and the board this owner writes), so that a full
  // /dev/shm is this error rather than a SIGBUS when a page is first touched.
  if (const int error = posix_fallocate(fd_.get(), kBoardOffset, kBoardBytes); error != 0) {
    fail(HM_ERR_OUT_OF_MEMORY, "no room in /dev/shm for the board of shm segment {}: {}", name_,
         errno_text(error));
  }
  for (std::uint32_t slot = 0; slot < ring_count && slot < reserve.size(); ++slot) {
    if (!reserve[slot]) continue;
    const auto offset = static_cast<off_t>(kRingsOffset + slot * stride);
    if (const int error = posix_fallocate(fd_.get(), offset, static_cast<off_t>(stride));
        error != 0) {
      fail(HM_ERR_OUT_OF_MEMORY,
           "no room in /dev/shm for the rings of shm segment {} ({} MiB per peer): {}; free "
           "/dev/shm, enlarge it (e.g. docker --shm-size) or lower HOLMES_SHM_RING_BYTES",
           name_, stride >> 20, errno_text(error));
    }
  }
  mapping_ = map_shared(fd_.get(), total, PROT_READ | PROT_WRITE, name_);
  ring_bytes_ = ring_bytes;
  SegmentHeader& h = header();
  h.owner_rank = rank;
  h.ring_count = ring_count;
  h.ring_bytes = ring_bytes;
  h.ring_stride = stride;
  h.rings_offset = kRingsOffset;
  h.total_bytes = total;
  proofs.owner_mac(h, name_, h.owner_mac);
  store_release(h.state, static_cast<std::uint32_t>(SegmentState::kReady));
}

RingControl& OwnSegment::control(int rank) const {
  return *reinterpret_cast<RingControl*>(mapping_.data() + kRingsOffset +
                                         static_cast<std::size_t>(rank) *
                                             (kRingControlBytes + ring_bytes_));
}

std::byte* OwnSegment::ring_data(int rank) const {
  return reinterpret_cast<std::byte*>(&control(rank)) + kRingControlBytes;
}

// ---------------------------------------------------------------------------------------------
// A peer's segment
// ---------------------------------------------------------------------------------------------

std::unique_ptr<PeerSegment> PeerSegment::open(const std::string& name, const Expect& expect,
                                               const Proofs& proofs) {
  if (!is_segment_name(name)) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "rank {} published '{}' as its shm address, which is not a Holmes shm segment name",
         expect.owner_rank, printable(name));
  }
  const int raw_fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (raw_fd < 0) {
    if (errno == ENOENT) {
      fail(HM_ERR_PEER_FAILED,
           "shm segment {} of rank {} does not exist: its endpoint is gone, or it runs on "
           "another host",
           name, expect.owner_rank);
    }
    fail(HM_ERR_TRANSPORT, "cannot open shm segment {} of rank {}: {}", name, expect.owner_rank,
         errno_text(errno));
  }
  const FileDescriptor fd(raw_fd);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    fail(HM_ERR_TRANSPORT, "cannot inspect shm segment {}: {}", name, errno_text(errno));
  }
  if (st.st_uid != geteuid()) {
    fail(HM_ERR_TRANSPORT, "shm segment {} belongs to uid {}, not to this user (uid {}): refused",
         name, st.st_uid, geteuid());
  }
  if (static_cast<std::uint64_t>(st.st_size) < kHeaderBytes) {
    fail(HM_ERR_TRANSPORT, "shm segment {} is not a Holmes segment: only {} bytes", name,
         st.st_size);
  }
  SegmentHeader h{};
  {
    const Mapping head = map_shared(fd.get(), kHeaderBytes, PROT_READ, name);
    auto& shared = *reinterpret_cast<SegmentHeader*>(head.data());
    // The state first: once it reads kReady, the layout written before it is visible.
    h.state = load_acquire(shared.state);
    std::memcpy(&h, &shared, offsetof(SegmentHeader, state));
    std::memcpy(&h.owner_rank, &shared.owner_rank,
                offsetof(SegmentHeader, closed) - offsetof(SegmentHeader, owner_rank));
  }
  if (h.magic != kSegmentMagic) {
    fail(HM_ERR_TRANSPORT, "shm segment {} is not a Holmes segment (bad magic {:#018x})", name,
         h.magic);
  }
  if (h.version != kLayoutVersion || h.header_bytes != kHeaderBytes) {
    fail(HM_ERR_TRANSPORT,
         "shm segment {} has layout version {} ({} header bytes); this build speaks version {}: "
         "do all ranks run the same Holmes?",
         name, h.version, h.header_bytes, kLayoutVersion);
  }
  if (h.context_hash != expect.context_hash) {
    fail(HM_ERR_TRANSPORT, "shm segment {} belongs to another communicator, not to this one", name);
  }
  if (h.state == static_cast<std::uint32_t>(SegmentState::kCreated)) return nullptr;
  if (h.state != static_cast<std::uint32_t>(SegmentState::kReady)) {
    fail(HM_ERR_TRANSPORT, "shm segment {} is malformed (state {})", name, h.state);
  }
  const std::uint64_t stride = kRingControlBytes + h.ring_bytes;
  if (h.owner_rank != expect.owner_rank || h.ring_count != expect.ring_count) {
    fail(HM_ERR_TRANSPORT,
         "shm segment {} belongs to rank {} of {}, but rank {} of {} was expected there", name,
         h.owner_rank, h.ring_count, expect.owner_rank, expect.ring_count);
  }
  if (!power_of_two(h.ring_bytes) || h.ring_bytes < kMinRingBytes || h.ring_bytes > kMaxRingBytes ||
      h.ring_count > kMaxRings || h.ring_stride != stride || h.rings_offset != kRingsOffset ||
      h.total_bytes != kRingsOffset + h.ring_count * stride) {
    fail(HM_ERR_TRANSPORT,
         "shm segment {} is malformed (ring {} bytes, stride {}, {} rings, {} bytes in all)", name,
         h.ring_bytes, h.ring_stride, h.ring_count, h.total_bytes);
  }
  if (fstat(fd.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) < h.total_bytes) {
    fail(HM_ERR_TRANSPORT, "shm segment {} is truncated ({} bytes, its header says {})", name,
         st.st_size, h.total_bytes);
  }
  if (!proofs.proves_owner(h, name)) {
    fail(HM_ERR_AUTH,
         "shm segment {} of rank {} carries no valid proof of the job token (HOLMES_TOKEN "
         "differs, or the segment is forged)",
         name, expect.owner_rank);
  }
  auto mapping = map_shared(fd.get(), h.total_bytes, PROT_READ | PROT_WRITE, name);
  const auto ns = pid_namespace_id();
  return std::unique_ptr<PeerSegment>(new PeerSegment(
      name, std::move(mapping), h.ring_bytes, h.owner_pid, ns != 0 && ns == h.owner_pid_namespace));
}

RingControl& PeerSegment::control(int rank) const {
  return *reinterpret_cast<RingControl*>(mapping_.data() + kRingsOffset +
                                         static_cast<std::size_t>(rank) *
                                             (kRingControlBytes + ring_bytes_));
}

std::byte* PeerSegment::ring_data(int rank) const {
  return reinterpret_cast<std::byte*>(&control(rank)) + kRingControlBytes;
}

BoardSlotHeader& board_slot(std::byte* segment, std::uint64_t round) {
  return *reinterpret_cast<BoardSlotHeader*>(segment + kBoardOffset +
                                             (round % 2) * kBoardSlotStride);
}

std::byte* board_data(std::byte* segment, std::uint64_t round) {
  return reinterpret_cast<std::byte*>(&board_slot(segment, round)) + kCacheLine;
}

// ---------------------------------------------------------------------------------------------
// Leftovers
// ---------------------------------------------------------------------------------------------

void remove_stale_segments() {
  const auto ns = pid_namespace_id();
  if (ns == 0) return;  // cannot tell whose pids we would be checking
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string_view prefix = kNamePrefix.substr(1);
  while (const dirent* entry = readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = "/" + file;
    if (!is_segment_name(name)) continue;
    const int raw_fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (raw_fd < 0) continue;
    const FileDescriptor fd(raw_fd);
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || st.st_uid != geteuid() ||
        static_cast<std::uint64_t>(st.st_size) < kHeaderBytes) {
      continue;
    }
    void* base = mmap(nullptr, kHeaderBytes, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (base == MAP_FAILED) continue;
    const Mapping head(base, kHeaderBytes);
    SegmentHeader h{};
    std::memcpy(&h, head.data(), offsetof(SegmentHeader, state));
    if (h.magic != kSegmentMagic || h.owner_pid_namespace != ns || h.owner_pid <= 0) continue;
    if (kill(h.owner_pid, 0) != 0 && errno == ESRCH) shm_unlink(name.c_str());
  }
  closedir(dir);
}

void write_close_reason(SegmentHeader& header, hm_status_t status, const std::string& why) {
  const std::size_t n = std::min(why.size(), kCloseReasonBytes - 1);
  std::memcpy(header.closed_reason, why.data(), n);
  header.closed_reason[n] = '\0';
  store_release(header.closed_status, static_cast<std::uint32_t>(status));
}

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

}  // namespace holmes::shm
