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
	size_t sl = strlen(suffix);
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > sl && strcmp(e->d_name + l - sl, suffix) == 0)
			fn(arg, e->d_name);
	}
	closedir(d);
	return 0;
}
