#include "transports/shm/cma.hpp"

#include <sys/uio.h>

#include <cerrno>

namespace holmes::shm {

int read_process_memory(pid_t pid, std::uint64_t address, std::span<std::byte> into) {
  std::size_t done = 0;
  while (done < into.size()) {
    iovec local{into.data() + done, into.size() - done};
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address + done)),
                 into.size() - done};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;  // a partial read that cannot go on: the range ends unmapped
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace holmes::shm
