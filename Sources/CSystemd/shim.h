#ifndef CSYSTEMD_SHIM_H
#define CSYSTEMD_SHIM_H

// No _GNU_SOURCE here: it would change glibc's struct definitions (fd_set) against the ones the
// Swift Glibc module was built with. The few GNU declarations needed are spelled out below.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef F_ADD_SEALS
#define F_ADD_SEALS (1024 + 9)
#define F_GET_SEALS (1024 + 10)
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

extern int memfd_create(const char *name, unsigned int flags);

/// SD_LISTEN_FDS_START as a function (macros are not always imported).
static inline int csystemd_listen_fds_start(void) { return SD_LISTEN_FDS_START; }

/// An anonymous memory file that can be sealed.
static inline int csystemd_memfd_create(const char *name) {
    return memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
}

/// Seals a memory file against any further change.
static inline int csystemd_seal(int fd) {
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
}

/// Whether a memory file is sealed against writes.
static inline int csystemd_is_write_sealed(int fd) {
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & F_SEAL_WRITE) != 0;
}

#endif
