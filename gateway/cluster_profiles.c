/*
 * cluster_profiles.c - access profiles across a cluster (see
 * cluster_profiles.h): the messages, built and parsed.
 */
#include "gateway/cluster_profiles.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "cluster/cluster.h"
#include "gateway/profiles.h"

#define MSG_MAX CLUSTER_PROFILE_MSG_MAX

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

int cluster_profiles_format(char *buf, size_t cap, const struct profile_msg *m)
{
	switch (m->kind) {
	case PROFILE_MSG_START:
		return snprintf(buf, cap, "start\n%s\n%s\n%s\n%s", m->origin, m->name,
		                m->key_id ? "key" : "tag", m->key_id ? m->key_id : m->tag);
	case PROFILE_MSG_STOP:
		return snprintf(buf, cap, "stop\n%s\n%s", m->origin, m->name);
	case PROFILE_MSG_READ:
		return snprintf(buf, cap, "read\n%s\n%s\n%.6f\n%s\n%s", m->origin, m->name,
		                m->unix_s, m->bucket, m->key);
	}
	return -1;
}

void cluster_profiles_started(struct gw *gw, const char *name, const char *key_id,
                              const char *tag)
{
	if (!gw->cluster)
		return;
	char msg[MSG_MAX];
	struct profile_msg m = { .kind = PROFILE_MSG_START,
		                 .origin = self(gw),
		                 .name = name,
		                 .key_id = key_id,
		                 .tag = tag };
	publish(gw, msg, cluster_profiles_format(msg, sizeof msg, &m));
}

void cluster_profiles_stopped(struct gw *gw, const char *name)
{
	if (!gw->cluster)
		return;
	char msg[MSG_MAX];
	struct profile_msg m = { .kind = PROFILE_MSG_STOP, .origin = self(gw), .name = name };
	publish(gw, msg, cluster_profiles_format(msg, sizeof msg, &m));
}

void cluster_profiles_relay(void *arg, const char *origin, const char *name, const char *bucket,
                            const char *key, double started)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	char msg[MSG_MAX];
	struct profile_msg m = { .kind = PROFILE_MSG_READ,
		                 .origin = origin,
		                 .name = name,
		                 .unix_s = started + wall_offset(),
		                 .bucket = bucket,
		                 .key = key };
	publish(gw, msg, cluster_profiles_format(msg, sizeof msg, &m));
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

bool cluster_profiles_parse(char *buf, struct profile_msg *m)
{
	char *f[6];
	memset(m, 0, sizeof *m);
	if (strncmp(buf, "start\n", 6) == 0 && split(buf, f, 5)) {
		bool key = strcmp(f[3], "key") == 0;
		if (!key && strcmp(f[3], "tag") != 0)
			return false;
		m->kind = PROFILE_MSG_START;
		m->key_id = key ? f[4] : NULL;
		m->tag = key ? NULL : f[4];
	} else if (strncmp(buf, "stop\n", 5) == 0 && split(buf, f, 3)) {
		m->kind = PROFILE_MSG_STOP;
	} else if (strncmp(buf, "read\n", 5) == 0 && split(buf, f, 6)) {
		char *end;
		m->kind = PROFILE_MSG_READ;
		m->unix_s = strtod(f[3], &end);
		/* As a node writes it, finite: a NaN would leave the profile's
		 * reads in no order (by_start in profiles.c). */
		if (end == f[3] || *end || !isfinite(m->unix_s))
			return false;
		m->bucket = f[4];
		m->key = f[5];
	} else {
		return false;
	}
	m->origin = f[1];
	m->name = f[2];
	return true;
}

void cluster_profiles_message(struct gw *gw, const char *msg)
{
	char buf[MSG_MAX];
	struct profile_msg m;
	if (snprintf(buf, sizeof buf, "%s", msg) >= (int)sizeof buf)
		return;
	if (!cluster_profiles_parse(buf, &m)) {
		log_debug("profiles", "malformed profile message from the cluster ignored");
		return;
	}
	if (m.kind == PROFILE_MSG_START) {
		int rc = profiles_relay_start(gw->profiles, m.origin, m.name, m.key_id, m.tag);
		if (rc)
			log_warn("profiles", "profile %s of node %s not recorded here: %s", m.name,
			         m.origin, strerror(-rc));
	} else if (m.kind == PROFILE_MSG_STOP) {
		profiles_relay_stop(gw->profiles, m.origin, m.name);
	} else if (strcmp(m.origin, self(gw)) == 0 &&
	           !profiles_note_in(gw->profiles, m.name, m.bucket, m.key,
	                             m.unix_s - wall_offset())) {
		/* A relay of a profile not recording here: this node stopped (or
		 * crashed) while it recorded, and the others never heard of its end.
		 * Tell them now, or they relay its reads for as long as they run. */
		log_info("profiles", "profile %s is not recording: its relays are told to stop",
		         m.name);
		cluster_profiles_stopped(gw, m.name);
	}
}
