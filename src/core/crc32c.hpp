// CRC32C (Castagnoli), the checksum of tcp fragments when HOLMES_CHECKSUM=1: the SSE4.2 crc32
// instruction where the CPU has it (chosen at run time), a table otherwise; both give the same
// value. crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace holmes {

// Continues `crc` (0 to start) over `data`.
std::uint32_t crc32c(std::span<const std::byte> data, std::uint32_t crc = 0);
// The same with the portable table only (tests compare the two).
std::uint32_t crc32c_portable(std::span<const std::byte> data, std::uint32_t crc = 0);
bool crc32c_hardware();

}  // namespace holmes
