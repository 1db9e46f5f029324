#include "CPeerDiag.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/// `address` of `family` as 16 bytes: IPv4 as IPv4-mapped IPv6 (::ffff:a.b.c.d).
static void cpd_as_ipv6(int family, const uint8_t *address, uint8_t out[16]) {
    if (family == AF_INET) {
        memset(out, 0, 10);
        out[10] = 0xff;
        out[11] = 0xff;
        memcpy(out + 12, address, 4);
    } else {
        memcpy(out, address, 16);
    }
}

/// Whether the socket `message` describes has exactly the addresses and ports asked for.
static bool cpd_matches(
    const struct inet_diag_msg *message,
    int family,
    const uint8_t *source,
    uint16_t source_port,
    const uint8_t *destination,
    uint16_t destination_port
) {
    if (message->idiag_family != AF_INET && message->idiag_family != AF_INET6) return false;
    if (ntohs(message->id.idiag_sport) != source_port || ntohs(message->id.idiag_dport) != destination_port) {
        return false;
    }
    uint8_t wanted_source[16], wanted_destination[16], got_source[16], got_destination[16];
    cpd_as_ipv6(family, source, wanted_source);
    cpd_as_ipv6(family, destination, wanted_destination);
    cpd_as_ipv6(message->idiag_family, (const uint8_t *)message->id.idiag_src, got_source);
    cpd_as_ipv6(message->idiag_family, (const uint8_t *)message->id.idiag_dst, got_destination);
    return memcmp(wanted_source, got_source, 16) == 0 && memcmp(wanted_destination, got_destination, 16) == 0;
}

int cpd_tcp_socket_owner(
    int family,
    const uint8_t *source,
    uint16_t source_port,
    const uint8_t *destination,
    uint16_t destination_port,
    struct cpd_socket_owner *owner
) {
    if (family != AF_INET && family != AF_INET6) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    size_t length = family == AF_INET ? 4 : 16;

    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } query;
    memset(&query, 0, sizeof query);
    query.header.nlmsg_len = sizeof query;
    query.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    // No NLM_F_DUMP: the kernel looks the one socket of this 4-tuple up in its established
    // table (inet_diag_find_one_icsk), and answers it or ENOENT.
    query.header.nlmsg_flags = NLM_F_REQUEST;
    query.header.nlmsg_seq = 1;
    query.request.sdiag_family = (uint8_t)family;
    query.request.sdiag_protocol = IPPROTO_TCP;
    query.request.idiag_states = ~0U;
    query.request.id.idiag_sport = htons(source_port);
    query.request.id.idiag_dport = htons(destination_port);
    memcpy(query.request.id.idiag_src, source, length);
    memcpy(query.request.id.idiag_dst, destination, length);
    query.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    query.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

    int diag = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (diag < 0) return -1;
    struct timeval timeout = {.tv_sec = 1, .tv_usec = 0};
    if (setsockopt(diag, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout) != 0) goto failed;

    struct sockaddr_nl kernel;
    memset(&kernel, 0, sizeof kernel);
    kernel.nl_family = AF_NETLINK;
    ssize_t sent;
    do {
        sent = sendto(diag, &query, sizeof query, 0, (struct sockaddr *)&kernel, sizeof kernel);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0) goto failed;
    if ((size_t)sent != sizeof query) {
        errno = EPROTO;
        goto failed;
    }

    int matches = 0;
    bool more = true;
    while (more) {
        // Aligned for the netlink headers.
        long buffer[8192 / sizeof(long)];
        struct sockaddr_nl from;
        socklen_t from_length = sizeof from;
        ssize_t received;
        do {
            received = recvfrom(diag, buffer, sizeof buffer, 0, (struct sockaddr *)&from, &from_length);
        } while (received < 0 && errno == EINTR);
        if (received < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) errno = ETIMEDOUT;
            goto failed;
        }
        if (from.nl_pid != 0) continue;  // Not from the kernel.
        int remaining = (int)received;
        more = false;
        for (struct nlmsghdr *message = (struct nlmsghdr *)buffer; NLMSG_OK(message, remaining);
             message = NLMSG_NEXT(message, remaining)) {
            if (message->nlmsg_seq != 1) continue;
            if (message->nlmsg_flags & NLM_F_MULTI) more = true;
            if (message->nlmsg_type == NLMSG_DONE) {
                more = false;
                break;
            }
            if (message->nlmsg_type == NLMSG_ERROR) {
                if (message->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
                    errno = EPROTO;
                    goto failed;
                }
                const struct nlmsgerr *error = NLMSG_DATA(message);
                if (error->error == -ENOENT) {
                    more = false;
                    break;
                }
                errno = error->error < 0 ? -error->error : EPROTO;
                goto failed;
            }
            if (message->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
            if (message->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
                errno = EPROTO;
                goto failed;
            }
            const struct inet_diag_msg *socket_message = NLMSG_DATA(message);
            if (!cpd_matches(socket_message, family, source, source_port, destination, destination_port)) continue;
            if (matches == 0) {
                owner->uid = socket_message->idiag_uid;
                owner->inode = socket_message->idiag_inode;
                owner->state = socket_message->idiag_state;
            }
            matches += 1;
        }
    }
    close(diag);
    return matches;

failed: {
    int saved = errno;
    close(diag);
    errno = saved;
    return -1;
}
}
