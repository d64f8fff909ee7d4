/*
 * syncstall.c - an LD_PRELOAD library for tests: a stalled disk. Each
 * fsync or fdatasync of a file whose path starts with $SYNCSTALL_DIR first
 * sleeps for the milliseconds written (as decimal text) in the file named
 * by $SYNCSTALL_FILE; none while that file is missing, empty or says 0.
 * The file is read at each call, so a test stalls a running process's disk
 * and ends the stall by rewriting it. Other files sync at once.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*sync_fn)(int);

/* The stall now asked for, in ms; 0 when fd is not under $SYNCSTALL_DIR. */
static long stall_ms(int fd)
{
	const char *dir = getenv("SYNCSTALL_DIR"), *path = getenv("SYNCSTALL_FILE");
	if (!dir || !path)
		return 0;
	char link[64], target[PATH_MAX];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof target - 1);
	if (n < 0)
		return 0;
	target[n] = '\0';
	if (strncmp(target, dir, strlen(dir)) != 0)
		return 0;
	int cfd = open(path, O_RDONLY | O_CLOEXEC);
	if (cfd < 0)
		return 0;
	char text[32];
	ssize_t got = read(cfd, text, sizeof text - 1);
	close(cfd);
	if (got <= 0)
		return 0;
	text[got] = '\0';
	return strtol(text, NULL, 10);
}

/* The real call name (fsync or fdatasync) on fd, after the stall asked for. */
static int stalled(const char *name, int fd)
{
	sync_fn real = (sync_fn)dlsym(RTLD_NEXT, name);
	long ms = stall_ms(fd);
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (ms > 0 && nanosleep(&ts, &ts) != 0)
		;
	return real(fd);
}

int fsync(int fd)
{
	return stalled("fsync", fd);
}

int fdatasync(int fd)
{
	return stalled("fdatasync", fd);
}
