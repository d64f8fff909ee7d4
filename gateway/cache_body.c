/*
 * cache_body.c - the body of a cached read: chunk after chunk, each from
 * RAM, from NVMe through the store's I/O threads, or from upstream (a chunk
 * fetch, joined by every other reader of it: coalescing), with the next
 * chunks fetched ahead as the client shows it reads. Bytes go to the
 * client as they arrive. See cache.c for the request's other steps.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "cluster/cluster.h"
#include "gateway/cread.h"
#include "gateway/fetch.h"
#include "gateway/limits.h"
#include "gateway/pins.h"
#include "gateway/req.h"
#include "store/object.h"
#include "store/store.h"

uint64_t cread_chunk_bytes(const struct req *r)
{
	return req_gw(r)->objects.chunk_bytes;
}

/* The version this request reads. */
static struct obj_ref obj_of(const struct req *r)
{
	return (struct obj_ref){ req_bucket(r), req_key(r), req_cread(r)->meta };
}

/* Whether every chunk of [start, end] is held (RAM or NVMe): a hit. */
bool cread_all_held(struct req *r, const struct obj_meta *m)
{
	if (req_cread(r)->head || m->size == 0)
		return true;
	struct obj_ref ref = obj_of(r);
	uint64_t first, last;
	uint64_t cs = cread_chunk_bytes(r);
	if (!obj_chunk_span(m->size, cs, req_cread(r)->start, req_cread(r)->end, &first, &last))
		return true;
	for (uint64_t i = first; i <= last; i++) {
		struct chunk_id id;
		obj_chunk_id(&ref, i, &id);
		if (!store_holds(req_gw(r)->store, &id))
			return false;
	}
	return true;
}

/* Whether chunk i, found failed, may be fetched again: three times per
 * chunk (not per response, so a read meeting many corrupt NVMe entries
 * is not cut short). */
bool cread_refetch_allowed(struct cread *c, uint64_t i)
{
	if (c->refetch_index != i + 1) {
		c->refetch_index = i + 1;
		c->refetches = 0;
	}
	return c->refetches++ < 3;
}

static struct chunk *get_chunk(struct req *r, uint64_t i, bool now);

/* The chunks an iovec response points into, released when MHD is done. */
#define IOV_HOLD_MAGIC 0x696f7668u /* "iovh" */
struct iov_hold {
	unsigned magic;
	unsigned n;
	struct chunk *c[];
};

static void iov_done(void *cls)
{
	struct iov_hold *h = cls;
	assert(h->magic == IOV_HOLD_MAGIC);
	for (unsigned k = 0; k < h->n; k++)
		obj_unwant(h->c[k], false);
	h->magic = 0;
	free(h);
}

bool cread_small(const struct req *r)
{
	const struct cread *c = req_cread(r);
	uint64_t cs = cread_chunk_bytes(r);
	return !req_shaped(r) && c->end - c->start < BODY_BLOCK &&
	       obj_chunk_index(c->start, cs) == obj_chunk_index(c->end, cs);
}

/* Another want of chunk i when this reader holds it already (its current
 * chunk or one read ahead), else a new acquire. Acquiring it again would
 * count a second lookup in the store's hits and coalesced waiters, and
 * touch it twice in the tier's policy, for one read. */
static struct chunk *want_chunk(struct req *r, uint64_t i)
{
	struct cread *c = req_cread(r);
	struct chunk *held = c->cur && c->cur_index == i ? c->cur : NULL;
	for (unsigned k = 0; k < READAHEAD_MAX && !held; k++)
		if (c->ahead[k] && c->ahead_index[k] == i)
			held = c->ahead[k];
	if (!held)
		return get_chunk(r, i, false);
	obj_want(held);
	return held;
}

/* A range within one chunk whose bytes are in the arena goes out with
 * sendfile from it (libmicrohttpd's fd response, on a dup of the arena's
 * fd, which it closes). Such a response has no callback for its end: the
 * chunk stays wanted as the reader's current chunk (c->cur) until the
 * request ends (cache_end), which keeps its range from being punched out
 * while sendfile reads it. */
static struct MHD_Response *from_arena(struct req *r, struct chunk *ch, uint64_t len, uint64_t from)
{
	assert(req_cread(r)->cur == ch);
	uint64_t off;
	int fd = chunk_fd(ch, &off);
	int dfd = fd >= 0 ? dup(fd) : -1;
	struct MHD_Response *resp =
		dfd >= 0 ? MHD_create_response_from_fd_at_offset64(len, dfd, off + from) : NULL;
	if (!resp && dfd >= 0)
		close(dfd);
	return resp;
}

/* A chunk in the arena is read through its mapping (chunk_map) from its
 * third hit on. Mapping its pages in costs this VM about two copies of
 * them, so a chunk hit once or twice before it is evicted (a job whose
 * dataset is larger than the RAM tier) would pay for nothing; one hit
 * often pays it back (docs/benchmarks.md, "Large hits from the arena"). */
#define MAP_FROM_HIT 3

/* ch's bytes in memory for an iovec, or NULL (not yet: see above). */
static const char *bytes_of(struct chunk *ch)
{
	if (!chunk_in_arena(ch))
		return ch->data;
	if (atomic_load_explicit(&ch->hits, memory_order_relaxed) < MAP_FROM_HIT)
		return NULL;
	return chunk_map(ch);
}

/* Where the callback copies a filled arena chunk from: its mapping when it
 * is mapped (bytes_of) or when several readers want it at once (a storm:
 * each of them copies all of it, and a copy from the mapping costs about
 * half of a pread here), else NULL: pread (chunk_read). */
static const char *copy_source(struct chunk *ch)
{
	const char *bytes = bytes_of(ch);
	if (!bytes && atomic_load_explicit(&ch->wants, memory_order_relaxed) >= MAP_FROM_HIT)
		bytes = chunk_map(ch);
	return bytes;
}

/* The range goes out without a copy in user space: an iovec over the
 * chunks' bytes (on the heap, or mapped from the arena: bytes_of), which
 * MHD writes with sendmsg, or within one arena chunk not mapped yet with
 * sendfile (from_arena). A chunk may still be filling past the range (the
 * bytes a reader has seen never change); it is on its way from upstream,
 * so the answer is a miss. NULL when it cannot: the reader callback
 * (cread_read) copies the bytes instead. */
struct MHD_Response *cread_zero_copy(struct req *r)
{
	struct cread *c = req_cread(r);
	uint64_t cs = cread_chunk_bytes(r), first, last;
	if (req_shaped(r) || !obj_chunk_span(c->meta->size, cs, c->start, c->end, &first, &last) ||
	    last - first >= 4096)
		return NULL;
	unsigned n = (unsigned)(last - first + 1);
	struct iov_hold *h = malloc(sizeof *h + n * sizeof h->c[0]);
	struct MHD_IoVec *iov = calloc(n, sizeof *iov);
	if (!h || !iov) {
		free(h);
		free(iov);
		return NULL;
	}
	h->magic = IOV_HOLD_MAGIC;
	h->n = 0;
	bool ok = true, whole = true;
	for (uint64_t i = first; i <= last && ok; i++) {
		struct chunk *ch = want_chunk(r, i);
		if (!ch)
			break;
		h->c[h->n++] = ch;
		uint64_t from = i == first ? c->start - obj_chunk_offset(i, cs) : 0;
		uint64_t to = i == last ? c->end - obj_chunk_offset(i, cs) + 1 : ch->len;
		const char *bytes = bytes_of(ch);
		/* Several chunks, one of them not mapped: the callback. The
		 * loop stops there, at the first (c->cur) unless earlier ones
		 * were mapped, so a chunk's lookup is seldom counted twice. */
		ok = atomic_load(&ch->state) != CHUNK_FAILED && chunk_readable(ch, from) >= to &&
		     (bytes || n == 1);
		whole = whole && chunk_filled(ch) == ch->len;
		iov[i - first].iov_base = bytes ? (void *)(uintptr_t)(bytes + from) : NULL;
		iov[i - first].iov_len = (size_t)(to - from);
	}
	struct MHD_Response *resp = NULL;
	if (ok && h->n == n && !iov[0].iov_base) { /* one arena chunk, not mapped */
		resp = from_arena(r, h->c[0], iov[0].iov_len, c->start - obj_chunk_offset(first, cs));
		iov_done(h); /* the chunk is still wanted as c->cur */
	} else if (ok && h->n == n) {
		resp = MHD_create_response_from_iovec(iov, n, iov_done, h); /* h is its */
		if (!resp)
			iov_done(h);
	} else {
		iov_done(h);
	}
	free(iov);
	if (!resp)
		return NULL;
	req_count_out(r, c->end - c->start + 1);
	if (!whole)
		c->miss = true;
	return resp;
}

/* Lets go of the chunks held, saying whether this reader gave up on them. */
void cread_release_as(struct req *r, bool gave_up)
{
	struct cread *c = req_cread(r);
	if (c->cur)
		obj_unwant(c->cur, gave_up);
	c->cur = NULL;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k]) {
			obj_unwant(c->ahead[k], gave_up);
			c->ahead[k] = NULL;
		}
}

void cread_release(struct req *r)
{
	cread_release_as(r, false);
}

bool cread_over_budget(const struct req *r, uint64_t extra)
{
	return fetch_memory_over(req_gw(r), extra);
}

/* obj_produce_fn of a reader: a chunk fetch, unless chunk memory is at its
 * bound before the reader answered. now: the chunk the reader is at (not
 * one read ahead). */
struct producing {
	struct req *r;
	bool now;
	bool declined;
};

static int produce(void *arg, struct chunk *ch, uint64_t i)
{
	struct producing *p = arg;
	struct req *r = p->r;
	/* Another node learning the object (no If-Match) asked this one, its
	 * owner, for a chunk past 0 (fetch.c, learnt_past_chunk0) that this
	 * one knows is another node's and does not hold. Fetched from here it
	 * would be asked of that node at the last hop, which neither looks in
	 * the directory (a holder after ownership moved) nor waits for the
	 * asker, if it is the asker. Declined (503 SlowDown at once): the
	 * asker learns the object from chunk 0 here, as before, and asks the
	 * chunk's owner itself. */
	struct gw *gw = req_gw(r);
	if (p->now && i > 0 && req_peer_hop(r) > 0 && gw->cluster && !req_header(r, "If-Match") &&
	    cluster_owner(gw->cluster, chunk_id_hash(&ch->id), NULL, 0)) {
		p->declined = true;
		return FETCH_ERR_CANCELLED;
	}
	/* A fetch goes to the origin: before the answer it takes the key's
	 * upstream slot (max_upstream_requests), waiting for one (503 SlowDown
	 * when none came in time); a reader halfway through its answer takes
	 * one if it can. A read-ahead takes a slot of its own for the fetch's
	 * life when the key has a limit, and is not started without one: the
	 * reader's slot would let one capped reader hold 1 + LARDER_READAHEAD
	 * of its prefix's S3 window (audit round 9); without a limit it takes
	 * the reader's if it can. */
	bool before = !req_responded(r);
	const char *slot_key = NULL;
	if (before && cread_over_budget(r, 0)) {
		p->declined = true;
		return FETCH_ERR_CANCELLED;
	}
	if (!p->now && req_upstream_capped(r)) {
		if (!(slot_key = req_upstream_ahead(r))) {
			p->declined = true;
			return FETCH_ERR_CANCELLED;
		}
	} else if (before && !(p->now ? req_upstream_wait(r) : req_upstream_try(r))) {
		p->declined = true;
		return FETCH_ERR_CANCELLED;
	} else if (!before) {
		req_upstream_try(r);
	}
	/* The reader's position, when in this chunk: bytes deep in it are not
	 * kept waiting for the chunk's start (fetch.h). */
	struct cread *c = req_cread(r);
	uint64_t cs = cread_chunk_bytes(r), at = obj_chunk_offset(i, cs);
	uint64_t from = p->now && c->pos > at && obj_chunk_index(c->pos, cs) == i ? c->pos - at : 0;
	struct fetch_producer fp = { req_worker(r), req_bucket(r), req_key(r), c->meta,
	                             req_peer_hop(r), NULL, false, req_charge(r), from, slot_key };
	c->miss = true;
	int rc = fetch_produce(&fp, ch, i);
	if (rc && slot_key)
		limits_upstream_give(slot_key);
	return rc;
}

/* A want of chunk i of the object, fetching it if nobody has it.
 * NULL also when a fetch would pass the memory bound before this reader
 * answered (c->busy: it gets 503 SlowDown); a reader halfway through its
 * response still gets its next chunk, one per connection. And NULL (busy)
 * for a request from another node when the chunk's producer asks a node at
 * a hop it may not wait for (obj_may_wait): the asker falls back at once. */
static struct chunk *get_chunk(struct req *r, uint64_t i, bool now)
{
	struct obj_ref ref = obj_of(r);
	struct producing p = { r, now, false };
	enum store_role role;
	struct chunk *ch = obj_acquire(&req_gw(r)->objects, &ref, i, req_charge(r), produce, &p,
	                               &role);
	if (ch && role == STORE_WAIT && !obj_may_wait(req_peer_hop(r), atomic_load(&ch->ask_hop)))
		p.declined = true;
	if (ch && p.declined) {
		obj_unwant(ch, false);
		if (now) /* a read-ahead declined changes nothing of the answer */
			req_cread(r)->busy = true;
		return NULL;
	}
	if (ch && now) /* held, or fetched by another reader: no slot needed now */
		req_upstream_unwait(r);
	if (ch && req_peer_hop(r) > 0 && /* a pinned job's fetch from another node: pin it here */
	    pins_hold_peer(req_gw(r)->pins, req_bucket(r), MHD_lookup_connection_value(
	                   req_connection(r), MHD_HEADER_KIND, PIN_HEADER), &ch->id, ch->len))
		pins_keep_on_nvme(req_gw(r)->store, &ref, i, ch);
	return ch;
}

/* Bytes handed to the kernel for this client that it has not taken yet
 * (the socket's send queue: several MiB that a client that stopped reading
 * still seems to have taken). 0 when unknown. */
static uint64_t unsent_bytes(const struct req *r)
{
#ifdef SIOCOUTQ
	struct MHD_Connection *conn = req_connection(r);
	const union MHD_ConnectionInfo *ci =
		conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD) : NULL;
	int queued = 0;
	if (ci && ioctl(ci->connect_fd, SIOCOUTQ, &queued) == 0 && queued > 0)
		return (uint64_t)queued;
#else
	(void)r;
#endif
	return 0;
}

/* How many chunks to keep ahead of the client: as many as it has shown it
 * reads. One at first, one more for every 1/(4 x LARDER_READAHEAD) of a
 * chunk its client took (bytes sent minus the socket's send queue and
 * libmicrohttpd's buffer), so a client that reads has the whole read-ahead
 * once it took a quarter chunk (what readahead 8 bought for a cold shard
 * is kept: a window that grew per whole chunk cost a 64 MiB read 20%), and
 * one that stops holds two chunks, not 1 + LARDER_READAHEAD. */
static unsigned ahead_wanted(const struct req *r)
{
	const struct cread *c = req_cread(r);
	unsigned n = req_gw(r)->cfg->readahead_chunks;
	if (n > READAHEAD_MAX)
		n = READAHEAD_MAX;
	if (c->window >= n)
		return n; /* it never shrinks: no need to ask the kernel */
	uint64_t sent = c->pos - c->start, unsent = unsent_bytes(r) + BODY_BLOCK;
	uint64_t taken = sent > unsent ? sent - unsent : 0;
	uint64_t step = cread_chunk_bytes(r) / (4 * (n ? n : 1));
	uint64_t want = 1 + taken / (step ? step : 1);
	return want < n ? (unsigned)want : n;
}

/* Keeps the next chunks of the range in flight (bounded, in parallel), so
 * one client reading a large object gets several upstream connections:
 * n of them (ahead_wanted, which the caller asked once). None is started
 * while chunk memory is at its bound: it is fetched when the reader gets
 * there. */
static void read_ahead(struct req *r, uint64_t i, unsigned n)
{
	struct cread *c = req_cread(r);
	uint64_t cs = cread_chunk_bytes(r), last = obj_chunk_index(c->end, cs);
	c->window = n;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k] && (c->ahead_index[k] <= i || c->ahead_index[k] > i + n)) {
			obj_unwant(c->ahead[k], false);
			c->ahead[k] = NULL;
		}
	for (uint64_t j = i + 1; j <= last && j <= i + n; j++) {
		unsigned free_slot = READAHEAD_MAX;
		bool have = false;
		for (unsigned k = 0; k < READAHEAD_MAX; k++) {
			if (c->ahead[k] && c->ahead_index[k] == j)
				have = true;
			else if (!c->ahead[k] && free_slot == READAHEAD_MAX)
				free_slot = k;
		}
		if (have || free_slot == READAHEAD_MAX)
			continue;
		if (cread_over_budget(r, cs))
			break;
		c->ahead[free_slot] = get_chunk(r, j, false);
		c->ahead_index[free_slot] = j;
	}
}

/* Whether chunk i holds the end of the range: nothing to read ahead, and
 * no need to ask the kernel how much the client took (most hits). */
static bool last_of_range(const struct req *r, uint64_t i)
{
	return obj_chunk_index(req_cread(r)->end, cread_chunk_bytes(r)) <= i;
}

/* Moves the reader to chunk i, taking it from the read-ahead if there. */
struct chunk *cread_chunk_for(struct req *r, uint64_t i)
{
	struct cread *c = req_cread(r);
	if (c->cur && c->cur_index == i) {
		/* Handed over by the fetch that learnt the object: start the
		 * read-ahead now; widen it as the client reads. */
		if (!c->head && !last_of_range(r, i)) {
			unsigned n = ahead_wanted(r); /* one SIOCOUTQ per body block at most */
			if (c->ahead_from != i + 1 || n > c->window) {
				c->ahead_from = i + 1;
				read_ahead(r, i, n);
			}
		}
		return c->cur;
	}
	if (c->cur)
		obj_unwant(c->cur, false); /* read through: done with it */
	c->cur = NULL;
	for (unsigned k = 0; k < READAHEAD_MAX; k++)
		if (c->ahead[k] && c->ahead_index[k] == i) {
			c->cur = c->ahead[k];
			c->ahead[k] = NULL;
		}
	if (!c->cur)
		c->cur = get_chunk(r, i, true);
	c->cur_index = i;
	if (c->cur && !c->head && !last_of_range(r, i)) {
		c->ahead_from = i + 1;
		read_ahead(r, i, ahead_wanted(r));
	}
	return c->cur;
}

/* Ends r's body short, for why (the access log's error). */
static ssize_t cut(struct req *r, const char *why)
{
	req_cut(r, why);
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

ssize_t cread_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct req *r = cls;
	assert(req_valid(r));
	struct cread *c = req_cread(r);
	(void)pos;
	if (req_gone(r))
		return cut(r, "client-gone");
	if (c->head || req_status_sent(r) == 304 || !c->meta || c->meta->size == 0 || c->pos > c->end)
		return MHD_CONTENT_READER_END_OF_STREAM;
	uint64_t cs = cread_chunk_bytes(r);
	for (;;) {
		uint64_t i = obj_chunk_index(c->pos, cs);
		struct chunk *ch = cread_chunk_for(r, i);
		if (!ch)
			return cut(r, "cache-error");
		uint64_t off = c->pos - obj_chunk_offset(i, cs);
		size_t seen = chunk_progress(ch); /* before the bytes are looked at */
		size_t readable = chunk_readable(ch, (size_t)off);
		if (off < readable) {
			uint64_t n = readable - off;
			if (n > max)
				n = max;
			if (n > c->end + 1 - c->pos)
				n = c->end + 1 - c->pos;
			if (!(n = req_shape(r, (size_t)n)))
				return 0; /* the key's max_bytes_per_second: wait for tokens */
			const char *bytes = chunk_filled(ch) == ch->len ? copy_source(ch) : NULL;
			if (bytes)
				memcpy(out, bytes + off, (size_t)n);
			else if (chunk_read(ch, (size_t)off, out, (size_t)n) != 0)
				return cut(r, "cache-error");
			c->pos += n;
			req_count_out(r, n);
			return (ssize_t)n;
		}
		int state = atomic_load(&ch->state);
		if (state == CHUNK_FAILED) {
			/* A reader of a failed chunk may fetch it again (a cancelled
			 * fetch, or a corrupt NVMe entry); a version change or an
			 * upstream that keeps failing ends this response: the client
			 * sees a short body, never other bytes. */
			if (ch->fail_reason == FETCH_ERR_CHANGED)
				return cut(r, "object-changed");
			if (ch->fail_reason == FETCH_ERR_UPSTREAM || !cread_refetch_allowed(c, i))
				return cut(r, "upstream-error");
			obj_unwant(c->cur, false);
			c->cur = NULL;
			continue;
		}
		if (state == CHUNK_READY) /* cannot be short of its length */
			return cut(r, "cache-error");
		c->wait_chunk = ch;
		c->chunk_waiting = true;
		chunk_wait(ch, &c->waiter, seen);
		req_suspend(r);
		return 0;
	}
}

