/*
 * fetch.c - upstream GETs that fill the cache (see fetch.h).
 *
 * A meta fetch asks for one chunk's range without knowing the ETag: chunk
 * 0, or for a reader of a range the chunk its first byte is in, so that a
 * read into the middle of a large object costs one upstream GET and one
 * first byte, not chunk 0's as well (in a cluster: learnt_past_chunk0).
 * When upstream's headers arrive it publishes the object's metadata
 * (waking the readers that waited for it), then asks the store for that
 * chunk under its real id: if nobody has it, the rest of this response
 * fills it; if someone does, the transfer stops. A meta fetch for a reader with
 * x-amz-checksum-mode asks for the whole object with the mode instead (S3
 * sends no checksum for a range): its x-amz-checksum-* headers are learnt
 * with the metadata, its first bytes fill chunk 0, and the transfer stops
 * there (the other chunks are fetched as ranges, as always). A chunk fetch
 * asks for one chunk's range with If-Match: a 412 means the object changed
 * under us, so the metadata is dropped and the chunk fails: never a mix of
 * versions.
 */
#include "gateway/fetch.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "auth/sigv4.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "base/httpdate.h"
#include "base/log.h"
#include "cluster/peer.h"
#include "cluster/placement.h"
#include "gateway/limits.h"
#include "gateway/metrics.h"
#include "gateway/pins.h"
#include "gateway/range.h"
#include "gateway/s3err.h"
#include "gateway/upstream.h"
#include "cluster/cluster.h"
#include "cluster/directory.h"
#include "store/object.h"
#include "store/store.h"

/* An error answer's body is read up to this many bytes, for at most
 * ERRBODY_WAIT_S after its headers: one that is larger, endless or
 * trickled ends there, and its reader gets a whole document made from
 * what came (s3err_upstream_xml). */
#define ERRBODY_MAX S3ERR_UPSTREAM_BODY_MAX
#define ERRBODY_WAIT_S S3ERR_UPSTREAM_WAIT_S
#define RESP_HEADERS_MAX (64 * 1024)

struct fetch {
	unsigned magic;
	struct worker *w;
	struct list_node link;       /* on the worker's fetches */
	bool meta_kind;              /* learning the object; else one chunk */
	char *bucket, *key;
	char etag[130];              /* chunk fetches: If-Match */
	char pin[PIN_HEADER_MAX];    /* a pinned warm job's chunk: X-Larder-Pin to its owner */
	char *revalidate;            /* meta fetches: If-None-Match */
	uint64_t index, start;       /* chunk index and its first byte */
	uint64_t learn_index;        /* meta fetch: the chunk its range asks for
	                              * (FETCH_LAST_CHUNK: bytes=-chunk) */
	uint64_t from;               /* meta fetch: the reader's first byte in that chunk,
	                              * asked for from there on (0: the whole chunk) */
	struct fetch *partner;       /* the other fetch of a chunk filled as two parts */
	bool tail;                   /* it fills its chunk from c->split on (split_fill) */
	bool after_partner;          /* the head part in a cluster: starts once the tail's
	                              * target has its range (start_partner) */
	unsigned asks_at;            /* the hop this attempt asks at (ask_hop) */
	uint64_t skip;               /* body bytes before that chunk's first, not kept */
	uint64_t size;               /* the object's size, as its metadata says */
	time_t lm;                   /* and its Last-Modified (0: unknown) */
	struct chunk *c;             /* the chunk being filled (a reference) */
	struct obj_meta *meta;       /* what the meta fetch learnt (chunk 0's origin) */
	const struct fetch_owner_ops *owner_ops;
	void *owner;                 /* meta fetch: told what came of it; NULL once gone */

	struct transfer x;           /* the exchange with S3 or another node */
	struct up_target target;
	bool discard;                /* the body is not wanted */
	bool cancelled;              /* stopped because nobody wanted the chunk */
	bool no_memory;              /* the chunk's bytes found no memory (chunk_append) */
	bool no_range;               /* meta fetch of an empty object: a plain GET */
	bool relearn;                /* meta fetch: a 304 for another object of the same
	                                ETag; asked again without If-None-Match */
	bool whole;                  /* meta fetch: the whole object with checksum mode */
	unsigned hop;                /* 0: for this node's clients; 1+: for a peer's request */
	bool to_peer;                /* this attempt asks another node, not S3 */
	bool peer_failed;            /* the owner did not answer, or must not be asked (a
	                                meta fetch of an object written here lately): S3 */
	struct placement_ask *ask;   /* a directory lookup under way, before the first try */
	char holder[CLUSTER_NAME_MAX]; /* a node the directory says holds it, or "" */
	char asked[CLUSTER_NAME_MAX];  /* the node this attempt asks (to_peer) */
	char via[CLUSTER_NAME_MAX];    /* a node asked instead of the owner: the one that
	                                * answered this chunk's first read (stay_with_source) */
	bool warm_first;             /* meta fetch: learnt by a chunk past 0 as the object's
	                              * owner node: chunk 0 is fetched once it ends */
	double asked_seen;           /* when it was last seen a member (clock_mono_s) */
	double learning_since;       /* the node asked first refused it while learning the
	                                object (learning_refusal), or 0 */
	double learning_pause;       /* the pause before it asks that node again */
	bool to_holder;              /* this attempt asks that holder */
	bool holder_failed;          /* it failed: the owner next (S3 if that is the holder) */
	bool failed_headers;         /* a response that is not what we asked for */
	bool short_answer;           /* a chunk's answer that ends before its range does */
	size_t attempt_from;         /* what its part had when this attempt began */
	bool changed;                /* an answer for another version: as good as a 412 */
	bool uncacheable;            /* meta fetch: an answer the cache cannot keep */
	bool fills_chunk;            /* meta fetch: its answer is chunk learn_index whole */
	uint64_t gen;                /* meta fetch: NVMe time order when it began, for
	                                chunk 0, claimed only once the answer is in */
	struct shaper_slot slot;     /* its place in the prefix's window (gateway/shaper.h) */
	ev_timer slot_timer;         /* waiting for that place */
	bool no_slot;                /* it waited too long for one: SlowDown */
	unsigned charge;             /* the store charge of its chunk, and its slot's tenant */
	char *slot_key;              /* the key whose max_upstream_requests slot it holds */
	struct buf errbody;
	bool err_answer;             /* meta fetch: its headers were an error answer's */
	bool errbody_cut;            /* its body read up to ERRBODY_MAX or ERRBODY_WAIT_S */
	bool errbody_made;           /* and replaced by a document of larder's */
	double err_since;            /* when those headers came */
};


uint64_t fetch_object_key(const char *bucket, const char *key)
{
	struct chunk_id oid;
	chunk_id_make(bucket, key, "", 0, &oid);
	return chunk_id_hash(&oid);
}

/* Objects written through this node lately (fetch_written): a hash table
 * of fixed size, an object looked for in the few slots its hash names. */
#define WRITTEN_SLOTS 4096
#define WRITTEN_PROBES 4

static struct {
	pthread_mutex_t lock;
	uint64_t h[WRITTEN_SLOTS];
	double when[WRITTEN_SLOTS];
} written = { .lock = PTHREAD_MUTEX_INITIALIZER };
static atomic_bool any_written; /* read-only nodes never look in the table */
static _Atomic double resynced_at = -1e9; /* fetch_resynced */

void fetch_resynced(double now)
{
	atomic_store(&resynced_at, now);
}

void fetch_written(const char *bucket, const char *key, double now)
{
	uint64_t h = fetch_object_key(bucket, key);
	size_t victim = h % WRITTEN_SLOTS;
	pthread_mutex_lock(&written.lock);
	for (size_t k = 0; k < WRITTEN_PROBES; k++) {
		size_t i = (h + k) % WRITTEN_SLOTS;
		if (written.h[i] == h) {
			victim = i;
			break;
		}
		if (written.when[i] < written.when[victim])
			victim = i;
	}
	written.h[victim] = h;
	written.when[victim] = now;
	pthread_mutex_unlock(&written.lock);
	atomic_store(&any_written, true);
}

void fetch_changed(struct gw *gw, const char *bucket, const char *key, bool dropped)
{
	/* Its chunk 0 on NVMe names the old version: a restart must not
	 * bring that back (the new one's may never reach NVMe). */
	if (gw->store)
		store_invalidate_seen(gw->store, bucket, key);
	if (!dropped)
		meta_drop(gw->meta, bucket, key);
	if (gw->cluster) {
		cluster_publish_invalidate(gw->cluster, bucket, key);
		/* The owner may not have heard yet: learn it from S3, as after
		 * a write here. */
		fetch_written(bucket, key, clock_mono_s());
	}
}

/* Whether (bucket, key), or its whole bucket, was written through this
 * node less than FETCH_WRITTEN_S ago. */
static bool written_lately(const char *bucket, const char *key, double now)
{
	if (!atomic_load(&any_written))
		return false;
	uint64_t hk = fetch_object_key(bucket, key), hb = fetch_object_key(bucket, "");
	bool yes = false;
	pthread_mutex_lock(&written.lock);
	for (size_t k = 0; k < WRITTEN_PROBES && !yes; k++) {
		size_t i = (hk + k) % WRITTEN_SLOTS, j = (hb + k) % WRITTEN_SLOTS;
		yes = (written.h[i] == hk && now - written.when[i] < FETCH_WRITTEN_S) ||
		      (written.h[j] == hb && now - written.when[j] < FETCH_WRITTEN_S);
	}
	pthread_mutex_unlock(&written.lock);
	return yes;
}

/* Objects a chunk fetch saw change, and objects found unsteady (fetch.h):
 * one slot per object, by its hash, overwritten by another that hashes
 * there (forgetting only costs a few cut reads more). */
#define UNSTEADY_SLOTS 1024

static struct {
	pthread_mutex_t lock;
	struct unsteady_slot {
		uint64_t h, etag_h, size;
		time_t lm;
		double moved;  /* when a chunk fetch saw it change, or 0 */
		double until;  /* passed through until then, or 0 */
	} s[UNSTEADY_SLOTS];
} unsteady = { .lock = PTHREAD_MUTEX_INITIALIZER };
/* Until when (monotonic ms) any slot's moved, or any slot's until, may
 * still count: a cached read (cache_wants) asks fetch_unsteady, and takes
 * the lock only while some object is passed through, not for good once
 * any object changed upstream (a version change notes a move too). */
static _Atomic int64_t moved_until_ms, passed_until_ms;

static void raise_to(_Atomic int64_t *v, int64_t to)
{
	int64_t was = atomic_load(v);
	while (was < to && !atomic_compare_exchange_weak(v, &was, to))
		;
}

static uint64_t etag_hash(const char *etag)
{
	struct chunk_id id;
	chunk_id_make("", "", etag, 0, &id);
	return chunk_id_hash(&id);
}

void fetch_unsteady_moved(const char *bucket, const char *key, const char *etag, uint64_t size,
                          time_t last_modified, double now)
{
	uint64_t h = fetch_object_key(bucket, key);
	struct unsteady_slot *u = &unsteady.s[h % UNSTEADY_SLOTS];
	pthread_mutex_lock(&unsteady.lock);
	if (u->h != h)
		*u = (struct unsteady_slot){ .h = h };
	u->etag_h = etag_hash(etag);
	u->size = size;
	u->lm = last_modified;
	u->moved = now;
	pthread_mutex_unlock(&unsteady.lock);
	raise_to(&moved_until_ms, (int64_t)((now + FETCH_UNSTEADY_SEEN_S) * 1000.0) + 1);
}

bool fetch_unsteady_learnt(const char *bucket, const char *key, const char *etag,
                           uint64_t size, time_t last_modified, double now)
{
	if ((int64_t)(now * 1000.0) >= atomic_load(&moved_until_ms))
		return false;
	uint64_t h = fetch_object_key(bucket, key);
	struct unsteady_slot *u = &unsteady.s[h % UNSTEADY_SLOTS];
	pthread_mutex_lock(&unsteady.lock);
	bool yes = u->h == h && u->moved > 0 && now - u->moved < FETCH_UNSTEADY_SEEN_S &&
	           u->size == size && u->lm == last_modified && u->etag_h != etag_hash(etag);
	if (yes) {
		u->moved = 0;
		u->until = now + FETCH_UNSTEADY_S;
		raise_to(&passed_until_ms, (int64_t)(u->until * 1000.0) + 1);
	}
	pthread_mutex_unlock(&unsteady.lock);
	if (yes) {
		metrics_upstream_unsteady_etag();
		log_warn("fetch", "%s/%s: upstream names it by another ETag in each answer (now %s), "
		         "its size and Last-Modified unchanged: not cached for %.0f s", bucket, key,
		         etag, FETCH_UNSTEADY_S);
	}
	return yes;
}

bool fetch_unsteady(const char *bucket, const char *key)
{
	int64_t until = atomic_load(&passed_until_ms);
	if (until == 0) /* nothing ever passed through: no clock read either */
		return false;
	double now = clock_mono_s();
	if ((int64_t)(now * 1000.0) >= until)
		return false;
	uint64_t h = fetch_object_key(bucket, key);
	struct unsteady_slot *u = &unsteady.s[h % UNSTEADY_SLOTS];
	pthread_mutex_lock(&unsteady.lock);
	bool yes = u->h == h && now < u->until;
	pthread_mutex_unlock(&unsteady.lock);
	return yes;
}

static void fetch_free(struct fetch *f)
{
	struct worker *w = f->w;
	list_unlink(&w->fetches, &f->link);
	if (f->partner)
		f->partner->partner = NULL;
	if (f->owner)
		f->owner_ops->detach(f->owner, f);
	if (f->ask)
		placement_cancel(f->ask);
	ev_timer_stop(w->loop, &f->slot_timer);
	shaper_cancel(w->gw->shaper, &f->slot);
	transfer_fini(&f->x);
	up_target_fini(&f->target);
	buf_fini(&f->errbody);
	if (f->c)
		chunk_unref(f->c);
	meta_unref(f->meta);
	free(f->bucket);
	free(f->key);
	free(f->revalidate);
	if (f->slot_key)
		limits_upstream_give(f->slot_key);
	free(f->slot_key);
	f->magic = 0;
	free(f);
}

static const struct transfer_ops fetch_ops;
static void slot_cb(struct ev_loop *loop, ev_timer *t, int revents);
static void slot_placed(struct shaper_slot *slot);

static struct fetch *fetch_new(struct worker *w, const char *bucket, const char *key,
                               bool background)
{
	struct fetch *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->magic = FETCH_MAGIC;
	f->w = w;
	f->bucket = strdup(bucket);
	f->key = strdup(key);
	struct transfer_retry policy = upstream_retry_policy(w->gw->up);
	transfer_init(&f->x, &fetch_ops, f, w->curl, &policy);
	up_target_init(&f->target);
	buf_init(&f->errbody, ERRBODY_MAX);
	shaper_slot_init(&f->slot, background, &w->slot_waker, slot_placed);
	ev_timer_init(&f->slot_timer, slot_cb, 0, 0);
	f->slot_timer.data = f;
	list_push_front(&w->fetches, &f->link);
	if (!f->bucket || !f->key) {
		fetch_free(f);
		return NULL;
	}
	return f;
}

/* ---- the transfer ----------------------------------------------------- */

static uint64_t chunk_bytes(const struct fetch *f)
{
	return f->w->gw->cfg->chunk_bytes;
}

/* The end of f's part of its chunk (split_fill), and how far it got. */
static size_t part_end(const struct fetch *f)
{
	size_t s = atomic_load_explicit(&f->c->split, memory_order_relaxed);
	return f->tail || !s ? f->c->len : s;
}

static size_t part_produced(const struct fetch *f)
{
	return f->tail ? chunk_tail_produced(f->c) : chunk_produced(f->c);
}

/* f's chunk failed (reason: FETCH_ERR_*): its readers hear why, and the
 * fetch of its other part, if any, stops. */
static void fail_chunk(struct fetch *f, int reason)
{
	store_complete(f->w->gw->store, f->c, false, reason, NULL);
	struct fetch *p = f->partner;
	if (p) {
		transfer_stop(&p->x);
		fetch_free(p);
	}
}

/* A header value of the response, or NULL. */
static const char *resp_header(const struct fetch *f, const char *name)
{
	return transfer_header(&f->x, name);
}

static int start_transfer(struct fetch *f);

/* Another node, asked path style on its client port: https when ours
 * serves TLS (every node of a cluster is configured alike). */
static int peer_target(const char *addr, bool tls, const char *bucket, const char *key,
                       struct up_target *t)
{
	buf_reset(&t->url);
	buf_reset(&t->host);
	buf_reset(&t->path);
	int rc = buf_puts(&t->host, addr);
	rc = rc ? rc : buf_putc(&t->path, '/');
	rc = rc ? rc : sv4_uri_encode(bucket, strlen(bucket), false, &t->path);
	rc = rc ? rc : buf_putc(&t->path, '/');
	rc = rc ? rc : sv4_uri_encode(key, strlen(key), true, &t->path);
	rc = rc ? rc : buf_printf(&t->url, "%s://%s%s", tls ? "https" : "http", addr,
	                          buf_cstr(&t->path));
	return rc;
}

/* A transfer that could not start outside fetch_*_start: fail its waiters. */
static void start_or_fail(struct fetch *f)
{
	int rc = start_transfer(f);
	if (rc != 0) {
		if (f->c)
			fail_chunk(f, rc == -EBUSY ? FETCH_ERR_SLOWDOWN : FETCH_ERR_UPSTREAM);
		if (f->meta_kind && !f->c && rc == -EBUSY)
			meta_publish_failure(f->w->gw->meta, f->bucket, f->key, 503, clock_mono_s());
		else if (f->meta_kind && !f->c)
			meta_publish(f->w->gw->meta, f->bucket, f->key, NULL);
		fetch_free(f);
	}
}

/* It has its place in the prefix's window, or waited as long as it may
 * (then start_transfer answers SlowDown): ask again. */
static void slot_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct fetch *f = t->data;
	assert(f->magic == FETCH_MAGIC);
	(void)revents;
	ev_timer_stop(loop, t);
	if (f->c && !obj_wanted(f->c)) { /* its readers gave up while it waited */
		fail_chunk(f, FETCH_ERR_CANCELLED);
		fetch_free(f);
		return;
	}
	start_or_fail(f);
}

static void slot_placed(struct shaper_slot *slot)
{
	struct fetch *f = list_item(slot, struct fetch, slot);
	slot_cb(f->w->loop, &f->slot_timer, 0);
}

/* The directory answered: a holder to ask first, or nobody. */
static void asked_cb(void *arg, const char *addr)
{
	struct fetch *f = arg;
	assert(f->magic == FETCH_MAGIC);
	f->ask = NULL;
	if (addr)
		str_copy(f->holder, sizeof f->holder, addr);
	if (addr && f->meta_kind && !f->c) {
		/* The object's chunk 0 is held elsewhere: it was cached here
		 * before ownership moved, and so may the reader's chunk be,
		 * which its owner gives. Learnt from chunk 0, as before. */
		f->learn_index = 0;
		f->from = 0;
	}
	start_or_fail(f);
}

/* The key that routes what f fetches (its owner, its directory entry):
 * chunk_id_hash of its chunk, except for chunk 0 and the first read of an
 * object (which fetches chunk 0), routed by the object's metadata key, so
 * that both go to the same node whether or not the ETag is known. */
static uint64_t dir_key_of(const struct fetch *f)
{
	if (f->c && f->index > 0)
		return chunk_id_hash(&f->c->id);
	return fetch_object_key(f->bucket, f->key);
}

/* The first try. Where it would go to S3 (this node owns the chunk, and
 * the reader is its own client or a peer that came to the owner), ask the
 * placement directory first whether another node holds it already: after
 * a membership change the new owner finds the old copies. Only there: a
 * lookup costs a Redis round trip, small against S3's first byte but not
 * against a peer's, and a node that does not own a chunk asks its owner,
 * who looks. */
static int begin(struct fetch *f)
{
	if (f->w->placement && f->hop < PEER_MAX_HOP && !f->peer_failed) {
		uint64_t key = dir_key_of(f);
		if (!cluster_owner(f->w->gw->cluster, key, NULL, 0) &&
		    (f->ask = placement_ask(f->w->placement, key, asked_cb, f)))
			return 0;
	}
	return start_transfer(f);
}

/* A node's TLS that this one cannot verify (or the reverse): no error for
 * the read, which goes to S3, but the cluster shares nothing that way. */
static bool tls_refused(CURLcode result)
{
	return result == CURLE_PEER_FAILED_VERIFICATION || result == CURLE_SSL_CONNECT_ERROR ||
	       result == CURLE_SSL_CACERT_BADFILE || result == CURLE_SSL_CERTPROBLEM;
}

/* Warns of it, at most once a minute (every chunk would say it again). */
static void warn_peer_tls(const struct transfer *t, CURLcode result)
{
	static _Atomic int64_t last_s;
	int64_t now = (int64_t)clock_mono_s(), was = atomic_load(&last_s);
	if ((was && now - was < 60) || !atomic_compare_exchange_strong(&last_s, &was, now))
		return;
	log_warn("fetch", "a node's TLS failed: %s; chunks it holds are read from S3 instead "
	         "(LARDER_CLUSTER_CA_FILE must verify every node's certificate, and each "
	         "certificate name its node's advertise host)", transfer_strerror(t, result));
}

/* Why an attempt failed, for a log line: curl's reason, or that upstream
 * answered with an error (its status is on the line). */
static const char *why_failed(const struct fetch *f, CURLcode result)
{
	return result == CURLE_OK ? "an error answer" : transfer_strerror(&f->x, result);
}

/* Under upstream's retry policy (capped exponential backoff with jitter):
 * resumes from the bytes the chunk has. */
static bool schedule_retry(struct fetch *f, CURLcode result)
{
	double delay = transfer_retry_later(&f->x);
	if (delay < 0)
		return false;
	log_info("fetch", "%s/%s chunk %" PRIu64 ": upstream %ld (%s), retry %u in %.0f ms",
	         f->bucket, f->key, f->index, f->x.status, why_failed(f, result), f->x.retries,
	         delay * 1000);
	return true;
}

/* The hop this attempt asks a node at, 0 when it asks S3. A holder is
 * asked at the last hop: if it lost the chunk meanwhile it fetches it from
 * S3 itself rather than asking its owner, which may be us, waiting for it.
 * Who may wait for this fetch depends on it (store/object.h: obj_may_wait). */
static unsigned ask_hop(const struct fetch *f)
{
	return !f->to_peer ? 0 : f->to_holder ? PEER_MAX_HOP : f->hop + 1;
}

/* The ask_hop a chunk's waiters are judged by (obj_may_wait): f's, or with
 * a partner, whichever of the two parts' a request may wait for less. */
static unsigned chunk_ask_hop(struct fetch *f)
{
	f->asks_at = ask_hop(f);
	unsigned a = f->asks_at, b = f->partner ? f->partner->asks_at : 0;
	return !a ? b : !b || a < b ? a : b;
}

/* learn: a first chunk up to this size is filled past the memory bound. */
#define CHUNK0_FILL_ANYWAY (1024 * 1024)

/* meta_start: the first chunk index a meta fetch may ask for. S3's objects
 * end far below it; past it the Range's last byte would not fit in 64 bits. */
#define MAX_LEARN_INDEX(cs) (UINT64_MAX / (cs) - 1)

bool fetch_memory_over(const struct gw *gw, uint64_t extra)
{
	const struct cfg *cfg = gw->cfg;
	uint64_t budget = cfg->inflight_bytes ? cfg->inflight_bytes : cfg->ram_cache_bytes;
	if (budget < 2 * (uint64_t)cfg->chunk_bytes)
		budget = 2 * (uint64_t)cfg->chunk_bytes;
	return chunk_live_bytes() + extra > cfg->ram_cache_bytes + budget;
}

/* obj_produce_fn of a meta fetch: the rest of its response fills the
 * chunk it asked for when it is that chunk's whole range. */
static int claim_chunk(void *arg, struct chunk *c, uint64_t index)
{
	struct fetch *f = arg;
	if (!f->fills_chunk)
		return FETCH_ERR_CANCELLED;
	chunk_ref(c);
	chunk_keep(c);
	atomic_store(&c->ask_hop, ask_hop(f));
	f->c = c;
	f->index = index;
	f->start = obj_chunk_offset(index, chunk_bytes(f));
	return 0;
}

/*
 * A reader's first byte deep in a chunk that nobody holds need not wait for
 * upstream to stream the chunk's bytes before it (~80 ms for the end of an
 * 8 MiB chunk at S3's 100 MiB/s a connection): the chunk is asked for as
 * two ranges at once, [from, end] by the fetch that fills it for the reader
 * and [0, from) by a second one, h, which split_fill ties to it. One GET
 * more, no byte more. Each fills its part in order (chunk_split); whichever
 * ends last completes the chunk, and a failure of either fails it and stops
 * the other. Both run on the same worker. In a cluster both parts ask the
 * node f asks (the owner, or a holder), and h only once that node has f's
 * range (start_partner): the first range it sees of a chunk it does not
 * hold decides how it fetches it, and [from, end] first makes it split too.
 */
static uint64_t split_min(uint64_t cs)
{
	/* Less than this far in, the wait saved is small beside a GET's
	 * first byte: 1 MiB (10 ms at 100 MiB/s) of 8 MiB chunks. Never
	 * below CHUNK_KEEP_MAX: a chunk split is never a kept one. */
	return cs / 8 > 256 * 1024 ? cs / 8 : 256 * 1024;
}

/* Whether a first byte from bytes into a chunk of len (of cs-byte chunks)
 * of bucket/key makes it two GETs: deep enough, and not while S3 throttles
 * the key's prefix (a random reader's GETs nearly double, and S3 refuses
 * GETs there already). */
static bool split_worth(const struct worker *w, const char *bucket, const char *key,
                        uint64_t from, uint64_t len, uint64_t cs)
{
	return from >= split_min(cs) && from < len &&
	       !shaper_throttling(w->gw->shaper, bucket, key);
}

/* Points f at chunk c (index) of the version etag, size bytes: m0 is
 * chunk 0's metadata, which its NVMe entry carries, or NULL. */
static void aim(struct fetch *f, struct chunk *c, uint64_t index, const char *etag,
                uint64_t size, struct obj_meta *m0, unsigned hop, unsigned charge,
                const char *pin)
{
	f->hop = hop;
	f->charge = charge;
	shaper_slot_tenant(&f->slot, charge);
	str_copy(f->pin, sizeof f->pin, pin);
	chunk_ref(c);
	f->c = c;
	f->index = index;
	f->start = obj_chunk_offset(index, chunk_bytes(f));
	str_copy(f->etag, sizeof f->etag, etag);
	f->size = size;
	if (m0) {
		meta_ref(m0);
		f->meta = m0;
	}
}

static void split_fill(struct fetch *f, struct fetch *h, size_t from)
{
	aim(h, f->c, f->index, f->etag, f->size, f->index == 0 ? f->meta : NULL, f->hop,
	    f->charge, f->pin);
	h->lm = f->lm;
	h->gen = f->meta_kind ? f->gen : 0; /* complete_ok: whichever ends last */
	h->partner = f;
	f->partner = h;
	f->tail = true;
	chunk_split(f->c, from);
}

/* f's target has its range, or f asks S3: its partner, the head part, asks
 * the same (or S3 where f's node failed), started from the loop. */
static void start_partner(struct fetch *f)
{
	struct fetch *h = f->partner;
	h->after_partner = false;
	str_copy(h->holder, sizeof h->holder, f->holder_failed ? "" : f->holder);
	/* Where f asks: S3, or the node (not a holder, above), which for a
	 * chunk learnt as an object's first read is not the chunk's owner. */
	str_copy(h->via, sizeof h->via, f->to_peer && !f->to_holder ? f->asked : "");
	h->peer_failed = f->peer_failed || !f->to_peer;
	ev_timer_set(&h->slot_timer, 0, 0);
	ev_timer_start(f->w->loop, &h->slot_timer);
}

/* A whole-object answer to x-amz-checksum-mode: its x-amz-checksum-*
 * headers (none: the object has none) go with the metadata, published
 * next, so every reader woken by it answers with them. Another node is
 * asked for chunk 0 as a range with the mode (it would read the whole
 * object for nothing), and answers with the checksums it knows: without
 * any, they are left unknown. */
static void learn_checksums(struct fetch *f)
{
	struct buf lines;
	buf_init(&lines, 4096);
	int rc = meta_checksum_lines(&f->x.resp, &lines);
	if (!rc && (lines.len || !f->to_peer))
		meta_set_checksums(f->meta, buf_cstr(&lines)); /* out of memory: unknown */
	buf_fini(&lines);
}

bool fetch_learnt_span(uint64_t cs, uint64_t index, uint64_t first, uint64_t last,
                       uint64_t size, uint64_t *k, uint64_t *skip, bool *whole)
{
	if (index == FETCH_LAST_CHUNK) {
		/* bytes=-cs: the object's last cs bytes, or all of a smaller
		 * one; the bytes up to its last chunk are let go */
		if (last + 1 != size || last + 1 - first != (size < cs ? size : cs))
			return false;
		*k = obj_chunk_index(size - 1, cs);
	} else if (first != obj_chunk_offset(index, cs)) {
		return false;
	} else {
		*k = index;
	}
	uint64_t start = obj_chunk_offset(*k, cs);
	*skip = start - first;
	*whole = last + 1 == start + obj_chunk_len(size, *k, cs);
	return true;
}

/*
 * In a cluster an object's first read goes to its owner node (the owner of
 * chunk 0, dir_key_of) for the chunk the reader's range starts in, as a
 * node alone asks S3 (meta_start; a node learning it for another node's
 * request asks for chunk 0, start_transfer): the owner learns it from S3's
 * answer for that chunk, and the reader's bytes come after one first byte,
 * not after chunk 0's and then the chunk's. Whose chunk it is shows only
 * now (its id names the ETag):
 *  - the fetch that claimed it keeps asking where it asked, S3 or the node
 *    that answered, for its retries and the chunk's other part
 *    (start_partner): the chunk's owner does not have it;
 *  - a node that fetched it from S3 without owning it lists itself as its
 *    holder at once (placement_list), before the metadata is published,
 *    so that the owner, asked for it by a node that learnt the ETag from
 *    here, finds it rather than fetching it from S3 again; the directory's
 *    flush keeps the entry while the chunk is held (cluster/directory.h);
 *  - the object's owner fetches chunk 0 too once this fetch ends
 *    (warm_first), whose NVMe entry carries the metadata and which the
 *    directory lists when ownership moves, as when chunk 0 taught it.
 * An owner that knows the object already, and neither owns nor holds the
 * chunk, answers 503 at once (cache_body.c, produce): the reader's node
 * then learns from chunk 0 there and asks the chunk's owner (fetch_done).
 */
static void stay_with_source(struct fetch *f)
{
	if (!f->to_peer)
		f->peer_failed = true; /* S3 */
	else if (!f->to_holder)
		str_copy(f->via, sizeof f->via, f->asked);
}

static void learnt_past_chunk0(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	f->warm_first = !f->to_peer &&
	                !cluster_owner(gw->cluster, fetch_object_key(f->bucket, f->key), NULL, 0);
	if (!f->c)
		return;
	stay_with_source(f);
	uint64_t key = chunk_id_hash(&f->c->id);
	if (!f->to_peer && cluster_owner(gw->cluster, key, NULL, 0)) {
		unsigned ttl_s = gw->cfg->directory_ttl_s ? gw->cfg->directory_ttl_s : 3600;
		placement_list(f->w->placement, key, gw->cfg->node_id, ttl_s * 1000u);
	}
}

/* The object's owner learnt it from a chunk past 0 (learnt_past_chunk0):
 * chunk 0 is fetched for nobody (it goes on with no want, obj_wanted),
 * after the demand reads of its prefix (background). */
static void warm_first_chunk(struct fetch *f)
{
	struct obj_ref ref = { f->bucket, f->key, f->meta };
	struct fetch_producer p = {
		.w = f->w, .bucket = f->bucket, .key = f->key, .meta = f->meta, .background = true,
	};
	struct chunk *c = obj_acquire(&f->w->gw->objects, &ref, 0, 0, fetch_produce, &p, NULL);
	if (c)
		obj_unwant(c, false);
}

/* Meta fetch, headers in: what is this object? */
static void learn(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	double now = clock_mono_s();
	long status = f->x.status;
	if (status == 304 && f->revalidate) {
		/* The same ETag is the same bytes, not the same headers: an
		 * object copied onto itself with a new Content-Type or metadata
		 * keeps its ETag. Its Last-Modified tells, or in a versioned
		 * bucket its version id (a second's writes share a date), or
		 * its tag count (tags change neither). */
		time_t lm = 0;
		httpdate_parse(resp_header(f, "Last-Modified"), &lm);
		f->relearn = !meta_refresh(gw->meta, f->bucket, f->key, lm, &f->x.resp, now);
		f->discard = true;
		return;
	}
	uint64_t a = 0, b = 0, size = 0, k = 0, skip = 0;
	bool ok = false, span_whole = false;
	/* Asked for a range (start_transfer): a 200 is an upstream that
	 * ignored it (S3 never does for these), and its body the whole object. */
	bool ranged = f->to_peer || (!f->no_range && !f->whole);
	/* A fetch from a reader's first byte: its answer is the chunk's from
	 * that byte on. */
	if (status == 206)
		ok = content_range_parse(resp_header(f, "Content-Range"), &a, &b, &size) &&
		     a >= f->from &&
		     fetch_learnt_span(chunk_bytes(f), f->learn_index, a - f->from, b, size, &k,
		                       &skip, &span_whole);
	else if (status == 200) /* the whole object: its size is its body's length */
		ok = (size = hdrs_body_length(&f->x.resp, false)) != HDRS_LENGTH_UNKNOWN &&
		     !(ranged && size > chunk_bytes(f)); /* not one chunk: each fetch would
		                                           * bring it all; passed through */
	const char *etag = resp_header(f, "ETag");
	if (!ok || !etag || !*etag || strlen(etag) >= sizeof f->etag || strncmp(etag, "W/", 2) == 0 ||
	    resp_header(f, "x-amz-server-side-encryption-customer-algorithm")) {
		/* No ETag to name its chunks by (or one past the limit, or a weak
		 * one: it promises no bytes, and If-Match never matches it, so
		 * every chunk after the first would look like a new version), no
		 * size, or encrypted with a customer's key (which must reach S3
		 * on every read, whatever this upstream did with it): not
		 * cacheable. Its readers get the pass-through. */
		f->discard = true;
		f->failed_headers = true;
		f->uncacheable = true;
		return;
	}
	time_t lm = 0; /* 0: unknown */
	httpdate_parse(resp_header(f, "Last-Modified"), &lm);
	if (!f->to_peer && fetch_unsteady_learnt(f->bucket, f->key, etag, size, lm, now)) {
		/* Learnt again after a chunk fetch saw it change, and only its
		 * ETag did (fetch.h): its readers get the pass-through. */
		f->discard = true;
		f->failed_headers = true;
		f->uncacheable = true;
		return;
	}
	struct buf hb;
	buf_init(&hb, RESP_HEADERS_MAX);
	meta_replayed_lines(&f->x.resp, &hb);
	f->size = size;
	f->lm = lm;
	f->meta = meta_new(size, etag, lm,
	                   buf_cstr(&hb), now);
	buf_fini(&hb);
	if (!f->meta) {
		f->discard = true;
		f->failed_headers = true;
		return;
	}
	str_copy(f->etag, sizeof f->etag, etag);
	if (f->whole && (status == 200 || (status == 206 && f->to_peer)))
		learn_checksums(f);
	/* The chunk asked for (chunk 0, or the reader's first) under its real
	 * id, claimed before the metadata is published: a reader woken by the
	 * metadata then joins this fetch instead of starting its own. A 200
	 * (an upstream that ignored the Range) fills nothing unless it was
	 * asked for the whole object, which starts with chunk 0. */
	struct chunk *c0 = NULL;
	struct fetch *head = NULL;
	f->skip = skip; /* a suffix's bytes up to the last chunk are let go */
	if (size > 0) {
		struct obj_ref ref = { f->bucket, f->key, f->meta };
		size_t len0 = obj_chunk_len(size, k, chunk_bytes(f));
		f->fills_chunk = (status == 206 && span_whole) ||
		                 (status == 200 && (f->whole || ranged)); /* chunk 0 whole */
		if (status == 200)
			f->from = 0; /* its body starts at byte 0: no split */
		/* The bound was checked when the fetch started, but chunk 0's
		 * memory is taken only now: any number of cold reads waiting
		 * for their first byte passed it at once. A reader's fetch
		 * fills no large chunk 0 past it (the reader asks for it again,
		 * and gets 503 SlowDown while memory is still short). A small
		 * one it fills, its bytes on their way: declined, it would be
		 * asked for again at once (a second upstream GET) for little
		 * memory, at most CHUNK0_FILL_ANYWAY a connection. */
		if (f->owner && f->fills_chunk && len0 > CHUNK0_FILL_ANYWAY &&
		    fetch_memory_over(gw, len0))
			f->fills_chunk = false;
		/* From the reader's first byte: the fetch of the bytes before
		 * it is made before the chunk is claimed (split_fill). */
		if (f->fills_chunk && f->from && (f->from >= len0 || !(head = fetch_new(f->w,
		                                  f->bucket, f->key, false))))
			f->fills_chunk = false;
		c0 = obj_acquire(&gw->objects, &ref, k, f->charge, claim_chunk, f, NULL);
	}
	if (gw->cluster && k != 0)
		learnt_past_chunk0(f);
	if (head && f->c) { /* started from the loop, outside this curl callback */
		split_fill(f, head, f->from);
		start_partner(f);
	} else if (head) {
		fetch_free(head);
	}
	if (!f->c)
		f->discard = true;
	/* The reader that asked takes the chunk's want from here (fetch.h);
	 * else it is let go. */
	bool taken = false;
	if (f->owner)
		taken = f->owner_ops->learnt(f->owner, status, c0 && f->c == c0 ? c0 : NULL, k);
	if (c0 && !taken)
		obj_unwant(c0, false);
	meta_publish(gw->meta, f->bucket, f->key, f->meta);
}

/* The span a chunk fetch's answer holds: a 206's Content-Range, or all of
 * a 200's body (its length: the object's size). */
static bool answer_span(const struct fetch *f, uint64_t *a, uint64_t *b, uint64_t *total)
{
	if (f->x.status == 206)
		return content_range_parse(resp_header(f, "Content-Range"), a, b, total);
	uint64_t len = hdrs_body_length(&f->x.resp, false);
	if (len == HDRS_LENGTH_UNKNOWN || len == 0)
		return false;
	*a = 0;
	*b = len - 1;
	*total = len;
	return true;
}

static enum transfer_verdict on_headers(struct transfer *t, void *arg)
{
	struct fetch *f = arg;
	assert(f->magic == FETCH_MAGIC);
	if (upstream_region_check(f->w->gw->up, f->bucket, t) == TRANSFER_RESEND)
		return TRANSFER_RESEND;
	long status = t->status;
	if (f->meta_kind && !f->meta && !f->c) {
		if (status == 206 || status == 200 || status == 304)
			learn(f);
		else
			f->discard = true; /* an error: kept for the owner, below */
		if (status >= 300 && status != 304) {
			f->err_answer = true;
			f->err_since = clock_mono_s();
		}
	} else if (status == 412 || !f->c) {
		f->discard = true; /* !f->c: learnt already, chunk 0 is another's */
	} else if (status != 206 && status != 200) {
		f->discard = true;
		if (!upstream_retryable(status))
			f->failed_headers = true;
	} else {
		uint64_t a, b, total;
		const char *etag = resp_header(f, "ETag");
		/* A 200 (an upstream that ignored the Range) is the whole object:
		 * an answer only when that is what was asked for. One that ends
		 * before the range does (an upstream that caps a range's length)
		 * is taken, and the rest asked for again (fetch_done). */
		if (!answer_span(f, &a, &b, &total) || a != f->start + part_produced(f) ||
		    b + 1 > f->start + part_end(f)) {
			f->discard = true;
			f->failed_headers = true;
		} else if (!etag || strcmp(etag, f->etag) != 0 || total != f->size) {
			/* An upstream (or a proxy, or a peer) that did not honour
			 * If-Match answered for another version: the object
			 * changed, whatever its status says (a peer's answer: that
			 * node failed, see fetch_done). Never these bytes. */
			f->discard = true;
			f->changed = true;
		} else {
			f->short_answer = b + 1 < f->start + part_end(f);
			if (f->partner && f->partner->after_partner)
				start_partner(f);
		}
	}
	return TRANSFER_GO;
}

static size_t on_body(struct transfer *t, void *arg, const char *data, size_t len)
{
	struct fetch *f = arg;
	assert(f->magic == FETCH_MAGIC);
	if (f->discard) {
		if (f->err_answer && !f->meta) { /* as much as ERRBODY_MAX and the time allow */
			size_t room = ERRBODY_MAX - f->errbody.len, n = len < room ? len : room;
			buf_append(&f->errbody, data, n);
			if (n < len || clock_mono_s() - f->err_since > ERRBODY_WAIT_S) {
				f->errbody_cut = true;
				return 0;
			}
			return len;
		}
		return f->meta || f->failed_headers || f->changed || t->status == 304 ? 0 : len;
	}
	if (!f->c)
		return 0;
	if (f->skip) { /* a suffix's bytes before the last chunk (learn) */
		size_t n = len < f->skip ? len : (size_t)f->skip;
		f->skip -= n;
		if (n == len || on_body(t, arg, data + n, len - n) == len - n)
			return len;
		return 0;
	}
	/* Nobody wants this chunk any more, and the last reader gave up on it
	 * (its client went away): stop fetching it. */
	if (!obj_wanted(f->c)) {
		f->cancelled = true;
		return 0;
	}
	size_t end = part_end(f), done = part_produced(f);
	size_t room = end > done ? end - done : 0;
	if (len > room && f->whole && f->index == 0 && f->meta) {
		/* a whole object's answer: chunk 0 is its first bytes, and this
		 * fetch stops once it has them (a short count aborts the transfer) */
		if (room > 0 && chunk_append(f->c, data, room) != 0)
			f->no_memory = true;
		return 0;
	}
	if (len > room)
		return 0; /* more than the range asked for: refuse it all */
	if ((f->tail ? chunk_append_tail(f->c, data, len) : chunk_append(f->c, data, len)) != 0) {
		f->no_memory = true; /* the arena is at the memory cgroup's limit */
		return 0;
	}
	return len;
}

/* A node that left the membership (stopped, cut off) is not waited on for
 * LARDER_UPSTREAM_TIMEOUT: within a second of its leaving, its transfer
 * ends (CURLE_ABORTED_BY_CALLBACK) and the fetch goes on from S3. Nor is
 * an error answer's body past ERRBODY_WAIT_S (a meta fetch's, from S3 too).
 * libcurl calls this at least once a second, and with every piece of body
 * (net/transfer.h): a chunk's fetch from S3 reads no clock here. */
static int fetch_progress(struct transfer *t, void *arg)
{
	struct fetch *f = arg;
	(void)t;
	assert(f->magic == FETCH_MAGIC);
	if (f->err_answer && !f->meta && clock_mono_s() - f->err_since > ERRBODY_WAIT_S) {
		f->errbody_cut = true; /* an error body that trickles, or stalls */
		return 1;
	}
	if (!f->to_peer)
		return 0;
	double now = clock_mono_s();
	if (now - f->asked_seen < 1.0)
		return 0;
	if (!cluster_member_tag(f->w->gw->cluster, f->asked))
		return 1;
	f->asked_seen = now;
	return 0;
}

/* How long a connection to another node may take. A node on the network
 * answers a SYN in a millisecond; one cut off or powered off never does,
 * and its SYNs vanish. libcurl (7.88) calls fetch_progress only once the
 * connection is up, so a node's leaving the membership does not end a
 * connect: before this bound, every fetch that had begun connecting waited
 * out LARDER_UPSTREAM_TIMEOUT (30 s) for it, its readers with it. Two SYN
 * retransmissions (at 1 s and 3 s) fit in it. */
#define PEER_CONNECT_TIMEOUT_MS 3500L
/* How long a transfer from another node may go without a byte, beyond
 * what that node may itself wait for an upstream slot (the key's or the
 * bucket's, LARDER_UPSTREAM_SLOT_WAIT_MS): it streams what S3 sends it,
 * and S3's slowest first byte with its retries is a few seconds. A node
 * that stays listed while it answers nothing (a one-way partition, its S3
 * hanging) is given up on sooner than S3 would be, then gone past for
 * CLUSTER_AVOID_S (cluster_avoid). */
#define PEER_STALL_MS 10000L

/* The stall bound of f's transfer from a peer, in seconds. A node fetching
 * for another (an owner asking a holder) gives up in half the time, so it
 * goes to S3 and answers before the node that asked it gives up on it and
 * takes a healthy node for a silent one. */
static long peer_stall_s(const struct fetch *f)
{
	const struct gw *gw = f->w->gw;
	long ms = (long)gw->cfg->upstream_slot_wait_ms + PEER_STALL_MS;
	if (f->hop > 0)
		ms /= 2;
	long up = (long)upstream_timeout_s(gw->up);
	return ms / 1000 < up ? (ms + 999) / 1000 : up;
}

/* A GET of another node (path style, signed for peers, cluster/peer.h). */
static int prepare_peer(struct fetch *f, const char *peer, struct hdrs *h)
{
	struct gw *gw = f->w->gw;
	bool tls = gw->tls_cert != NULL;
	if (peer_target(peer, tls, f->bucket, f->key, &f->target) != 0)
		return -E2BIG;
	int rc = hdrs_add(h, "Host", buf_cstr(&f->target.host));
	if (!rc && f->pin[0]) /* the owner holds it for the pin too (gateway/pins.h) */
		rc = hdrs_add(h, PIN_HEADER, f->pin);
	rc = rc ? rc : peer_sign(gw->cfg->cluster_secret, gw->cfg->node_id, peer, "GET",
	                         buf_cstr(&f->target.path), ask_hop(f), time(NULL), h);
	struct curl_slist *list = NULL;
	if (!rc && !(list = hdrs_to_curl(h)))
		rc = -ENOMEM;
	rc = rc ? rc : transfer_prepare(&f->x, buf_cstr(&f->target.url), list);
	if (rc)
		return rc;
	upstream_curl_defaults(gw->up, f->x.easy);
	long up_ms = (long)upstream_timeout_s(gw->up) * 1000L;
	curl_easy_setopt(f->x.easy, CURLOPT_CONNECTTIMEOUT_MS,
	                 up_ms < PEER_CONNECT_TIMEOUT_MS ? up_ms : PEER_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(f->x.easy, CURLOPT_LOW_SPEED_TIME, peer_stall_s(f));
	str_copy(f->asked, sizeof f->asked, peer);
	f->asked_seen = clock_mono_s(); /* watched by fetch_progress */
	if (tls) { /* peers are verified, whatever upstream's settings */
		const char *ca = gw->cfg->cluster_ca_file ? gw->cfg->cluster_ca_file
		                                          : gw->cfg->tls_cert;
		curl_easy_setopt(f->x.easy, CURLOPT_SSL_VERIFYPEER, 1L);
		curl_easy_setopt(f->x.easy, CURLOPT_SSL_VERIFYHOST, 2L);
		curl_easy_setopt(f->x.easy, CURLOPT_CAINFO, ca);
		/* That file only: libcurl's built-in CA folder (the system's
		 * CAs) would vouch for a node too. */
		curl_easy_setopt(f->x.easy, CURLOPT_CAPATH, NULL);
	}
	return 0;
}

static int start_transfer(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	f->discard = false;
	f->skip = 0; /* a retry of the chunk asks for its own range */
	f->failed_headers = false;
	f->short_answer = false;
	f->attempt_from = f->c ? part_produced(f) : 0;
	f->changed = false;
	f->err_answer = false;
	f->errbody_cut = false;
	f->errbody_made = false;
	buf_reset(&f->errbody);
	/* In a cluster, a chunk (or an object's metadata) comes from a node
	 * the directory says holds it, else from its owner node, which fetches
	 * it from S3 once for everybody. */
	/* A node that answered nothing lately is gone past (cluster_avoid). */
	char peer[CLUSTER_NAME_MAX];
	double mono = gw->cluster ? clock_mono_s() : 0; /* no clock read per chunk alone */
	f->to_holder = f->holder[0] && !f->holder_failed && f->hop < PEER_MAX_HOP &&
	               !cluster_avoided(gw->cluster, f->holder, mono);
	if (f->to_holder)
		str_copy(peer, sizeof peer, f->holder);
	/* The node that answered the chunk's first read, while it is a
	 * member, rather than the owner (stay_with_source). */
	bool via = !f->to_holder && f->via[0] && cluster_member_tag(gw->cluster, f->via);
	if (via)
		str_copy(peer, sizeof peer, f->via);
	f->to_peer = f->to_holder ||
	             (gw->cluster && f->hop < PEER_MAX_HOP && !f->peer_failed &&
	              (via || cluster_owner(gw->cluster, dir_key_of(f), peer, sizeof peer)) &&
	              !(f->holder_failed && strcmp(peer, f->holder) == 0) &&
	              !cluster_avoided(gw->cluster, peer, mono));
	/* Marked before it asks, so before any request it causes arrives.
	 * Alone, every fetch asks S3: chunks and loads start marked so. */
	if (gw->cluster && f->c)
		atomic_store(&f->c->ask_hop, chunk_ask_hop(f));
	else if (gw->cluster && f->meta_kind)
		meta_set_ask_hop(gw->meta, f->bucket, f->key, ask_hop(f));
	if (f->partner && f->partner->after_partner && !f->to_peer)
		start_partner(f);
	if (f->meta_kind && !f->c && f->to_peer && f->hop > 0) {
		/* Learning for another node's request (a chunk of a version it
		 * knows, asked of this node as the chunk's owner) from a third:
		 * that node, at the last hop, could not ask the chunk's owner
		 * for it and would fetch it from S3; its chunk 0 it holds or
		 * owns. The reader's chunk is asked for only by a meta fetch
		 * that asks S3 or asks for its own reader (learnt_past_chunk0). */
		f->learn_index = 0;
		f->from = 0;
	}
	struct hdrs h;
	hdrs_init(&h);
	char range[CONTENT_RANGE_SIZE];
	range[0] = '\0';
	if (f->meta_kind && !f->c && !f->no_range && f->learn_index == FETCH_LAST_CHUNK)
		snprintf(range, sizeof range, "bytes=-%" PRIu64, chunk_bytes(f));
	else if (f->meta_kind && !f->c && !f->no_range && (!f->whole || f->to_peer))
		range_format(range, obj_chunk_offset(f->learn_index, chunk_bytes(f)) + f->from,
		             obj_chunk_offset(f->learn_index + 1, chunk_bytes(f)) - 1);
	else if (f->meta_kind && !f->c)
		; /* the whole object (an empty one, or for its checksums) */
	else
		range_format(range, f->start + part_produced(f), f->start + part_end(f) - 1);
	int rc = range[0] ? hdrs_add(&h, "Range", range) : 0;
	if (f->whole && f->meta_kind && !f->c)
		rc = rc ? rc : hdrs_add(&h, "x-amz-checksum-mode", "ENABLED");
	if (f->etag[0])
		rc = rc ? rc : hdrs_add(&h, "If-Match", f->etag);
	else if (f->revalidate)
		rc = rc ? rc : hdrs_add(&h, "If-None-Match", f->revalidate);
	struct up_request rq = {
		.method = "GET", .bucket = f->bucket, .key = f->key, .query = "",
		.payload_hash = SV4_EMPTY_SHA256, .headers = &h,
	};
	enum shaper_verdict v = SHAPER_GO;
	if (!rc && !f->to_peer)
		v = shaper_acquire(gw->shaper, &f->slot, f->bucket, f->key, clock_mono_s());
	if (v == SHAPER_WAIT) { /* slot_cb comes back here, told or timed out */
		hdrs_fini(&h);
		ev_timer_set(&f->slot_timer,
		             shaper_wait_left(gw->shaper, &f->slot, clock_mono_s()), 0);
		ev_timer_start(f->w->loop, &f->slot_timer);
		return 0;
	}
	if (!rc && v == SHAPER_TIMEOUT) {
		f->no_slot = true;
		rc = -EBUSY;
	}
	if (!rc)
		rc = f->to_peer ? prepare_peer(f, peer, &h)
		                : upstream_prepare(gw->up, &f->x, &rq, &f->target);
	f->x.peer = f->to_peer; /* counted apart from S3's requests (count_transfer) */
	hdrs_fini(&h);
	return rc ? rc : transfer_submit(&f->x);
}

static struct fetch *meta_start(struct worker *w, const struct fetch_owner_ops *ops, void *owner,
                                unsigned hop, unsigned charge, const char *bucket,
                                const char *key, const char *revalidate, const char *pin,
                                bool whole, uint64_t first_chunk, uint64_t from)
{
	struct fetch *f = fetch_new(w, bucket, key, !ops); /* no reader: a warm job's */
	if (!f)
		return NULL;
	f->charge = charge;
	shaper_slot_tenant(&f->slot, charge);
	str_copy(f->pin, sizeof f->pin, pin ? pin : "");
	f->meta_kind = true;
	f->whole = whole;
	/* In a cluster the first read goes by the object's key to its owner
	 * node (dir_key_of), which is asked for the same chunk
	 * (learnt_past_chunk0); a revalidation there asks for chunk 0, as
	 * before. An index past any object S3 holds (a range from the end of
	 * 64 bits) is not asked. */
	if (!whole && (!w->gw->cluster || !revalidate) &&
	    (first_chunk == FETCH_LAST_CHUNK || first_chunk < MAX_LEARN_INDEX(chunk_bytes(f))))
		f->learn_index = first_chunk;
	/* A first byte deep in that chunk: asked for from there (split_fill). */
	uint64_t cs = chunk_bytes(f);
	if (!whole && f->learn_index == first_chunk && first_chunk != FETCH_LAST_CHUNK &&
	    split_worth(w, bucket, key, from, cs, cs))
		f->from = from;
	f->owner_ops = ops;
	f->owner = owner;
	f->hop = hop;
	/* Written through this node lately, revalidating since the
	 * subscription started again, or for a peer while not hearing
	 * invalidations (a holder may have missed them too): from S3, neither
	 * the owner nor a holder (fetch_written, fetch_resynced). */
	double now = clock_mono_s();
	f->peer_failed = w->gw->cluster && (written_lately(bucket, key, now) ||
	                                    (revalidate && now - atomic_load(&resynced_at) <
	                                                       FETCH_RESYNC_S) ||
	                                    (hop && !cluster_listening(w->gw->cluster)));
	/* Before anything is asked: its answer may be of a version a write
	 * through larder replaces before the answer is heard. */
	f->gen = w->gw->store ? store_next_gen(w->gw->store) : 0;
	if (revalidate && !(f->revalidate = strdup(revalidate))) {
		f->owner = NULL;
		fetch_free(f);
		return NULL;
	}
	if (begin(f) != 0) {
		f->owner = NULL;
		fetch_free(f);
		return NULL;
	}
	return f;
}

struct fetch *fetch_meta_start(struct worker *w, const struct fetch_owner_ops *ops, void *owner,
                               unsigned hop, unsigned charge, const char *bucket,
                               const char *key, const char *revalidate, uint64_t first_chunk,
                               uint64_t from)
{
	return meta_start(w, ops, owner, hop, charge, bucket, key, revalidate, NULL, false,
	                  first_chunk, from);
}

struct fetch *fetch_meta_start_checksums(struct worker *w, const struct fetch_owner_ops *ops,
                                         void *owner, unsigned hop, unsigned charge,
                                         const char *bucket, const char *key,
                                         const char *revalidate)
{
	return meta_start(w, ops, owner, hop, charge, bucket, key, revalidate, NULL, true, 0, 0);
}

struct fetch *fetch_meta_start_job(struct worker *w, const char *bucket, const char *key,
                                   const char *revalidate, const char *pin, bool whole)
{
	return meta_start(w, NULL, NULL, 0, 0, bucket, key, revalidate, pin, whole, 0, 0);
}

static int chunk_start(const struct fetch_producer *p, struct chunk *c, uint64_t index)
{
	struct worker *w = p->w;
	const char *bucket = p->bucket, *key = p->key;
	const struct obj_meta *m = p->meta;
	bool background = p->background;
	char *slot_key = p->slot_key ? strdup(p->slot_key) : NULL;
	struct fetch *f = p->slot_key && !slot_key ? NULL : fetch_new(w, bucket, key, background);
	if (!f) {
		free(slot_key);
		return -ENOMEM;
	}
	aim(f, c, index, m->etag, m->size, index == 0 ? (struct obj_meta *)m : NULL, p->hop,
	    p->charge, p->pin ? p->pin : "");
	f->lm = m->last_modified;
	/* The reader's first byte deep in it: two parts at once (in a
	 * cluster, the head once f's node has f's range: start_partner). */
	struct fetch *h = NULL;
	if (split_worth(w, bucket, key, p->from, c->len, chunk_bytes(f)) &&
	    (h = fetch_new(w, bucket, key, background))) {
		split_fill(f, h, p->from);
		h->after_partner = w->gw->cluster != NULL;
	} else {
		chunk_keep(c);
	}
	if (begin(f) != 0) {
		if (h)
			fetch_free(h);
		fetch_free(f);
		free(slot_key);
		return -EIO;
	}
	if (h && !w->gw->cluster && begin(h) != 0) {
		transfer_stop(&f->x);
		fetch_free(f);
		fetch_free(h);
		free(slot_key);
		return -EIO;
	}
	f->slot_key = slot_key; /* started: the slot is f's until it ends */
	return 0;
}

int fetch_produce(void *arg, struct chunk *c, uint64_t index)
{
	const struct fetch_producer *p = arg;
	return chunk_start(p, c, index) == 0 ? 0 : FETCH_ERR_UPSTREAM;
}

void fetch_disown(struct fetch *f)
{
	f->owner = NULL;
}

/* The chunk is complete: into the tiers, named for the NVMe tier (chunk 0
 * carries the object's metadata, so a restart knows the object). */
static void complete_ok(struct fetch *f)
{
	struct gw *gw = f->w->gw;
	struct buf blob;
	buf_init(&blob, 2 * RESP_HEADERS_MAX);
	/* A reader's copy streamed from the chunk's owner is kept after the
	 * chunks this node owns (store/policy.h: policy_rank). */
	bool as_owner = !f->to_peer || f->to_holder;
	struct chunk_origin o = {
		.bucket = f->bucket, .key = f->key, .etag = f->etag, .index = f->index,
		.charge = f->charge, .copy = !as_owner, .gen = f->gen, /* 0: a chunk fetch's */
	};
	if (f->index == 0 && f->meta && meta_encode(f->meta, &blob) == 0) {
		o.meta = blob.p;
		o.meta_len = blob.len;
	}
	store_complete(gw->store, f->c, true, 0, &o);
	buf_fini(&blob);
	/* If its owner changes or dies, the placement directory will have to
	 * say where it is (cluster/directory.h): fetched as its owner (from S3,
	 * or from a holder), or as a reader's copy from its owner. Chunk 0
	 * goes by its object's metadata key. */
	if (gw->dir) {
		dir_fetched(gw->dir, chunk_id_hash(&f->c->id), f->index == 0 ? dir_key_of(f) : 0,
		            &f->c->id, as_owner,
		            as_owner ? 0 : cluster_member_tag(gw->cluster, buf_cstr(&f->target.host)));
	}
}

/* Whether a meta fetch's 404 says the key is missing, which a negative
 * entry answers (NoSuchKey) for a while; not a missing bucket, whose
 * NoSuchBucket is S3's answer to every read of it. */
static bool no_such_key(const struct fetch *f)
{
	return strstr(buf_cstr(&f->errbody), "<Code>NoSuchKey</Code>") != NULL;
}

/* What of a 404 a remembered one must say too: a key whose newest version
 * is a delete marker is answered with x-amz-delete-marker: true and the
 * marker's version id. Lines for meta_new_negative; "" when none. */
static void negative_headers(const struct hdrs *resp, struct buf *out)
{
	const char *dm = hdrs_get(resp, "x-amz-delete-marker");
	const char *vid = hdrs_get(resp, "x-amz-version-id");
	if (dm && buf_printf(out, "x-amz-delete-marker: %s\n", dm) == 0 && vid)
		buf_printf(out, "x-amz-version-id: %s\n", vid);
}

/*
 * A node asked for a chunk may be learning the chunk's object itself, from
 * another node (the object's owner, often this one) at a hop this request
 * may not wait for (store/object.h: obj_may_wait): it refuses at once with
 * a 503 that says so (PEER_LEARNING_HEADER, gateway/cache.c). Nothing is
 * wrong with it: it knows the object once that answer comes, about one S3
 * first byte later. Fetching the chunk from S3 instead (as before) fetched
 * it twice in the cluster, once here and once by its owner for its own
 * readers (docs/cluster.md, "An object's first read"). So the same node is
 * asked again after a pause (5 ms, doubling to 50 ms), for LEARNING_WAIT_S
 * at most; then S3. Asking again never makes a node wait for another, so no
 * cycle can form: at worst the bound runs out. Returns true when it asks
 * again.
 */
#define LEARNING_WAIT_S 1.0
#define LEARNING_PAUSE_MAX_S 0.05

static bool learning_refusal(struct fetch *f, long status)
{
	if (!f->c || !f->to_peer || f->cancelled || status != 503 ||
	    !transfer_header(&f->x, PEER_LEARNING_HEADER))
		return false;
	double now = clock_mono_s();
	if (!f->learning_since) {
		f->learning_since = now;
		f->learning_pause = 0.005;
		log_info("fetch", "%s/%s chunk %" PRIu64 ": node %s is learning the object; "
		         "asking it again", f->bucket, f->key, f->index, f->asked);
	} else if ((f->learning_pause *= 2) > LEARNING_PAUSE_MAX_S) {
		f->learning_pause = LEARNING_PAUSE_MAX_S;
	}
	if (now + f->learning_pause - f->learning_since > LEARNING_WAIT_S)
		return false;
	transfer_restart_in(&f->x, f->learning_pause);
	return true;
}

/* Upstream's error answer (status 0: none came) to f's owner. A body
 * larder made (errbody_made) goes with headers of its own kind: upstream's
 * Content-* described the body it replaced. */
static void pass_error(struct fetch *f, long status, const struct hdrs *resp)
{
	if (!f->errbody_made) {
		f->owner_ops->upstream_error(f->owner, status, resp, buf_cstr(&f->errbody),
		                             f->errbody.len);
		return;
	}
	struct hdrs h;
	hdrs_init(&h);
	int rc = 0;
	for (size_t i = 0; i < resp->n && !rc; i++)
		if (strncasecmp(resp->v[i].name, "content-", 8) != 0)
			rc = hdrs_add(&h, resp->v[i].name, resp->v[i].value);
	rc = rc ? rc : hdrs_add(&h, "Content-Type", "application/xml");
	f->owner_ops->upstream_error(f->owner, rc ? 0 : status, &h, buf_cstr(&f->errbody),
	                             f->errbody.len);
	hdrs_fini(&h);
}

static void fetch_done(struct transfer *t, void *arg, CURLcode result)
{
	struct fetch *f = arg;
	struct gw *gw = f->w->gw;
	assert(f->magic == FETCH_MAGIC && t == &f->x);
	bool meta_only = f->meta_kind && !f->c;
	long status = t->status;
	shaper_release(gw->shaper, &f->slot, status, clock_mono_s());
	if (f->warm_first) {
		f->warm_first = false;
		warm_first_chunk(f);
	}
	/* A metadata fetch that learnt the object and fills no chunk stopped
	 * its transfer on purpose (on_body): done, not a failure. */
	bool learnt_only = meta_only && f->meta;
	if (meta_only && !f->meta && f->to_peer && !f->to_holder && status == 503 &&
	    f->learn_index != 0) {
		/* The object's owner knows it but neither owns nor holds the
		 * reader's chunk (cache_body.c, produce): learnt from its chunk
		 * 0, as before; the reader then asks the chunk's owner. */
		f->learn_index = 0;
		f->from = 0;
		if (start_transfer(f) == 0)
			return;
	}
	if (learning_refusal(f, status))
		return;
	if (f->to_peer && !f->cancelled && !learnt_only &&
	    (f->changed || result != CURLE_OK || status == 0 || status >= 500 ||
	     status == 401 || status == 403 || f->c) &&
	    !(f->c && part_produced(f) >= part_end(f))) { /* its part of a split chunk */
		/* The node is gone, refused, or broke off: a holder's failure
		 * sends us to the owner, the owner's to S3, from the bytes
		 * already received. So does a node that answered for another
		 * ETag or size: a node honours If-Match (412), so that answer
		 * is the node's fault, not news of a version change; S3 tells.
		 * A node's 412 is not that news either: its metadata may be
		 * the older one (an invalidation on its way), and S3 tells.
		 * And so does any other answer that left the chunk short (a
		 * body that ended cleanly before the range did, a status that
		 * is not 206): asking the same node again would get the same. */
		log_info("fetch", "%s/%s: %s node failed (%ld, %s); fetching from %s", f->bucket,
		         f->key, f->to_holder ? "holder" : "owner", status,
		         f->changed ? "answered for another ETag or size"
		         : result != CURLE_OK ? transfer_strerror(t, result)
		         : status >= 300 ? "answered with no bytes" : "left the chunk short",
		         f->to_holder ? "its owner" : "S3");
		if (tls_refused(result))
			warn_peer_tls(t, result);
		/* No connection, or no byte for the stall timeout: the next
		 * fetches go past it for a while rather than wait again. */
		if ((result == CURLE_OPERATION_TIMEDOUT || result == CURLE_COULDNT_CONNECT) &&
		    cluster_avoid(gw->cluster, f->asked, clock_mono_s()))
			log_warn("fetch", "node %s answered nothing (%s): fetches go past it "
			         "for %.0f s", f->asked, transfer_strerror(t, result),
			         CLUSTER_AVOID_S);
		if (f->to_holder)
			f->holder_failed = true;
		else
			f->peer_failed = true;
		if (start_transfer(f) == 0)
			return;
	}

	if (meta_only && !f->meta && f->relearn) {
		/* Revalidated, but the object is another one: learn it whole
		 * again (its chunks, named by the same ETag, stay). */
		f->relearn = false;
		free(f->revalidate);
		f->revalidate = NULL;
		if (start_transfer(f) == 0)
			return;
		meta_publish(gw->meta, f->bucket, f->key, NULL);
		fetch_free(f);
		return;
	}
	if (meta_only && !f->meta && status == 416 && f->from) {
		/* Nothing from the reader's first byte on: the chunk whole, whose
		 * answer says what the object is (416 again: as below). */
		f->from = 0;
		if (start_transfer(f) == 0)
			return;
	}
	if (meta_only && !f->meta && status == 416 && f->learn_index &&
	    f->learn_index != FETCH_LAST_CHUNK) {
		/* The reader's first chunk is past the object's end (its range
		 * is not satisfiable, or the object shrank): learn it from
		 * chunk 0, as any other read. A suffix's 416 is an empty
		 * object's, as chunk 0's is (below). */
		f->learn_index = 0;
		if (start_transfer(f) == 0)
			return;
	}
	if (meta_only && !f->meta && status == 416 && !f->no_range) {
		/* No byte 0: an empty object (or one that just became empty).
		 * Ask for it whole to learn its ETag and headers. */
		f->no_range = true;
		if (start_transfer(f) == 0)
			return;
	}
	if (meta_only && !f->meta && f->uncacheable) {
		if (f->owner)
			f->owner_ops->pass_through(f->owner);
		meta_publish_failure(gw->meta, f->bucket, f->key, META_NOT_CACHEABLE, clock_mono_s());
		fetch_free(f);
		return;
	}
	if (meta_only && !f->meta && f->err_answer && !f->to_peer &&
	    (result != CURLE_OK || f->errbody_cut)) {
		/* An error answer whose body was cut at the bound, or ended
		 * before its length: the answer all the same, with a whole
		 * document made from what came of it. */
		struct buf doc;
		buf_init(&doc, ERRBODY_MAX);
		if (s3err_upstream_xml(status, buf_cstr(&f->errbody), f->errbody.len,
		                       transfer_header(t, "x-amz-request-id"), &doc) == 0) {
			buf_reset(&f->errbody);
			buf_append(&f->errbody, doc.p, doc.len);
			f->errbody_made = true;
		}
		buf_fini(&doc);
		log_info("fetch", "%s/%s: upstream's %ld answer had a body larder did not read whole "
		         "(%s)", f->bucket, f->key, status,
		         f->errbody_cut ? "past its bound" : transfer_strerror(t, result));
		result = CURLE_OK;
	}
	if (meta_only && !f->meta) {
		/* Never learnt the object: a 5xx is retried; anything else is
		 * upstream's answer for the owner (a 404, a 403, ...). */
		if ((upstream_retryable(status) || result != CURLE_OK) && status != 304 &&
		    !f->failed_headers && schedule_retry(f, result))
			return;
		if (status == 404 && gw->cfg->negative_ttl_s > 0 && no_such_key(f)) {
			struct buf lines;
			buf_init(&lines, 4096);
			negative_headers(&t->resp, &lines);
			struct obj_meta *neg = meta_new_negative(buf_cstr(&lines), clock_mono_s());
			buf_fini(&lines);
			if (neg) {
				meta_publish(gw->meta, f->bucket, f->key, neg);
				meta_unref(neg);
			}
		} else if (status != 304) {
			bool shared = (upstream_retryable(status) || result != CURLE_OK) &&
			              !f->failed_headers;
			/* An exchange that broke off (inside the headers, say) is
			 * no answer to pass on, whatever its status line said. */
			if (f->owner)
				pass_error(f, result == CURLE_OK ? status : 0, &t->resp);
			if (shared) { /* its waiters fail too, rather than each try again */
				log_warn("fetch", "%s/%s: could not learn it upstream: status %ld, %s",
				         f->bucket, f->key, status, why_failed(f, result));
				meta_publish_failure(gw->meta, f->bucket, f->key, status, clock_mono_s());
			}
			else
				meta_publish(gw->meta, f->bucket, f->key, NULL);
		}
		fetch_free(f);
		return;
	}
	if (!f->c) { /* learnt, chunk 0 is someone else's (or the object is empty) */
		fetch_free(f);
		return;
	}
	/* What is still in the producer's copy goes to readers now; a flush
	 * the arena refused leaves the chunk short, failed as one that found
	 * no memory. */
	if (chunk_flush(f->c) != 0)
		f->no_memory = true;
	size_t filled = chunk_filled(f->c);
	if (f->partner && part_produced(f) >= part_end(f)) {
		/* Its part is in: the other part's fetch, whose answer ends
		 * later, completes the chunk, even if its bytes are all in
		 * already (filled == len): only the last to end may. */
	} else if (filled == f->c->len) {
		complete_ok(f);
	} else if (status == 412 || status == 404 || f->changed) {
		/* 404: the object was deleted since it was learnt. Its readers
		 * learn it again (and answer 404 as S3 now does). */
		log_info("fetch", "%s/%s changed upstream (%ld%s, asked If-Match %s)", f->bucket,
		         f->key, status, f->changed ? ": an answer for another ETag or size" : "",
		         f->etag);
		if (status != 404) /* or only its ETag moved: told when it is learnt again */
			fetch_unsteady_moved(f->bucket, f->key, f->etag, f->size, f->lm,
			                     clock_mono_s());
		fetch_changed(gw, f->bucket, f->key, false);
		fail_chunk(f, FETCH_ERR_CHANGED);
	} else if (f->cancelled) {
		fail_chunk(f, FETCH_ERR_CANCELLED);
	} else if (f->no_memory) {
		log_warn("fetch", "%s/%s chunk %" PRIu64 ": no memory for its bytes", f->bucket,
		         f->key, f->index);
		fail_chunk(f, FETCH_ERR_SLOWDOWN);
	} else if (f->short_answer && result == CURLE_OK && part_produced(f) > f->attempt_from &&
	           start_transfer(f) == 0) {
		return; /* a short answer that was all there: the rest, asked for at once */
	} else if (!f->failed_headers && schedule_retry(f, result)) {
		return; /* resumes from the bytes its part has */
	} else {
		log_warn("fetch", "%s/%s chunk %" PRIu64 " failed: status %ld, %s", f->bucket, f->key,
		         f->index, status, transfer_strerror(t, result));
		fail_chunk(f, f->no_slot ? FETCH_ERR_SLOWDOWN : FETCH_ERR_UPSTREAM);
	}
	fetch_free(f);
}

static int fetch_restart(struct transfer *t, void *arg)
{
	struct fetch *f = arg;
	assert(f->magic == FETCH_MAGIC && t == &f->x);
	return start_transfer(f);
}

static const struct transfer_ops fetch_ops = {
	.headers = on_headers,
	.body = on_body,
	.progress = fetch_progress,
	.restart = fetch_restart,
	.done = fetch_done,
};

void fetch_abort_all(struct worker *w)
{
	while (!list_empty(&w->fetches)) {
		struct fetch *f = list_item(w->fetches.first, struct fetch, link);
		transfer_stop(&f->x);
		if (f->c && atomic_load(&f->c->state) == CHUNK_FILLING)
			store_complete(w->gw->store, f->c, false, FETCH_ERR_CANCELLED, NULL);
		if (f->meta_kind && !f->meta && !f->c)
			meta_publish(w->gw->meta, f->bucket, f->key, NULL);
		fetch_free(f);
	}
}
