#define _GNU_SOURCE
#include "CSharedMemory.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static const int read_only_seals = F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

int fsm_memfd_create(const char *name) { return memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING); }

int fsm_seal_read_only(int fd) { return fcntl(fd, F_ADD_SEALS, read_only_seals); }

int fsm_seals(int fd) { return fcntl(fd, F_GET_SEALS); }

int fsm_is_sealed_read_only(int seals) { return seals >= 0 && (seals & read_only_seals) == read_only_seals; }

int fsm_is_sealed_against_change(int seals) {
    return seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) &&
           (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0;
}

int fsm_reopen_read_only(int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    return open(path, O_RDONLY | O_CLOEXEC);
}

int fsm_release_watch_open(void) { return inotify_init1(IN_NONBLOCK | IN_CLOEXEC); }

int fsm_release_watch_add(int watch, int fd) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    // The file is unlinked from birth: its watch ends (IN_IGNORED, after IN_DELETE_SELF) when the
    // kernel evicts it, which is when the last descriptor and mapping anywhere are gone.
    return inotify_add_watch(watch, path, IN_DELETE_SELF);
}

int fsm_release_watch_read(int watch, int *released) {
    // 256 events of at least sizeof(struct inotify_event) bytes: the names are empty here.
    char buffer[256 * sizeof(struct inotify_event)] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t length = read(watch, buffer, sizeof buffer);
    if (length < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    int count = 0;
    for (char *at = buffer; at < buffer + length && count < 256;) {
        const struct inotify_event *event = (const struct inotify_event *)at;
        if (event->mask & IN_IGNORED) released[count++] = event->wd;
        at += sizeof(struct inotify_event) + event->len;
    }
    return count;
}

ssize_t fsm_send_with_descriptor(int socket, const void *bytes, size_t length, int fd) {
    struct iovec iov = {.iov_base = (void *)bytes, .iov_len = length};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {0};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof(int));
    ssize_t sent;
    do {
        sent = sendmsg(socket, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    return sent;
}

ssize_t fsm_receive(int socket, void *bytes, size_t length, int *fds, int max_fds, int *fd_count) {
    struct iovec iov = {.iov_base = bytes, .iov_len = length};
    union {
        char buffer[CMSG_SPACE(sizeof(int) * 8)];
        struct cmsghdr align;
    } control;
    struct msghdr message = {0};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    *fd_count = 0;
    ssize_t received;
    do {
        received = recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    if (received < 0) return received;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t index = 0; index < count; index++) {
            int fd;
            memcpy(&fd, CMSG_DATA(header) + index * sizeof(int), sizeof(int));
            if (*fd_count < max_fds) {
                fds[(*fd_count)++] = fd;
            } else {
                close(fd);
            }
        }
    }
    return received;
}

uint64_t fsm_boottime_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_BOOTTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

int fsm_return_free_memory(void) { return malloc_trim(0); }
