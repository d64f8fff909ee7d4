/*
 * profiles.c - access profiles (see profiles.h): a list under one lock;
 * each profile keeps its reads in an array and, while recording, a hash
 * set of them (open addressing on FNV-1a of bucket and key) so that only
 * first reads are kept.
 */
#include "gateway/profiles.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/fnv.h"
#include "base/log.h"
#include "gateway/s3req.h"

struct read {
	char *bucket, *key;
	uint64_t hash;
	double t;                    /* when the read began: reads are noted as they end */
	size_t seq;                  /* noted order, for equal t */
};

struct profile {
	struct profile *next;
	char name[PROFILE_NAME_MAX + 1];
	char *key_id, *tag;          /* what it records (one is NULL) */
	bool recording;
	struct read *reads;
	size_t n, cap;
	uint64_t dropped;
	size_t *set;                 /* recording: indices + 1 into reads, 0 empty */
	size_t set_cap;              /* a power of two, or 0 */
	char *origin;                /* a relay: the node whose profile this is */
	/* Stopped, a profile's reads change no more: a stop sorts and saves
	 * them, and a replay copies them, without the lock (which every
	 * worker's read takes while any profile records). */
	unsigned users;              /* callers using reads outside the lock */
	bool saving;                 /* being sorted and saved by its stop */
	bool gone;                   /* replaced while used: its last user frees it */
};

struct profiles {
	pthread_mutex_t lock;
	pthread_cond_t saved;        /* a profile's save ended */
	char *dir;                   /* DIR/profiles, or NULL */
	struct profile *list;
	atomic_uint recording;       /* profiles and relays recording: 0 skips the lock */
	struct profile *relays;      /* other nodes' profiles recording here */
	profile_relay_fn relay;
	void *relay_arg;
};

bool profile_name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > PROFILE_NAME_MAX || name[0] == '.')
		return false;
	return strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static uint64_t read_hash(const char *bucket, const char *key)
{
	uint64_t h = fnv1a64_add(FNV1A64_OFFSET, bucket, strlen(bucket) + 1);
	return fnv1a64_add(h, key, strlen(key));
}

static void profile_free(struct profile *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n; i++) {
		free(x->reads[i].bucket);
		free(x->reads[i].key);
	}
	free(x->reads);
	free(x->set);
	free(x->key_id);
	free(x->tag);
	free(x->origin);
	free(x);
}

/* Lock held. */
static struct profile *find(struct profiles *p, const char *name, struct profile ***link)
{
	struct profile **pp = &p->list;
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->name, name) == 0)
			break;
	if (link)
		*link = pp;
	return *pp;
}

/* Lock held. Waits while profile name is being saved (a replay reads it
 * sorted, a new recording of it saves to the same file); then returns it,
 * or NULL, as find does. */
static struct profile *find_saved(struct profiles *p, const char *name, struct profile ***link)
{
	struct profile *x;
	while ((x = find(p, name, link)) && x->saving)
		pthread_cond_wait(&p->saved, &p->lock);
	return x;
}

/* Lock held. x has one user fewer; true when it was replaced meanwhile
 * and is the caller's to free (once the lock is released). */
static bool put(struct profile *x)
{
	return --x->users == 0 && x->gone;
}

/* ---- the set of reads --------------------------------------------------------- */

/* The slot of (bucket, key) in x->set: its entry, or the empty one. */
static size_t *set_slot(struct profile *x, uint64_t h, const char *bucket, const char *key)
{
	size_t mask = x->set_cap - 1;
	for (size_t i = h & mask;; i = (i + 1) & mask) {
		size_t *s = &x->set[i];
		if (!*s)
			return s;
		const struct read *r = &x->reads[*s - 1];
		if (r->hash == h && strcmp(r->bucket, bucket) == 0 && strcmp(r->key, key) == 0)
			return s;
	}
}

static void set_fill(struct profile *x)
{
	memset(x->set, 0, x->set_cap * sizeof *x->set);
	for (size_t i = 0; i < x->n; i++)
		*set_slot(x, x->reads[i].hash, x->reads[i].bucket, x->reads[i].key) = i + 1;
}

/* Keeps the set at most half full. */
static int set_grow(struct profile *x)
{
	if (2 * (x->n + 1) <= x->set_cap)
		return 0;
	size_t cap = x->set_cap ? 2 * x->set_cap : 1024;
	size_t *set = calloc(cap, sizeof *set);
	if (!set)
		return -ENOMEM;
	free(x->set);
	x->set = set;
	x->set_cap = cap;
	set_fill(x);
	return 0;
}

static int by_start(const void *a, const void *b)
{
	const struct read *x = a, *y = b;
	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Puts the reads in the order they began (requests on different workers
 * may end in another order), keeping the set in step. */
static void settle(struct profile *x)
{
	if (x->n > 1)
		qsort(x->reads, x->n, sizeof *x->reads, by_start);
	for (size_t i = 0; i < x->n; i++)
		x->reads[i].seq = i;
	if (x->set)
		set_fill(x);
}

/* Appends a read (no check for duplicates). */
static int add_read(struct profile *x, const char *bucket, const char *key, uint64_t h, double t)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 256;
		struct read *r = realloc(x->reads, cap * sizeof *r);
		if (!r)
			return -ENOMEM;
		x->reads = r;
		x->cap = cap;
	}
	struct read *r = &x->reads[x->n];
	r->bucket = strdup(bucket);
	r->key = strdup(key);
	r->hash = h;
	r->t = t;
	r->seq = x->n;
	if (!r->bucket || !r->key) {
		free(r->bucket);
		free(r->key);
		return -ENOMEM;
	}
	x->n++;
	return 0;
}

/* ---- files ------------------------------------------------------------------ */

/* Writes dir/NAME.json atomically: NAME.json.tmp, fsync,
 * rename, fsync of the directory. */
static int save(struct profiles *p, const struct profile *x)
{
	if (!p->dir)
		return 0;
	json_t *reads = json_array();
	for (size_t i = 0; reads && i < x->n; i++)
		if (json_array_append_new(reads, json_pack("[s,s]", x->reads[i].bucket,
		                                           x->reads[i].key)) != 0) {
			json_decref(reads);
			reads = NULL;
		}
	json_t *doc = reads ? json_pack("{s:i,s:s,s:s?,s:s?,s:I,s:o}", "version", 1, "name", x->name,
	                                "key_id", x->key_id, "tag", x->tag, "dropped",
	                                (json_int_t)x->dropped, "reads", reads) : NULL;
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text)
		return -ENOMEM;
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.json", p->dir, x->name);
	int rc = file_replace(path, text, strlen(text));
	free(text);
	if (rc)
		log_error("profiles", "saving profile %s to %s failed: %s", x->name, path, strerror(-rc));
	return rc;
}

/* Loads one saved profile; a file that is not one is skipped, logged. */
static size_t count_of(const struct profile *list)
{
	size_t n = 0;
	for (; list; list = list->next)
		n++;
	return n;
}

static void load(void *arg, const char *file)
{
	struct profiles *p = arg;
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", p->dir, file);
	json_error_t jerr;
	json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	const char *name = json_string_value(json_object_get(doc, "name"));
	const char *key_id = json_string_value(json_object_get(doc, "key_id"));
	const char *tag = json_string_value(json_object_get(doc, "tag"));
	json_t *reads = json_object_get(doc, "reads");
	struct profile *x = NULL;
	if (!name || !profile_name_ok(name) || !json_is_array(reads) || !key_id == !tag)
		goto bad;
	if (!(x = calloc(1, sizeof *x)))
		goto bad;
	snprintf(x->name, sizeof x->name, "%s", name);
	x->key_id = key_id ? strdup(key_id) : NULL;
	x->tag = tag ? strdup(tag) : NULL;
	x->dropped = (uint64_t)json_integer_value(json_object_get(doc, "dropped"));
	size_t i;
	json_t *r;
	json_array_foreach(reads, i, r) {
		const char *b = json_string_value(json_array_get(r, 0));
		const char *k = json_string_value(json_array_get(r, 1));
		/* Only what a read could have named: a replay signs requests for it. */
		if (!b || !k || !s3_bucket_name_ok(b, strlen(b)) || !*k ||
		    add_read(x, b, k, read_hash(b, k), (double)i) != 0)
			goto bad;
	}
	json_decref(doc);
	pthread_mutex_lock(&p->lock);
	struct profile **link;
	bool full = count_of(p->list) >= PROFILES_MAX;
	if (full || find(p, x->name, &link)) {
		pthread_mutex_unlock(&p->lock);
		if (full)
			log_warn("profiles", "%s: skipped: %d profiles kept already (remove some)", path,
			         PROFILES_MAX);
		profile_free(x);
		return;
	}
	*link = x;
	pthread_mutex_unlock(&p->lock);
	return;
bad:
	log_warn("profiles", "%s: not a profile, skipped%s%s", path, doc ? "" : ": ",
	         doc ? "" : jerr.text);
	json_decref(doc);
	profile_free(x);
}

struct profiles *profiles_open(const char *dir, char *err, size_t errlen)
{
	struct profiles *p = calloc(1, sizeof *p);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->saved, NULL);
	if (!dir || !dir[0])
		return p;
	size_t n = strlen(dir) + sizeof "/profiles";
	if (!(p->dir = malloc(n))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	snprintf(p->dir, n, "%s/profiles", dir);
	if (file_dir_each(p->dir, ".json", load, p, err, errlen) != 0)
		goto fail;
	return p;
fail:
	free(p->dir);
	pthread_cond_destroy(&p->saved);
	pthread_mutex_destroy(&p->lock);
	free(p);
	return NULL;
}

void profiles_close(struct profiles *p)
{
	if (!p)
		return;
	for (struct profile *x = p->list, *next; x; x = next) {
		next = x->next;
		if (x->recording) {
			settle(x);
			save(p, x);
		}
		profile_free(x);
	}
	for (struct profile *x = p->relays, *next; x; x = next) {
		next = x->next;
		profile_free(x);
	}
	free(p->dir);
	pthread_cond_destroy(&p->saved);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int profiles_start(struct profiles *p, const char *name, const char *key_id, const char *tag)
{
	if (!profile_name_ok(name) || !key_id == !tag)
		return -EINVAL;
	struct profile *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	snprintf(x->name, sizeof x->name, "%s", name);
	x->key_id = key_id ? strdup(key_id) : NULL;
	x->tag = tag ? strdup(tag) : NULL;
	x->recording = true;
	if (!x->key_id && !x->tag) {
		profile_free(x);
		return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	struct profile **link;
	struct profile *old = find_saved(p, name, &link);
	if ((old && old->recording) || (!old && count_of(p->list) >= PROFILES_MAX)) {
		pthread_mutex_unlock(&p->lock);
		profile_free(x);
		return old ? -EEXIST : -ENOSPC;
	}
	if (old) {
		*link = old->next;
		old->gone = true;
		if (old->users)
			old = NULL; /* a replay copying it frees it */
		find(p, name, &link);
	}
	*link = x;
	atomic_fetch_add(&p->recording, 1);
	pthread_mutex_unlock(&p->lock);
	profile_free(old);
	return 0;
}

int profiles_stop(struct profiles *p, const char *name)
{
	pthread_mutex_lock(&p->lock);
	struct profile *x = find(p, name, NULL);
	int rc = !x ? -ENOENT : !x->recording ? -EALREADY : 0;
	size_t *set = NULL;
	if (!rc) {
		x->recording = false; /* its reads change no more */
		atomic_fetch_sub(&p->recording, 1);
		set = x->set;
		x->set = NULL;
		x->set_cap = 0;
		x->saving = true;
		x->users++;
	}
	pthread_mutex_unlock(&p->lock);
	free(set);
	if (rc)
		return rc;
	/* Sorted and written without the lock: until saving ends a replay
	 * of it or a new recording of that name waits, and nothing else
	 * touches a stopped profile's reads. */
	settle(x);
	rc = save(p, x);
	pthread_mutex_lock(&p->lock);
	x->saving = false;
	pthread_cond_broadcast(&p->saved);
	bool drop = put(x);
	pthread_mutex_unlock(&p->lock);
	if (drop)
		profile_free(x);
	return rc;
}

static bool matches(const struct profile *x, const char *key_id, const char *tag)
{
	if (x->key_id)
		return key_id && strcmp(x->key_id, key_id) == 0;
	return tag && strcmp(x->tag, tag) == 0;
}

/* Lock held. Notes a read in recording profile x; true when it is a first
 * read, kept. */
static bool note_one(struct profile *x, const char *bucket, const char *key, uint64_t h,
                     double started)
{
	if (x->n >= PROFILE_MAX_READS || set_grow(x) != 0) {
		x->dropped++;
		return false;
	}
	size_t *slot = set_slot(x, h, bucket, key);
	if (*slot) {
		struct read *r = &x->reads[*slot - 1];
		if (started < r->t)
			r->t = started; /* a read that began earlier ended later */
		return false;
	}
	if (add_read(x, bucket, key, h, started) != 0) {
		x->dropped++;
		return false;
	}
	*slot = x->n;
	return true;
}

bool profiles_recording(struct profiles *p)
{
	return p && atomic_load(&p->recording) != 0;
}

void profiles_note(struct profiles *p, const char *key_id, const char *tag, const char *bucket,
                   const char *key, double started)
{
	if (!profiles_recording(p) || (!key_id && !tag))
		return;
	uint64_t h = read_hash(bucket, key);
	pthread_mutex_lock(&p->lock);
	for (struct profile *x = p->list; x; x = x->next)
		if (x->recording && matches(x, key_id, tag))
			note_one(x, bucket, key, h, started);
	for (struct profile *x = p->relays; x; x = x->next)
		if (matches(x, key_id, tag) && note_one(x, bucket, key, h, started) && p->relay)
			p->relay(p->relay_arg, x->origin, x->name, bucket, key, started);
	pthread_mutex_unlock(&p->lock);
}

bool profiles_note_in(struct profiles *p, const char *name, const char *bucket, const char *key,
                      double started)
{
	uint64_t h = read_hash(bucket, key);
	pthread_mutex_lock(&p->lock);
	struct profile *x = find(p, name, NULL);
	bool recording = x && x->recording;
	if (recording)
		note_one(x, bucket, key, h, started);
	pthread_mutex_unlock(&p->lock);
	return recording;
}

void profiles_on_relay(struct profiles *p, profile_relay_fn fn, void *arg)
{
	pthread_mutex_lock(&p->lock);
	p->relay = fn;
	p->relay_arg = arg;
	pthread_mutex_unlock(&p->lock);
}

/* Lock held. The relay of origin's profile name, or NULL; *link its link. */
static struct profile *find_relay(struct profiles *p, const char *origin, const char *name,
                                  struct profile ***link)
{
	struct profile **pp = &p->relays;
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->origin, origin) == 0 && strcmp((*pp)->name, name) == 0)
			break;
	*link = pp;
	return *pp;
}

void profiles_relay_stop(struct profiles *p, const char *origin, const char *name)
{
	pthread_mutex_lock(&p->lock);
	struct profile **link;
	struct profile *x = find_relay(p, origin, name, &link);
	if (x) {
		*link = x->next;
		profile_free(x);
		atomic_fetch_sub(&p->recording, 1);
	}
	pthread_mutex_unlock(&p->lock);
}

int profiles_relay_start(struct profiles *p, const char *origin, const char *name,
                         const char *key_id, const char *tag)
{
	if (!profile_name_ok(name) || !key_id == !tag)
		return -EINVAL;
	profiles_relay_stop(p, origin, name);
	struct profile *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	snprintf(x->name, sizeof x->name, "%s", name);
	x->origin = strdup(origin);
	x->key_id = key_id ? strdup(key_id) : NULL;
	x->tag = tag ? strdup(tag) : NULL;
	x->recording = true;
	if (!x->origin || (!x->key_id && !x->tag)) {
		profile_free(x);
		return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	if (count_of(p->relays) >= PROFILES_MAX) {
		pthread_mutex_unlock(&p->lock);
		profile_free(x);
		return -ENOSPC;
	}
	x->next = p->relays;
	p->relays = x;
	atomic_fetch_add(&p->recording, 1);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

size_t profiles_list(struct profiles *p, struct profile_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (struct profile *x = p->list; x && n < max; x = x->next) {
		struct profile_info *i = &out[n++];
		memset(i, 0, sizeof *i);
		snprintf(i->name, sizeof i->name, "%s", x->name);
		snprintf(i->key_id, sizeof i->key_id, "%s", x->key_id ? x->key_id : "");
		snprintf(i->tag, sizeof i->tag, "%s", x->tag ? x->tag : "");
		i->recording = x->recording;
		i->reads = x->n;
		i->dropped = x->dropped;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

void profile_reads_free(char **buckets, char **keys, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(buckets ? buckets[i] : NULL);
		free(keys ? keys[i] : NULL);
	}
	free(buckets);
	free(keys);
}

int profiles_get(struct profiles *p, const char *name, char ***buckets, char ***keys, size_t *n)
{
	*buckets = *keys = NULL;
	*n = 0;
	pthread_mutex_lock(&p->lock);
	struct profile *x = find_saved(p, name, NULL);
	int rc = x ? 0 : -ENOENT;
	size_t got = 0, n_reads = 0;
	char **b = NULL, **k = NULL;
	struct read *reads = NULL, *copy = NULL;
	if (x) {
		x->users++; /* its strings stay, even if it is replaced */
		n_reads = x->n;
		reads = x->reads; /* stopped: settled, and changed no more */
		if (x->recording) {
			/* Still growing: a copy of the array, in the order noted. */
			copy = malloc((n_reads ? n_reads : 1) * sizeof *copy);
			if (copy && n_reads)
				memcpy(copy, x->reads, n_reads * sizeof *copy);
			reads = copy;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (!x)
		return rc;
	if (copy && n_reads > 1)
		qsort(copy, n_reads, sizeof *copy, by_start);
	b = calloc(n_reads ? n_reads : 1, sizeof *b);
	k = calloc(n_reads ? n_reads : 1, sizeof *k);
	rc = (reads || !n_reads) && b && k ? 0 : -ENOMEM; /* no reads yet: reads may be NULL */
	for (; !rc && got < n_reads; got++) {
		b[got] = strdup(reads[got].bucket);
		k[got] = strdup(reads[got].key);
		if (!b[got] || !k[got])
			rc = -ENOMEM;
	}
	free(copy);
	pthread_mutex_lock(&p->lock);
	bool drop = put(x);
	pthread_mutex_unlock(&p->lock);
	if (drop)
		profile_free(x);
	if (rc) {
		profile_reads_free(b, k, got);
		return rc;
	}
	*buckets = b;
	*keys = k;
	*n = got;
	return 0;
}
