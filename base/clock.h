/*
 * clock.h - monotonic time, for timeouts, rates and ages (never for dates).
 */
#ifndef LARDER_CLOCK_H
#define LARDER_CLOCK_H

#include <time.h>

static inline double clock_mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline double clock_mono_ms(void)
{
	return clock_mono_s() * 1e3;
}

#endif
