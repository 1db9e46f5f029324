#ifndef CSOCKETLOOP_H
#define CSOCKETLOOP_H

// What the agent's socket loop needs from C that Swift's Glibc module does not carry: epoll,
// eventfd, accept4's flags and struct ucred (SO_PEERCRED); the O_PATH descriptors through which
// `fleet-tokend prepare-directories` changes a directory's owner and mode (GNU declarations); and
// statfs, for the cache file's file system; and the calling thread's kernel id (gettid), whose
// priority a background write lowers.

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/types.h>

/// epoll_data's 64-bit word: what the loop keeps with each registered descriptor.
static inline struct epoll_event fsl_event(uint32_t events, uint64_t data) {
    struct epoll_event event;
    event.events = events;
    event.data.u64 = data;
    return event;
}

/// The 64-bit word of an event epoll_wait returned.
static inline uint64_t fsl_event_data(const struct epoll_event *event) { return event->data.u64; }

/// The statfs f_type of the file system holding `path` (TMPFS_MAGIC, RAMFS_MAGIC, ...). 0, or -1
/// with errno set.
int fsl_file_system_type(const char *path, int64_t *type);

/// The calling thread's kernel id (gettid(2)), for setpriority(PRIO_PROCESS, id, ...) on that
/// thread alone.
pid_t fsl_thread_id(void);

/// Lets the calling thread run only when no other thread wants the core (SCHED_IDLE, which needs
/// no privilege: a thread of the normal policy that wakes takes the core from it at once); where
/// the system refuses that, lowers its nice value by `fallback_niceness` (at most to 19). Per
/// thread, and for good: an unprivileged thread cannot take either back. 1: idle, 2: niced, -1:
/// unchanged (errno set).
int fsl_thread_run_when_idle(int fallback_niceness);

/// The calling thread's scheduling: 1 when SCHED_IDLE, 0 otherwise, -1 on error; its nice value
/// in `niceness`.
int fsl_thread_scheduling(int *niceness);

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC: the new socket, or -1 with errno set.
int fsl_accept(int listener);

/// The peer's pid, uid and gid of a connected Unix socket (SO_PEERCRED). 0, or -1 with errno set.
int fsl_peer_credentials(int socket, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// Whether the peer of a connected Unix socket is in the calling process's PID namespace: 1 yes,
/// 0 no, -1 cannot tell (no SO_PEERPIDFD, before Linux 6.5; the peer gone). The peer is named by
/// the pidfd the kernel took when it connected (SO_PEERPIDFD), never by a pid number that may
/// since name another process: its namespace comes from the pidfd itself
/// (PIDFD_GET_PID_NAMESPACE, Linux 6.11), else from /proc/<pid>/ns/pid, read while the pidfd
/// shows the process still alive.
int fsl_peer_in_own_pid_namespace(int socket);

/// The process listening on the Unix socket at `path`, as the kernel reports it to a client that
/// connects without waiting (the credentials of the process that last called listen(),
/// SO_PEERCRED, with its pid in the caller's PID namespace): its pid in `*pid`, and a pidfd naming
/// it, which the kernel took at connect (SO_PEERPIDFD, Linux 6.5; on an older kernel only,
/// pidfd_open on that pid, which a pid reused in between could fool). The pidfd; -2 when the
/// listener is outside the caller's PID namespace (its pid there is 0); -1 with errno set when
/// nothing answers there (a full backlog is EAGAIN) or the listener has exited.
int fsl_listener_pidfd(const char *path, int32_t *pid);

/// Sends `signal` to the process `pidfd` names (pidfd_send_signal): never to another process
/// that got its pid since. 0, or -1 with errno set.
int fsl_pidfd_send_signal(int pidfd, int signal);

/// Whether the process `pidfd` names has exited: 1 yes, 0 no, -1 with errno set.
int fsl_pidfd_exited(int pidfd);

/// Names the calling thread (pthread_setname_np): what `top -H`, perf and crash reports show.
/// 0, or an error number (ERANGE for a name over 15 bytes).
int fsl_name_thread(const char *name);

/// Writes `length` bytes without blocking and without SIGPIPE (send with MSG_NOSIGNAL). The
/// bytes written, or -1 with errno set. Not a cancellation point, unlike send(2)'s wrapper.
ssize_t fsl_send(int socket, const void *bytes, size_t length);

/// read(2), but not a cancellation point, unlike its wrapper: the bytes read, 0 at the end of
/// input, or -1 with errno set.
ssize_t fsl_read(int descriptor, void *bytes, size_t length);

/// Opens the directory at `path` with O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC: a symbolic
/// link there fails (ENOTDIR or ELOOP), and no permission on the directory itself is needed (only
/// search on the one it is in). The descriptor, or -1 with errno set.
int fsl_open_directory_path(const char *path);

/// Changes the owner and group of what the O_PATH descriptor `fd` names (fchownat with
/// AT_EMPTY_PATH): the object opened, never a path looked up again. 0, or -1 with errno set.
int fsl_chown_descriptor(int fd, uint32_t uid, uint32_t gid);

/// Sets the mode of what the O_PATH descriptor `fd` names, through /proc/self/fd/<fd> (an O_PATH
/// descriptor takes no fchmod; the link there is the object opened, not a path looked up again).
/// 0, or -1 with errno set (ENOENT without /proc).
int fsl_chmod_descriptor(int fd, mode_t mode);

#endif
