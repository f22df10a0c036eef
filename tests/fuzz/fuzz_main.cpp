// The libFuzzer entry point of one target; CMake builds this file once per target with
// HOLMES_FUZZ_TARGET naming the function of targets.hpp. An exception other than holmes::Error
// escapes the target, reaches std::terminate and is reported by libFuzzer as a crash.
#include <cstddef>
#include <cstdint>

#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  holmes::fuzz::HOLMES_FUZZ_TARGET(holmes::fuzz::Input(data, size));
  return 0;
}
