// How a ucx endpoint's UCP worker address travels in a peer card. UCP parses a worker address
// without knowing its length, so bytes from elsewhere are checked here before UCP sees them:
//
//   "ucx1-<major>.<minor>-<16 hex digits of FNV-1a 64 over the bytes>-<hex bytes>"
//
// The UCX major.minor version is part of the text because UCP does not promise that workers of
// different versions understand each other's addresses; ranks that differ get a clear error
// instead of a crash inside UCX.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace holmes::ucx {

struct UcxVersion {
  unsigned major = 0;
  unsigned minor = 0;
  bool operator==(const UcxVersion&) const = default;
};

// Largest worker address accepted (UCX's are a few hundred bytes; with many HCAs a few KiB).
constexpr std::size_t kMaxWorkerAddressBytes = 64u << 10;

std::string encode_worker_address(std::span<const std::uint8_t> address, UcxVersion version);

// The worker address bytes. Throws HM_ERR_INVALID_ARGUMENT naming `what` (e.g. "rank 3's ucx
// address") when the text is not an address of this format or is damaged, HM_ERR_UNSUPPORTED when
// it comes from another UCX version than `ours`.
std::vector<std::uint8_t> decode_worker_address(std::string_view text, UcxVersion ours,
                                                const std::string& what);

}  // namespace holmes::ucx
