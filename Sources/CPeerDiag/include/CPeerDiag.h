#ifndef CPEERDIAG_H
#define CPEERDIAG_H

// What finding the owner of a loopback TCP connection's other end needs from C: a
// NETLINK_SOCK_DIAG (inet_diag) query of the calling process's network namespace.

#include <stdint.h>

/// What `cpd_tcp_socket_owner` found of the one socket that matched.
struct cpd_socket_owner {
    /// The uid that created the socket (inet_diag's idiag_uid). A descriptor passed to another
    /// process keeps its creator's uid.
    uint32_t uid;
    /// The socket's inode number (idiag_inode).
    uint32_t inode;
    /// The socket's TCP state (idiag_state: 1 established, 4 and 5 FIN_WAIT1/2, 6 TIME_WAIT, 8
    /// CLOSE_WAIT, ...).
    uint8_t state;
};

/// Asks the kernel, through NETLINK_SOCK_DIAG, for the TCP socket whose local end is
/// (`source`, `source_port`) and whose remote end is (`destination`, `destination_port`), in the
/// caller's network namespace (an exact lookup, SOCK_DIAG_BY_FAMILY with inet_diag_req_v2).
///
/// `family` is AF_INET (addresses of 4 bytes) or AF_INET6 (16 bytes); ports are in host byte
/// order. A socket the kernel reports is counted only when its addresses and ports are those
/// asked for (an IPv6 socket of IPv4-mapped addresses counts for its IPv4 addresses).
///
/// Returns the number of matching sockets (0 when there is none; the first one's owner is in
/// `*owner` when there is at least one), or -1 with errno set (ETIMEDOUT when the kernel did not
/// answer within a second, EPROTO for an answer that could not be read).
int cpd_tcp_socket_owner(
    int family,
    const uint8_t *source,
    uint16_t source_port,
    const uint8_t *destination,
    uint16_t destination_port,
    struct cpd_socket_owner *owner
);

#endif
