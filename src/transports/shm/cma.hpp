// Cross-memory attach: reading a peer process's memory directly (process_vm_readv), so a large
// message is copied once, from the sender's buffer into the receiver's, instead of twice through
// a ring. The kernel allows it between processes of one user unless Yama's ptrace_scope or a
// seccomp filter forbids it; each consumer tests it on its producer (a probe word) before any
// message relies on it, and the ring carries everything where it does not work.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace holmes::shm {

// Reads into.size() bytes at `address` in process `pid`. Returns 0, or the errno that stopped
// it (ESRCH: no such process; EPERM: not allowed; EFAULT: not mapped there).
int read_process_memory(pid_t pid, std::uint64_t address, std::span<std::byte> into);

}  // namespace holmes::shm
