#ifndef CSOCKETLOOP_H
#define CSOCKETLOOP_H

// What the agent's socket loop needs from C that Swift's Glibc module does not carry: epoll,
// eventfd, accept4's flags and struct ucred (SO_PEERCRED).

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

/// accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC: the new socket, or -1 with errno set.
int fsl_accept(int listener);

/// The peer's pid, uid and gid of a connected Unix socket (SO_PEERCRED). 0, or -1 with errno set.
int fsl_peer_credentials(int socket, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// Writes `length` bytes without blocking and without SIGPIPE (send with MSG_NOSIGNAL). The
/// bytes written, or -1 with errno set.
ssize_t fsl_send(int socket, const void *bytes, size_t length);

#endif
