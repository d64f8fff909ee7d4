/*
 * logstall.c - an LD_PRELOAD library for tests: holds up the thread that
 * logs a given line, right after the line is written, so that a test can
 * act at a known point inside a call (between two steps that are otherwise
 * microseconds apart). larder logs each line with one fputs to stderr: the
 * first line containing $LOGSTALL_MATCH is written, then its thread sleeps
 * $LOGSTALL_MS milliseconds before fputs returns. Later lines pass at once.
 * With $LOGSTALL_RELEASE (a path) the hold ends early once that file exists:
 * a test that cannot know how long its own steps take ends the hold itself.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*fputs_fn)(const char *, FILE *);

static atomic_bool stalled;

int fputs(const char *s, FILE *f)
{
	static fputs_fn real;
	if (!real)
		real = (fputs_fn)dlsym(RTLD_NEXT, "fputs");
	int rc = real(s, f);
	const char *match = getenv("LOGSTALL_MATCH");
	if (f == stderr && match && *match && strstr(s, match) &&
	    !atomic_exchange(&stalled, true)) {
		const char *ms_text = getenv("LOGSTALL_MS");
		const char *release = getenv("LOGSTALL_RELEASE");
		long ms = ms_text ? strtol(ms_text, NULL, 10) : 0;
		/* In steps of 10 ms, so that the release file is seen. */
		for (long left = ms; left > 0; left -= 10) {
			if (release && *release && access(release, F_OK) == 0)
				break;
			long step = left < 10 ? left : 10;
			struct timespec ts = { 0, step * 1000000L };
			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
	}
	return rc;
}
