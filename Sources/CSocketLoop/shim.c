#define _GNU_SOURCE
#include "CSocketLoop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef PIDFD_GET_PID_NAMESPACE
#define PIDFD_GET_PID_NAMESPACE _IO(0xFF, 5)
#endif

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

// The socket loop's reads and sends are system calls made directly: glibc's read and send are
// cancellation points, which wrap each call in two more calls (enable and disable asynchronous
// cancellation), and the loop's thread is never cancelled.
ssize_t fsl_send(int socket, const void *bytes, size_t length) {
    return syscall(SYS_sendto, socket, bytes, length, MSG_NOSIGNAL | MSG_DONTWAIT, NULL, 0);
}

ssize_t fsl_read(int descriptor, void *bytes, size_t length) {
    return syscall(SYS_read, descriptor, bytes, length);
}

/// Whether `theirs` and the calling process's PID namespace are the same one: 1, 0, or -1.
static int same_as_own_pid_namespace(const struct stat *theirs) {
    struct stat ours;
    if (stat("/proc/self/ns/pid", &ours) != 0) return -1;
    return theirs->st_dev == ours.st_dev && theirs->st_ino == ours.st_ino;
}

int fsl_peer_in_own_pid_namespace(int socket) {
    int pidfd = -1;
    socklen_t length = sizeof(pidfd);
    if (getsockopt(socket, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &length) != 0 || pidfd < 0) return -1;
    int result = -1;
    struct stat theirs;
    int namespace = ioctl(pidfd, PIDFD_GET_PID_NAMESPACE, 0);
    if (namespace >= 0) {
        if (fstat(namespace, &theirs) == 0) result = same_as_own_pid_namespace(&theirs);
        close(namespace);
    } else {
        // An older kernel: the pid's /proc entry, trusted only if the process the pidfd names
        // is still alive once it was read (then the pid was still its own).
        struct ucred credentials;
        socklen_t credentialsLength = sizeof(credentials);
        char path[64];
        if (getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &credentialsLength) == 0
            && credentials.pid > 0) {
            snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)credentials.pid);
            struct pollfd exited = {.fd = pidfd, .events = POLLIN};
            if (stat(path, &theirs) == 0 && poll(&exited, 1, 0) == 0) result = same_as_own_pid_namespace(&theirs);
        }
    }
    close(pidfd);
    return result;
}

int fsl_listener_pidfd(const char *path, int32_t *pid) {
    *pid = 0;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(address.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(address.sun_path, path);
    int socket_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (socket_ < 0) return -1;
    int result = -1;
    int saved = 0;
    struct ucred credentials;
    socklen_t length = sizeof(credentials);
    if (connect(socket_, (struct sockaddr *)&address, sizeof(address)) != 0) {
        saved = errno;
    } else if (getsockopt(socket_, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        saved = errno;
    } else if (credentials.pid <= 0) {
        result = -2;
    } else {
        int pidfd = -1;
        socklen_t pidfdLength = sizeof(pidfd);
        if (getsockopt(socket_, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pidfdLength) == 0 && pidfd >= 0) {
            result = pidfd;
        } else if (errno == ENOPROTOOPT || errno == EINVAL) {
            // A kernel without SO_PEERPIDFD: the pid as it is now.
            result = (int)syscall(SYS_pidfd_open, credentials.pid, 0);
            saved = errno;
        } else {
            saved = errno;  // the listener has exited (ESRCH): nothing to name
        }
        if (result >= 0) *pid = credentials.pid;
    }
    close(socket_);
    errno = saved;
    return result;
}

int fsl_pidfd_send_signal(int pidfd, int signal) {
    return (int)syscall(SYS_pidfd_send_signal, pidfd, signal, NULL, 0);
}

int fsl_pidfd_exited(int pidfd) {
    struct pollfd exited = {.fd = pidfd, .events = POLLIN};
    int ready = poll(&exited, 1, 0);
    return ready < 0 ? -1 : ready > 0;
}

int fsl_name_thread(const char *name) { return pthread_setname_np(pthread_self(), name); }

int fsl_open_directory_path(const char *path) { return open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC); }

int fsl_chown_descriptor(int fd, uint32_t uid, uint32_t gid) { return fchownat(fd, "", uid, gid, AT_EMPTY_PATH); }

int fsl_chmod_descriptor(int fd, mode_t mode) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    return chmod(path, mode);
}

int fsl_file_system_type(const char *path, int64_t *type) {
    struct statfs info;
    if (statfs(path, &info) != 0) return -1;
    *type = (int64_t)info.f_type;
    return 0;
}

pid_t fsl_thread_id(void) { return (pid_t)syscall(SYS_gettid); }

int fsl_thread_run_when_idle(int fallback_niceness) {
    struct sched_param parameter = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_IDLE, &parameter) == 0) return 1;
    id_t thread = (id_t)syscall(SYS_gettid);
    errno = 0;
    int current = getpriority(PRIO_PROCESS, thread);
    if (errno != 0) return -1;
    int wanted = current + fallback_niceness > 19 ? 19 : current + fallback_niceness;
    return setpriority(PRIO_PROCESS, thread, wanted) == 0 ? 2 : -1;
}

int fsl_thread_scheduling(int *niceness) {
    errno = 0;
    *niceness = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    if (errno != 0) return -1;
    return sched_getscheduler(0) == SCHED_IDLE ? 1 : 0;
}
