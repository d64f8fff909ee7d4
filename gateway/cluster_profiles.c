/*
 * cluster_profiles.c - access profiles across a cluster (see
 * cluster_profiles.h): the messages, built and parsed.
 */
#include "gateway/cluster_profiles.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "cluster/cluster.h"
#include "gateway/profiles.h"

#define MSG_MAX 2048   /* an S3 key is at most 1024 bytes */

/* Unix seconds minus monotonic seconds, now. */
static double wall_offset(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - clock_mono_s();
}

static const char *self(const struct gw *gw)
{
	return gw->cfg->node_id ? gw->cfg->node_id : "";
}

static void publish(struct gw *gw, const char *msg, int n)
{
	if (n < 0 || n >= MSG_MAX) {
		log_warn("profiles", "a profile message of %d bytes not sent to the cluster", n);
		return;
	}
	cluster_publish_invalidate(gw->cluster, CLUSTER_PROFILE, msg);
}

void cluster_profiles_started(struct gw *gw, const char *name, const char *key_id,
                              const char *tag)
{
	if (!gw->cluster)
		return;
	char msg[MSG_MAX];
	int n = snprintf(msg, sizeof msg, "start\n%s\n%s\n%s\n%s", self(gw), name,
	                 key_id ? "key" : "tag", key_id ? key_id : tag);
	publish(gw, msg, n);
}

void cluster_profiles_stopped(struct gw *gw, const char *name)
{
	if (!gw->cluster)
		return;
	char msg[MSG_MAX];
	int n = snprintf(msg, sizeof msg, "stop\n%s\n%s", self(gw), name);
	publish(gw, msg, n);
}

void cluster_profiles_relay(void *arg, const char *origin, const char *name, const char *bucket,
                            const char *key, double started)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	char msg[MSG_MAX];
	int n = snprintf(msg, sizeof msg, "read\n%s\n%s\n%.6f\n%s\n%s", origin, name,
	                 started + wall_offset(), bucket, key);
	publish(gw, msg, n);
}

/* Splits s at its first n - 1 newlines into f[0..n-1] (the last field
 * keeps any further newlines); false when there are fewer. */
static bool split(char *s, char **f, int n)
{
	for (int i = 0; i < n - 1; i++) {
		f[i] = s;
		char *nl = strchr(s, '\n');
		if (!nl)
			return false;
		*nl = '\0';
		s = nl + 1;
	}
	f[n - 1] = s;
	return true;
}

void cluster_profiles_message(struct gw *gw, const char *msg)
{
	char buf[MSG_MAX], *f[6];
	if (snprintf(buf, sizeof buf, "%s", msg) >= (int)sizeof buf)
		return;
	bool ok = false;
	if (strncmp(buf, "start\n", 6) == 0 && split(buf, f, 5)) {
		bool key = strcmp(f[3], "key") == 0;
		ok = key || strcmp(f[3], "tag") == 0;
		int rc = ok ? profiles_relay_start(gw->profiles, f[1], f[2], key ? f[4] : NULL,
		                                   key ? NULL : f[4]) : 0;
		if (rc)
			log_warn("profiles", "profile %s of node %s not recorded here: %s", f[2], f[1],
			         strerror(-rc));
	} else if (strncmp(buf, "stop\n", 5) == 0 && split(buf, f, 3)) {
		ok = true;
		profiles_relay_stop(gw->profiles, f[1], f[2]);
	} else if (strncmp(buf, "read\n", 5) == 0 && split(buf, f, 6)) {
		char *end;
		double t = strtod(f[3], &end);
		ok = end != f[3] && !*end;
		if (ok && strcmp(f[1], self(gw)) == 0)
			profiles_note_in(gw->profiles, f[2], f[4], f[5], t - wall_offset());
	}
	if (!ok)
		log_debug("profiles", "malformed profile message from the cluster ignored");
}
