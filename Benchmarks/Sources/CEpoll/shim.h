#ifndef CEPOLL_SHIM_H
#define CEPOLL_SHIM_H

// epoll for load-gen: the Swift Glibc module does not carry <sys/epoll.h>.
#include <sys/epoll.h>

#endif
