#define _GNU_SOURCE
#include "CSocketLoop.h"

#include <stddef.h>
#include <sys/socket.h>

int fsl_accept(int listener) { return accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

int fsl_peer_credentials(int socket, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    struct ucred credentials;
    socklen_t length = sizeof(credentials);
    if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    *pid = credentials.pid;
    *uid = credentials.uid;
    *gid = credentials.gid;
    return 0;
}

ssize_t fsl_send(int socket, const void *bytes, size_t length) {
    return send(socket, bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT);
}
