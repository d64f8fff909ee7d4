/*
 * file.c - see file.h.
 */
#include "base/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* fsync of the directory holding path: the rename is durable. */
static void sync_dir(const char *path)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else
		snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
}

int file_replace(const char *path, const void *data, size_t n)
{
	char tmp[4200];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
		return -ENAMETOOLONG;
	int rc = 0;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	rc = write_all(fd, data, n);
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc) {
		unlink(tmp);
		return rc;
	}
	sync_dir(path);
	return 0;
}

int file_dir_each(const char *dir, const char *suffix, void (*fn)(void *arg, const char *name),
                  void *arg, char *err, size_t errlen)
{
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		snprintf(err, errlen, "%s: mkdir() failed: %s", dir, strerror(errno));
		return -1;
	}
	DIR *d = opendir(dir);
	if (!d) {
		snprintf(err, errlen, "%s: cannot read: %s", dir, strerror(errno));
		return -1;
	}
	size_t sl = strlen(suffix), tl = sizeof ".tmp" - 1;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > sl && strcmp(e->d_name + l - sl, suffix) == 0)
			fn(arg, e->d_name);
		else if (l > sl + tl && strcmp(e->d_name + l - tl, ".tmp") == 0 &&
		         strncmp(e->d_name + l - tl - sl, suffix, sl) == 0)
			unlinkat(dirfd(d), e->d_name, 0); /* a file_replace killed mid-save */
	}
	closedir(d);
	return 0;
}

int file_pread_flags(int fd, void *buf, size_t n, uint64_t off, int flags)
{
	char *p = buf;
	while (n > 0) {
		struct iovec iov = { p, n };
		ssize_t r = preadv2(fd, &iov, 1, (off_t)off, flags);
		if (r < 0 && errno == EINTR)
			continue;
		/* EOPNOTSUPP: a file system without RWF_NOWAIT; the I/O thread reads it */
		if (r < 0 && (flags & RWF_NOWAIT) && (errno == EAGAIN || errno == EOPNOTSUPP))
			return -EAGAIN;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ENODATA;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

int file_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	return file_pread_flags(fd, buf, n, off, 0);
}

int file_pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	while (cnt > 0) {
		ssize_t r = pwritev(fd, iov, cnt, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		size_t left = (size_t)r;
		while (cnt > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}
