// A growable byte buffer that does not zero what it allocates. Holders write every byte before
// they read it (a fragment read from a socket, a bounce buffer filled range by range), so the
// zeroing std::vector<std::byte>(n) does would only cost a pass over memory per message: it was
// 2% of a 4-rank tcp allreduce of 16 MiB (perf, BENCHMARKS.md).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace holmes {

// std::allocator, except that value-less construction default-initializes (a no-op for
// std::byte) instead of value-initializing.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  using std::allocator<T>::allocator;
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  template <typename U>
  void construct(U* at) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(at)) U;
  }
  template <typename U, typename... Args>
  void construct(U* at, Args&&... args) {
    ::new (static_cast<void*>(at)) U(std::forward<Args>(args)...);
  }
};

using ByteBuffer = std::vector<std::byte, DefaultInitAllocator<std::byte>>;

}  // namespace holmes
