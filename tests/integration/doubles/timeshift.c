/*
 * timeshift.c - an LD_PRELOAD library for tests: moves the wall clock of
 * the process it is loaded into, as an NTP step would, while the monotonic
 * clock runs on. The first 8 bytes of the file named by $TIMESHIFT_FILE
 * hold the offset in nanoseconds (little-endian int64); the file is mapped,
 * so a test changes the offset of a running process by rewriting them.
 * Covers clock_gettime(CLOCK_REALTIME[_COARSE]), gettimeofday and time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile const int64_t *offset_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

static void setup(void)
{
	if (real_clock_gettime)
		return;
	const char *path = getenv("TIMESHIFT_FILE");
	int fd = path ? open(path, O_RDONLY) : -1;
	if (fd >= 0) {
		void *p = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
		if (p != MAP_FAILED)
			offset_ns = p;
		close(fd);
	}
	real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT,
	                                                                   "clock_gettime");
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	setup();
	int rc = real_clock_gettime(id, ts);
	if (rc == 0 && offset_ns && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
		ts->tv_sec = (time_t)(ns / 1000000000);
		ts->tv_nsec = (long)(ns % 1000000000);
	}
	return rc;
}

int gettimeofday(struct timeval *tv, void *tz)
{
	(void)tz;
	struct timespec ts;
	int rc = clock_gettime(CLOCK_REALTIME, &ts);
	if (rc == 0 && tv) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = (suseconds_t)(ts.tv_nsec / 1000);
	}
	return rc;
}

time_t time(time_t *t)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
