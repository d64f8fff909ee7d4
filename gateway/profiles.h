/*
 * profiles.h - access profiles: what a job read, in first-read order, to
 * warm it again next time (larder warm --profile NAME).
 *
 * Recording is switched on per profile (POST /admin/profiles) for either
 * a client key id (every read signed with that key) or a job tag (every
 * read carrying the header x-larder-job: TAG). While it records, each
 * successful GET of an object that matches appends (bucket, key) the
 * first time it is read (ordered by when each read began); later reads
 * of it change nothing. A profile
 * holds at most PROFILE_MAX_READS reads (more are counted, not kept).
 *
 * Durability: with a cache directory, a profile is written to
 * DIR/profiles/NAME.json when it stops (and, still recording, at
 * shutdown), atomically (a temporary file, fsync, rename); profiles found
 * there are loaded at start. Without one they live in memory only.
 *
 * Every function is thread-safe. Reads are noted under one lock; a stop
 * sorts and saves, and a replay (profiles_get) copies, a profile's reads
 * without it, so neither holds up the workers' reads however large it is.
 * While a profile is being saved, a replay of it or a new recording of its
 * name waits for the save to end.
 */
#ifndef LARDER_PROFILES_H
#define LARDER_PROFILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROFILE_MAX_READS 1000000
#define PROFILE_NAME_MAX 64
#define PROFILES_MAX 1024           /* profiles kept (in memory and on disk) */

struct profiles;

struct profile_info {
	char name[PROFILE_NAME_MAX + 1];
	bool recording;
	char key_id[129];            /* what it records: a client key id, or */
	char tag[129];               /* an x-larder-job tag ("" for the other) */
	uint64_t reads, dropped;     /* kept; not kept (past PROFILE_MAX_READS) */
};

/* Loads the profiles under dir/profiles (dir NULL: memory only). NULL
 * with err set when dir/profiles cannot be made or read. */
struct profiles *profiles_open(const char *dir, char *err, size_t errlen);
/* Saves the profiles still recording, then frees everything. */
void profiles_close(struct profiles *p);

/* Starts recording profile name for key_id or tag (exactly one). An
 * existing stopped profile of that name is replaced. Returns 0, -EINVAL
 * (a bad name), -EEXIST (it is recording), -ENOSPC (PROFILES_MAX kept
 * already), or -ENOMEM. */
int profiles_start(struct profiles *p, const char *name, const char *key_id, const char *tag);
/* Stops recording and saves it. 0, -ENOENT (none), -EALREADY (not
 * recording), or a negative errno from writing it. */
int profiles_stop(struct profiles *p, const char *name);
/* Whether any profile or relay records (one atomic read): callers skip
 * gathering a read's details when none does. */
bool profiles_recording(struct profiles *p);
/* A GET of bucket/key that began at `started` (clock_mono_s) was answered
 * 200 or 206 for client key_id (NULL: unsigned) with the header x-larder-job tag
 * (NULL: none). Reads are ordered by when they began. */
void profiles_note(struct profiles *p, const char *key_id, const char *tag, const char *bucket,
                   const char *key, double started);
/* In a cluster a profile records the reads served by every node: the node
 * it was started on tells the others (gateway/cluster_profiles.c), which
 * keep a relay of it (origin node, name, key id or tag). Each first read
 * a relay sees is handed to the relay hook, which sends it to the origin,
 * where profiles_note_in adds it to the profile. */
typedef void (*profile_relay_fn)(void *arg, const char *origin, const char *name,
                                 const char *bucket, const char *key, double started);
/* fn is called under the registry's lock (it must not call back here). */
void profiles_on_relay(struct profiles *p, profile_relay_fn fn, void *arg);
/* Starts (or restarts) relaying origin's profile name; 0, -EINVAL, -ENOSPC
 * (PROFILES_MAX relays already) or -ENOMEM. */
int profiles_relay_start(struct profiles *p, const char *origin, const char *name,
                         const char *key_id, const char *tag);
void profiles_relay_stop(struct profiles *p, const char *origin, const char *name);
/* Adds a first read of bucket/key that began at started (clock_mono_s) to
 * profile name if it is recording (a read another node relayed). false
 * when it is not: the relay that sent it is stale. */
bool profiles_note_in(struct profiles *p, const char *name, const char *bucket, const char *key,
                      double started);
/* Up to max profiles, by name; returns how many. */
size_t profiles_list(struct profiles *p, struct profile_info *out, size_t max);
/* Copies of profile name's reads, in order: (*buckets)[i], (*keys)[i]
 * for i < *n (free with profile_reads_free). 0, -ENOENT or -ENOMEM. */
int profiles_get(struct profiles *p, const char *name, char ***buckets, char ***keys, size_t *n);
void profile_reads_free(char **buckets, char **keys, size_t n);

/* Whether name is a valid profile name: 1-64 of [A-Za-z0-9._-], not
 * starting with '.'. */
bool profile_name_ok(const char *name);

#endif
