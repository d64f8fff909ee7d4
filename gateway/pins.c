/*
 * pins.c - the registry of pins (see pins.h): a list under one lock; each
 * pin keeps the ids it pinned so that ending it unpins exactly those.
 * With a cache directory a saver thread writes each changed pin to its
 * file once a second (off the event loops: a save fsyncs) and removes
 * the files of pins that ended.
 */
#include "gateway/pins.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/fnv.h"
#include "base/log.h"
#include "store/meta.h"
#include "store/object.h"
#include "store/pinset.h"
#include "store/store.h"

struct pinned_id {
	struct chunk_id id;
	uint64_t len;
	int tiers;                  /* store_pin's answer */
};

struct pin {
	struct pin *next;
	char id[PIN_ID_MAX];
	char *bucket, *prefix;
	size_t n_keys;
	int64_t until;
	uint64_t bytes, nvme_bytes; /* of its chunks; on NVMe counted as entries */
	/* The room its up-front check took (pins_reserve) until its job ends:
	 * what it has not pinned yet is kept from other pins. */
	uint64_t want_ram, want_nvme;
	struct pinned_id *ids;
	size_t n, cap;
	struct pinset held;         /* the same ids, to pin each once however often it is asked */
	bool dirty;                 /* changed since its file was written */
};

/* A pin that ended: its file is to be removed. */
struct gone {
	struct gone *next;
	char id[PIN_ID_MAX];
};

#define PINS_MAGIC 0x706e7273u /* "pnrs" */
#define SAVE_EVERY_S 1
#define PIN_CHUNK_LEN_MAX (1ull << 32)   /* the most a saved chunk length may be */

struct pins {
	unsigned magic;
	struct store *store;
	pthread_mutex_t lock;
	struct pin *list;       /* newest first */
	void (*ended)(void *arg, const char *id);
	void *ended_arg;
	/* Saving (dir set): the rest is under lock, but io, held by a save. */
	char *dir;              /* DIR/pins, or NULL: memory only */
	struct gone *gone;
	bool frozen;            /* shut down: pins ending now keep their files */
	bool stop, saver_on;
	pthread_cond_t wake;
	pthread_t saver;
	pthread_mutex_t io;
};

void pins_on_end(struct pins *p, void (*fn)(void *arg, const char *id), void *arg)
{
	pthread_mutex_lock(&p->lock);
	p->ended = fn;
	p->ended_arg = arg;
	pthread_mutex_unlock(&p->lock);
}

/* Lock held. Tells the hook that this node's own pin x ended early (a
 * peer's NODE/JOB pin is not ours to announce). */
static void tell_ended(struct pins *p, const struct pin *x)
{
	if (p->ended && !strchr(x->id, '/'))
		p->ended(p->ended_arg, x->id);
}

/* Lock held. Pin x ends: its file goes too, unless larder is shutting
 * down (the pins of warm jobs cancelled by a shutdown are kept). */
static void forget_file(struct pins *p, const struct pin *x)
{
	if (!p->dir || p->frozen)
		return;
	struct gone *g = calloc(1, sizeof *g);
	if (!g) {
		log_error("pins", "pin %s ended, but its file stays (out of memory)", x->id);
		return;
	}
	snprintf(g->id, sizeof g->id, "%s", x->id);
	g->next = p->gone;
	p->gone = g;
}

/* Lock held (the store's calls never call back here). */
static void pin_free(struct pins *p, struct pin *x)
{
	for (size_t i = 0; i < x->n; i++)
		store_unpin(p->store, &x->ids[i].id, x->ids[i].tiers);
	free(x->ids);
	pinset_free(&x->held);
	free(x->bucket);
	free(x->prefix);
	free(x);
}

void pins_destroy(struct pins *p)
{
	if (!p)
		return;
	pins_shutdown(p);
	for (struct pin *x = p->list, *next; x; x = next) {
		next = x->next;
		pin_free(p, x);
	}
	for (struct gone *g = p->gone, *next; g; g = next) {
		next = g->next;
		free(g);
	}
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->io);
	pthread_mutex_destroy(&p->lock);
	free(p->dir);
	p->magic = 0;
	free(p);
}

/* Lock held. */
static struct pin *find(struct pins *p, const char *id, struct pin ***link)
{
	struct pin **pp = &p->list;
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0)
			break;
	if (link)
		*link = pp;
	return *pp;
}

int pins_begin(struct pins *p, const char *id, const char *bucket, const char *prefix,
               int64_t until)
{
	struct pin *x = calloc(1, sizeof *x);
	if (!x)
		return -ENOMEM;
	snprintf(x->id, sizeof x->id, "%s", id);
	x->bucket = strdup(bucket);
	x->prefix = prefix ? strdup(prefix) : NULL;
	x->until = until;
	if (!x->bucket || (prefix && !x->prefix)) {
		pin_free(p, x);
		return -ENOMEM;
	}
	x->dirty = true;
	pthread_mutex_lock(&p->lock);
	x->next = p->list;
	p->list = x;
	pthread_mutex_unlock(&p->lock);
	return 0;
}

bool pins_has(struct pins *p, const char *id)
{
	if (!p)
		return false;
	pthread_mutex_lock(&p->lock);
	bool found = find(p, id, NULL) != NULL;
	pthread_mutex_unlock(&p->lock);
	return found;
}

static uint64_t still_wanted(uint64_t want, uint64_t got)
{
	return want > got ? want - got : 0;
}

static uint64_t room_left(uint64_t limit, uint64_t held, uint64_t spoken_for)
{
	return limit > held && limit - held > spoken_for ? limit - held - spoken_for : 0;
}

/* Lock held. The room each tier's pin cap has for pins other than x
 * (NULL: for all): what is not pinned, less what other pins' up-front
 * checks took and they have not pinned yet. */
static void room_for(struct pins *p, const struct pin *x, uint64_t *ram, uint64_t *nvme)
{
	struct store_stats st;
	store_get_stats(p->store, &st);
	uint64_t want_ram = 0, want_nvme = 0;
	for (const struct pin *y = p->list; y; y = y->next)
		if (y != x) {
			want_ram += still_wanted(y->want_ram, y->bytes);
			want_nvme += still_wanted(y->want_nvme, y->nvme_bytes);
		}
	*ram = room_left(st.pin_limit, st.pin_held, want_ram);
	*nvme = room_left(st.nvme_pin_limit, st.nvme_pin_held, want_nvme);
}

/* Lock held. Pins cid for x unless x holds it already, in the tiers
 * where it fits beside the room other pins have taken. */
static int add_locked(struct pins *p, struct pin *x, const struct chunk_id *cid, size_t len)
{
	if (pinset_has(&x->held, cid))
		return 0;
	uint64_t ram, nvme, entry = store_pin_nvme_bytes(len, len ? len : 1);
	room_for(p, x, &ram, &nvme);
	/* A chunk another pin holds takes no more room where it is pinned. */
	int allowed = (len <= ram ? STORE_PIN_RAM : 0) | (entry <= nvme ? STORE_PIN_NVME : 0) |
	              store_pinned(p->store, cid);
	if (!allowed)
		return -ENOSPC;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 64;
		struct pinned_id *ids = realloc(x->ids, cap * sizeof *ids);
		if (!ids)
			return -ENOMEM;
		x->ids = ids;
		x->cap = cap;
	}
	x->held.limit = UINT64_MAX;
	int rc = pinset_add(&x->held, cid, len);
	int tiers = rc < 0 ? rc : store_pin_in(p->store, cid, len, allowed);
	if (tiers < 0) {
		if (rc == 1)
			pinset_remove(&x->held, cid);
		return tiers;
	}
	x->ids[x->n++] = (struct pinned_id){ *cid, len, tiers };
	x->bytes += len;
	x->nvme_bytes += entry;
	x->dirty = true;
	return 0;
}

int pins_reserve(struct pins *p, const char *id, uint64_t ram_bytes, uint64_t nvme_bytes,
                 uint64_t *spoken_for)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = -ENOENT;
	*spoken_for = 0;
	if (x) {
		uint64_t ram, nvme, held_ram = 0, held_nvme = 0;
		room_for(p, NULL, &ram, &nvme);
		for (const struct pin *y = p->list; y; y = y->next) {
			*spoken_for += still_wanted(y->want_ram, y->bytes);
			/* A pin of this prefix or under it (the same pinned again,
			 * to hold it longer) holds chunks of this one's objects: they
			 * take no more room. The largest such, not their sum, which
			 * may count a chunk twice. */
			if (y != x && y->prefix && x->prefix && strcmp(y->bucket, x->bucket) == 0 &&
			    strncmp(y->prefix, x->prefix, strlen(x->prefix)) == 0) {
				held_ram = y->bytes > held_ram ? y->bytes : held_ram;
				held_nvme = y->nvme_bytes > held_nvme ? y->nvme_bytes : held_nvme;
			}
		}
		rc = still_wanted(ram_bytes, held_ram) <= ram ||
		     still_wanted(nvme_bytes, held_nvme) <= nvme ? 0 : -ENOSPC;
		if (rc == 0) {
			x->want_ram = ram_bytes;
			x->want_nvme = nvme_bytes;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void pins_settle(struct pins *p, const char *id)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	if (x)
		x->want_ram = x->want_nvme = 0;
	pthread_mutex_unlock(&p->lock);
}

int pins_add(struct pins *p, const char *id, const struct chunk_id *cid, size_t len)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = x ? add_locked(p, x, cid, len) : -ENOENT;
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int pins_drop(struct pins *p, const char *id, const struct chunk_id *cid)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = -ENOENT;
	if (x && pinset_remove(&x->held, cid)) {
		/* Pinned as its fetch began: among the last, so looked for from the end. */
		for (size_t i = x->n; i-- > 0;) {
			struct pinned_id d = x->ids[i];
			if (!chunk_id_eq(&d.id, cid))
				continue;
			store_unpin(p->store, &d.id, d.tiers);
			memmove(&x->ids[i], &x->ids[i + 1], (x->n - i - 1) * sizeof *x->ids);
			x->n--;
			x->bytes -= d.len;
			x->nvme_bytes -= store_pin_nvme_bytes(d.len, d.len ? d.len : 1);
			x->dirty = true;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void pins_peer_header(char out[PIN_HEADER_MAX], const char *node, const char *id, int64_t until)
{
	snprintf(out, PIN_HEADER_MAX, "%.120s/%.23s %lld", node, id, (long long)until);
}

bool pins_hold_peer(struct pins *p, const char *bucket, const char *hdr,
                    const struct chunk_id *cid, size_t len)
{
	if (!p || !hdr)
		return false;
	const char *sp = strrchr(hdr, ' ');
	char *end;
	long long until = sp ? strtoll(sp + 1, &end, 10) : 0;
	size_t n = sp ? (size_t)(sp - hdr) : 0;
	char id[PIN_ID_MAX];
	if (!sp || *end || until <= 0 || n == 0 || n >= sizeof id) {
		log_warn("pins", "a peer's %s \"%.64s\" is not \"NODE/JOB UNTIL\": not pinned",
		         PIN_HEADER, hdr);
		return false;
	}
	memcpy(id, hdr, n);
	id[n] = '\0';
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	int rc = 0;
	if (!x && (x = calloc(1, sizeof *x)) && (x->bucket = strdup(bucket))) {
		memcpy(x->id, id, n + 1);
		x->until = until;
		x->dirty = true;
		x->next = p->list;
		p->list = x;
	} else if (!x || !x->bucket) {
		free(x);
		x = NULL;
		rc = -ENOMEM;
	}
	rc = rc ? rc : add_locked(p, x, cid, len);
	pthread_mutex_unlock(&p->lock);
	if (rc)
		log_warn("pins", "pin %s from a peer: a chunk of bucket %s not pinned: %s", id, bucket,
		         strerror(-rc));
	return rc == 0;
}

/* The most an object's encoded metadata may take (as fetch.c allows). */
#define META_BLOB_MAX (128 * 1024)

void pins_keep_on_nvme(struct store *s, const struct obj_ref *ref, uint64_t index, struct chunk *c)
{
	if (atomic_load(&c->state) != CHUNK_READY)
		return; /* its completion writes it */
	struct buf blob;
	buf_init(&blob, META_BLOB_MAX);
	struct chunk_origin o = { .bucket = ref->bucket, .key = ref->key, .etag = ref->meta->etag,
	                          .index = index };
	if (index == 0 && meta_encode(ref->meta, &blob) == 0) {
		o.meta = blob.p;
		o.meta_len = blob.len;
	}
	store_pin_write(s, c, &o);
	buf_fini(&blob);
}

void pins_add_object(struct pins *p, const char *id)
{
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	if (x && !x->prefix) {
		x->n_keys++;
		x->dirty = true;
	}
	pthread_mutex_unlock(&p->lock);
}

int pins_end(struct pins *p, const char *id)
{
	pthread_mutex_lock(&p->lock);
	struct pin **link;
	struct pin *x = find(p, id, &link);
	if (x) {
		*link = x->next;
		log_info("pins", "pin %s ended: %zu chunks unpinned", x->id, x->n);
		tell_ended(p, x);
		forget_file(p, x);
		pin_free(p, x);
	}
	pthread_mutex_unlock(&p->lock);
	return x ? 0 : -ENOENT;
}

static bool expired(const struct pin *x, const void *arg)
{
	return x->until <= *(const int64_t *)arg;
}

/* Lock held. Ends each pin for which fn says so; returns how many. */
static size_t end_where(struct pins *p, bool (*fn)(const struct pin *x, const void *arg),
                        const void *arg, const char *why)
{
	size_t n = 0;
	for (struct pin **pp = &p->list; *pp;) {
		struct pin *x = *pp;
		if (!fn(x, arg)) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		log_info("pins", "pin %s %s: %zu chunks unpinned", x->id, why, x->n);
		if (fn != expired)
			tell_ended(p, x);
		forget_file(p, x);
		pin_free(p, x);
		n++;
	}
	return n;
}

struct prefix_match {
	const char *bucket, *prefix;
};

static bool under_prefix(const struct pin *x, const void *arg)
{
	const struct prefix_match *m = arg;
	return strcmp(x->bucket, m->bucket) == 0 && x->prefix &&
	       strncmp(x->prefix, m->prefix, strlen(m->prefix)) == 0;
}

size_t pins_end_prefix(struct pins *p, const char *bucket, const char *prefix)
{
	struct prefix_match m = { bucket, prefix };
	pthread_mutex_lock(&p->lock);
	size_t n = end_where(p, under_prefix, &m, "ended");
	pthread_mutex_unlock(&p->lock);
	return n;
}

void pins_expire(struct pins *p, int64_t now)
{
	pthread_mutex_lock(&p->lock);
	end_where(p, expired, &now, "expired");
	pthread_mutex_unlock(&p->lock);
}

size_t pins_count(struct pins *p)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (struct pin *x = p->list; x; x = x->next)
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

size_t pins_list(struct pins *p, struct pin_info *out, size_t max)
{
	size_t n = 0;
	pthread_mutex_lock(&p->lock);
	for (struct pin *x = p->list; x && n < max; x = x->next) {
		struct pin_info *i = &out[n++];
		memset(i, 0, sizeof *i);
		snprintf(i->id, sizeof i->id, "%s", x->id);
		snprintf(i->bucket, sizeof i->bucket, "%s", x->bucket);
		i->prefix = x->prefix ? strdup(x->prefix) : NULL;
		i->n_keys = x->n_keys;
		i->bytes = x->bytes;
		i->until = x->until;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

/* ---- files --------------------------------------------------------------- */

/* DIR/pins/HASH.json: pin ids hold '/' (a peer's NODE/JOB), so the file is
 * named after a hash of the id, which it holds. */
static void pin_path(const struct pins *p, const char *id, char *out, size_t n)
{
	snprintf(out, n, "%s/%016llx.json", p->dir, (unsigned long long)fnv1a64(id));
}

/* Lock held. Pin x as the text of its file, or NULL (out of memory). */
static char *encode(const struct pin *x)
{
	json_t *chunks = json_array();
	for (size_t i = 0; chunks && i < x->n; i++) {
		char hex[2 * CHUNK_ID_LEN + 1];
		hex_encode(x->ids[i].id.b, CHUNK_ID_LEN, hex);
		if (json_array_append_new(chunks, json_pack("[s,I]", hex,
		                                            (json_int_t)x->ids[i].len)) != 0) {
			json_decref(chunks);
			chunks = NULL;
		}
	}
	json_t *doc = chunks ? json_pack("{s:i,s:s,s:s,s:s?,s:I,s:I,s:o}", "version", 1, "id", x->id,
	                                 "bucket", x->bucket, "prefix", x->prefix, "keys",
	                                 (json_int_t)x->n_keys, "until", (json_int_t)x->until,
	                                 "chunks", chunks) : NULL;
	char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	return text;
}

struct snap {
	struct snap *next;
	char id[PIN_ID_MAX];
	char *text;
};

/* Writes the pins that changed and removes the files of those that
 * ended; one save at a time. */
static void save_changes(struct pins *p)
{
	if (!p->dir)
		return;
	pthread_mutex_lock(&p->io);
	pthread_mutex_lock(&p->lock);
	struct gone *gone = p->gone;
	p->gone = NULL;
	struct snap *snaps = NULL;
	for (struct pin *x = p->list; x; x = x->next) {
		if (!x->dirty)
			continue;
		struct snap *sn = calloc(1, sizeof *sn);
		if (!sn || !(sn->text = encode(x))) {
			free(sn);
			continue; /* out of memory: still dirty, the next save tries again */
		}
		snprintf(sn->id, sizeof sn->id, "%s", x->id);
		sn->next = snaps;
		snaps = sn;
		x->dirty = false;
	}
	pthread_mutex_unlock(&p->lock);
	char path[4096];
	/* Removals first: a pin that ended and began again under its id is written after. */
	for (struct gone *g = gone, *next; g; g = next) {
		next = g->next;
		pin_path(p, g->id, path, sizeof path);
		if (unlink(path) != 0 && errno != ENOENT)
			log_error("pins", "removing %s (pin %s ended) failed: %s", path, g->id,
			          strerror(errno));
		free(g);
	}
	for (struct snap *sn = snaps, *next; sn; sn = next) {
		next = sn->next;
		pin_path(p, sn->id, path, sizeof path);
		int rc = file_replace(path, sn->text, strlen(sn->text));
		if (rc)
			log_error("pins", "saving pin %s to %s failed: %s", sn->id, path, strerror(-rc));
		free(sn->text);
		free(sn);
	}
	pthread_mutex_unlock(&p->io);
}

static void *saver_main(void *arg)
{
	struct pins *p = arg;
	assert(p->magic == PINS_MAGIC);
	pthread_setname_np(pthread_self(), "larder-pins");
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_sec += SAVE_EVERY_S;
		pthread_cond_timedwait(&p->wake, &p->lock, &t);
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->lock);
		save_changes(p);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void pins_shutdown(struct pins *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	bool was = p->frozen, joined = p->saver_on;
	p->stop = true;
	p->saver_on = false;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (was)
		return;
	if (joined)
		pthread_join(p->saver, NULL);
	pthread_mutex_lock(&p->lock);
	p->frozen = true;
	pthread_mutex_unlock(&p->lock);
	save_changes(p);
}

/* A saved pin's chunk: [HEX, LEN]; false when it is not one. */
static bool chunk_entry(json_t *e, struct chunk_id *id, uint64_t *len)
{
	const char *hex = json_string_value(json_array_get(e, 0));
	json_t *l = json_array_get(e, 1);
	if (json_array_size(e) != 2 || !hex || strlen(hex) != 2 * CHUNK_ID_LEN ||
	    !json_is_integer(l) || json_integer_value(l) <= 0 ||
	    (uint64_t)json_integer_value(l) > PIN_CHUNK_LEN_MAX)
		return false;
	for (size_t i = 0; i < CHUNK_ID_LEN; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		id->b[i] = (uint8_t)(hi << 4 | lo);
	}
	*len = (uint64_t)json_integer_value(l);
	return true;
}

/* Whether doc is a saved pin: every field, and every chunk, well formed. */
static bool pin_doc_ok(json_t *doc)
{
	const char *id = json_string_value(json_object_get(doc, "id"));
	const char *bucket = json_string_value(json_object_get(doc, "bucket"));
	json_t *prefix = json_object_get(doc, "prefix");
	json_t *keys = json_object_get(doc, "keys");
	json_t *until = json_object_get(doc, "until");
	json_t *chunks = json_object_get(doc, "chunks");
	if (json_integer_value(json_object_get(doc, "version")) != 1 || !id || !id[0] ||
	    strlen(id) >= PIN_ID_MAX || !bucket || !bucket[0] || strlen(bucket) >= 256 ||
	    (prefix && !json_is_string(prefix) && !json_is_null(prefix)) ||
	    !json_is_integer(keys) ||
	    json_integer_value(keys) < 0 || !json_is_integer(until) ||
	    json_integer_value(until) <= 0 || !json_is_array(chunks))
		return false;
	size_t i;
	json_t *e;
	json_array_foreach(chunks, i, e) {
		struct chunk_id cid;
		uint64_t len;
		if (!chunk_entry(e, &cid, &len))
			return false;
	}
	return true;
}

/* Loads one saved pin and pins its chunks again: one NVMe recovered is
 * held from now on, one not there yet is kept when it arrives. An expired
 * pin's file is removed; a file that is not a pin is logged and left. */
static void load(void *arg, const char *file)
{
	struct pins *p = arg;
	int64_t now = (int64_t)time(NULL);
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", p->dir, file);
	json_error_t jerr;
	json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc || !pin_doc_ok(doc)) {
		log_warn("pins", "%s: not a saved pin, ignored%s%s", path, doc ? "" : ": ",
		         doc ? "" : jerr.text);
		json_decref(doc);
		return;
	}
	const char *id = json_string_value(json_object_get(doc, "id"));
	int64_t until = json_integer_value(json_object_get(doc, "until"));
	if (until <= now) {
		log_info("pins", "pin %s expired while larder was stopped: dropped", id);
		unlink(path);
		json_decref(doc);
		return;
	}
	const char *prefix = json_string_value(json_object_get(doc, "prefix"));
	if (pins_has(p, id) ||
	    pins_begin(p, id, json_string_value(json_object_get(doc, "bucket")), prefix, until) != 0) {
		log_warn("pins", "%s: pin %s not restored (%s)", path, id,
		         pins_has(p, id) ? "another file holds it" : "out of memory");
		json_decref(doc);
		return;
	}
	pthread_mutex_lock(&p->lock);
	struct pin *x = find(p, id, NULL);
	x->n_keys = (size_t)json_integer_value(json_object_get(doc, "keys"));
	size_t i, past = 0, nomem = 0;
	json_t *e;
	json_array_foreach(json_object_get(doc, "chunks"), i, e) {
		struct chunk_id cid;
		uint64_t len;
		chunk_entry(e, &cid, &len);
		int r = add_locked(p, x, &cid, (size_t)len);
		past += r == -ENOSPC;
		nomem += r != 0 && r != -ENOSPC;
	}
	/* Saved again (without every chunk not pinned) only when some were
	 * past the limits: a chunk that found no memory keeps its place in
	 * the file, for the next start to try again. */
	x->dirty = past > 0;
	log_info("pins", "pin %s restored: %zu chunks, %" PRIu64 " bytes, %lld s left%s", x->id, x->n,
	         x->bytes, (long long)(until - now), past + nomem ? " (some not pinned again)" : "");
	if (past)
		log_warn("pins", "pin %s: %zu chunks not pinned again: past the pin limits", x->id, past);
	if (nomem)
		log_warn("pins", "pin %s: %zu chunks not pinned again: out of memory", x->id, nomem);
	pthread_mutex_unlock(&p->lock);
	json_decref(doc);
}

struct pins *pins_create(struct store *s, const char *dir, char *err, size_t errlen)
{
	struct pins *p = calloc(1, sizeof *p);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->magic = PINS_MAGIC;
	p->store = s;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->io, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (!dir || !dir[0])
		return p;
	size_t n = strlen(dir) + sizeof "/pins";
	if (!(p->dir = malloc(n))) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	snprintf(p->dir, n, "%s/pins", dir);
	if (file_dir_each(p->dir, ".json", load, p, err, errlen) != 0)
		goto fail;
	if (pthread_create(&p->saver, NULL, saver_main, p) != 0) {
		snprintf(err, errlen, "cannot start a thread: %s", strerror(errno));
		goto fail;
	}
	p->saver_on = true;
	return p;
fail:
	free(p->dir);
	p->dir = NULL;
	pins_destroy(p);
	return NULL;
}
