/*
 * threadcap.c - an LD_PRELOAD library for tests: counts the threads the
 * process it is loaded into starts, and refuses one of them, as the system
 * does when a thread limit (RLIMIT_NPROC, memory) is reached. The call
 * numbered $THREADCAP_REFUSE (from 1; unset or 0: none) to pthread_create
 * fails with EAGAIN and starts nothing. When $THREADCAP_COUNT names a file,
 * the number of calls so far is written there, as decimal text, after each.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static atomic_ulong calls;

static void note_count(unsigned long n)
{
	const char *path = getenv("THREADCAP_COUNT");
	int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
	if (fd < 0)
		return;
	char text[32];
	int len = snprintf(text, sizeof text, "%lu\n", n);
	if (write(fd, text, (size_t)len) != len)
		(void)0; /* the test sees a short count and says so */
	close(fd);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                   void *arg)
{
	static create_fn real;
	if (!real)
		real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
	unsigned long n = atomic_fetch_add(&calls, 1) + 1;
	const char *refuse = getenv("THREADCAP_REFUSE");
	int rc = refuse && strtoul(refuse, NULL, 10) == n ? EAGAIN : real(thread, attr, start, arg);
	note_count(n);
	return rc;
}
