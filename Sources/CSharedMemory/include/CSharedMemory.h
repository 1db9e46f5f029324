#ifndef CSHAREDMEMORY_H
#define CSHAREDMEMORY_H

// What the shared-memory read path needs from C and Swift cannot import: memfd_create and
// F_SEAL_* (GNU declarations, defined in shim.c, which sets _GNU_SOURCE for itself alone),
// the CMSG_* macros of SCM_RIGHTS descriptor passing and CLOCK_BOOTTIME.
// Toolchain only: the client library links it too.

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// A sealable, close-on-exec anonymous memory file, or -1 with errno set.
int fsm_memfd_create(const char *name);

/// Seals a memory file so that nobody can write, grow or shrink it again through any other
/// descriptor or mapping (F_SEAL_FUTURE_WRITE, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL); the
/// writable mapping made before keeps working. 0, or -1 with errno set.
int fsm_seal_read_only(int fd);

/// The seals of a memory file (F_GET_SEALS), or -1 with errno set.
int fsm_seals(int fd);

/// Whether `seals` (from fsm_seals) hold every seal fsm_seal_read_only adds.
int fsm_is_sealed_read_only(int seals);

/// Whether `seals` (from fsm_seals) keep a memory file from ever changing size or content through
/// a new descriptor or mapping: F_SEAL_SHRINK, F_SEAL_GROW, and F_SEAL_WRITE or
/// F_SEAL_FUTURE_WRITE. A reader maps nothing less: a file its owner can still shrink would kill
/// the reader with SIGBUS.
int fsm_is_sealed_against_change(int seals);

/// A new read-only descriptor of the file behind `fd` (re-opened through /proc/self/fd), or -1.
int fsm_reopen_read_only(int fd);

/// An inotify instance (non-blocking, close-on-exec) that tells when memory files are freed,
/// or -1 with errno set.
int fsm_release_watch_open(void);

/// Watches the memory file behind `fd` (through /proc/self/fd): its watch number, which
/// fsm_release_watch_read reports once no descriptor or mapping of the file is left in any process
/// (the kernel freed its pages); -1 with errno set.
int fsm_release_watch_add(int watch, int fd);

/// Reads the watch numbers of files freed since the last call into `released` (at most 256 a
/// call: pass room for 256). The count, 0 when there is none, -1 with errno set.
int fsm_release_watch_read(int watch, int *released);

/// Sends `length` bytes on a stream socket with `fd` attached as SCM_RIGHTS, without blocking
/// and without SIGPIPE. The bytes sent (the descriptor rides with the first), or -1 with errno.
ssize_t fsm_send_with_descriptor(int socket, const void *bytes, size_t length, int fd);

/// Receives up to `length` bytes; descriptors that came with them (SCM_RIGHTS, close-on-exec)
/// are stored in `fds` (at most `max_fds`, the rest closed) and counted in `*fd_count`.
/// The bytes read, 0 at the end of the stream, or -1 with errno set.
ssize_t fsm_receive(int socket, void *bytes, size_t length, int *fds, int max_fds, int *fd_count);

/// CLOCK_BOOTTIME in nanoseconds: a monotonic clock every process on the host shares, which
/// counts suspended time too.
uint64_t fsm_boottime_ns(void);

/// Asks glibc's allocator to return the memory it holds free to the system (malloc_trim(0)):
/// the agent calls it after many connections closed. 1 if memory was released, else 0.
int fsm_return_free_memory(void);

/// Asks the processor to start loading the cache lines that hold the `length` bytes from `start`
/// (a hint: it never faults, whatever the address, and changes nothing).
static inline void fsm_prefetch(const void *start, size_t length) {
    const char *line = (const char *)((uintptr_t)start & ~(uintptr_t)63);
    const char *end = (const char *)start + length;
    for (; line < end; line += 64) __builtin_prefetch(line, 0, 3);
}

#endif
