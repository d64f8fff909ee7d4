/*
 * file.h - small files replaced whole, so that a crash leaves either the
 * old content or the new one, never a mix (saved profiles, pins); and
 * positioned reads and writes that resume after short counts and EINTR
 * (the NVMe tier's segments, the chunk arena).
 */
#ifndef LARDER_FILE_H
#define LARDER_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Writes n bytes of data to path atomically: to path.tmp, fsync, rename
 * over path, fsync of its directory. Returns 0 or a negative errno (the
 * temporary file is removed; path is unchanged). */
int file_replace(const char *path, const void *data, size_t n);

/* Makes directory dir unless it exists, then calls fn(arg, name) for each
 * file in it whose name ends with suffix (within this call), and removes
 * each NAME<suffix>.tmp: what a file_replace killed mid-save left, which
 * nothing else would (call it before anything writes into dir). Returns 0,
 * or -1 with err set when dir cannot be made or read. */
int file_dir_each(const char *dir, const char *suffix, void (*fn)(void *arg, const char *name),
                  void *arg, char *err, size_t errlen);

/* Reads n bytes at off. Returns 0, -errno, or -ENODATA at end of file. */
int file_pread_all(int fd, void *buf, size_t n, uint64_t off);
/* The same with preadv2's flags; with RWF_NOWAIT (the page cache only),
 * -EAGAIN when a byte would have to come from the device. */
int file_pread_flags(int fd, void *buf, size_t n, uint64_t off, int flags);

/* Writes the iovecs at off, resuming after short writes; modifies iov. */
int file_pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off);

#endif
