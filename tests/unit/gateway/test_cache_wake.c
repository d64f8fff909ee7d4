/*
 * test_cache_wake.c - the worker's wake list of cached reads (gateway/cache.c:
 * waiter_wake queues a reader from any thread, cache_wake_cb resumes the
 * queued ones on the worker's loop).
 *
 * cache.c is compiled in with stand-ins for the request (struct req is
 * this file's), the body half (cread_*) and the fetches; chunks and
 * their waiter lists are the real store/chunk.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/cache.h"
#include "gateway/cread.h"
#include "cluster/cluster.h"
#include "gateway/fetch.h"
#include "gateway/listcache.h"
#include "gateway/lookahead.h"
#include "gateway/pins.h"
#include "gateway/passthrough.h"
#include "gateway/req.h"
#include "gateway/server.h"
#include "store/chunk.h"

/* ---- stand-ins ------------------------------------------------------------ */

struct req {
	struct cread c;
	struct worker *w;
	bool suspended;
	int wakes;                  /* req_wake calls that resumed it */
	void (*on_wake)(struct req *r);
};

static struct gw the_gw;

struct cread *req_cread(const struct req *r) { return (struct cread *)&r->c; }
struct worker *req_worker(const struct req *r) { return r->w; }
struct gw *req_gw(const struct req *r) { (void)r; return &the_gw; }
bool req_valid(const struct req *r) { return r != NULL; }
bool req_alive(const struct req *r) { return r != NULL; }
bool req_failed(const struct req *r) { (void)r; return false; }
void req_suspend(struct req *r) { r->suspended = true; }

void req_wake(struct req *r)
{
	if (!r->suspended)
		return;
	r->suspended = false;
	r->wakes++;
	if (r->on_wake)
		r->on_wake(r);
}

void req_add_common_headers(struct req *r, struct MHD_Response *resp) { (void)r; (void)resp; }
void req_add_response_header(struct MHD_Response *resp, const char *name, const char *value)
{
	(void)resp; (void)name; (void)value;
}
const char *req_bucket(const struct req *r) { (void)r; return "b"; }
unsigned req_charge(const struct req *r) { (void)r; return 0; }
struct MHD_Connection *req_connection(const struct req *r) { (void)r; return NULL; }
void req_err_element(struct req *r, const char *n, const char *t) { (void)r; (void)n; (void)t; }
void req_err_object_size(struct req *r, uint64_t size) { (void)r; (void)size; }
void req_err_headers(struct req *r, const char *lines) { (void)r; (void)lines; }
void req_add_header_lines(struct MHD_Response *resp, const char *lines, const char *const *names,
                          size_t n, bool only)
{
	(void)resp; (void)lines; (void)names; (void)n; (void)only;
}
void req_fail(struct req *r, enum s3err e, const char *msg) { (void)r; (void)e; (void)msg; }
bool req_has_body(const struct req *r) { (void)r; return false; }
const char *req_header(struct req *r, const char *name) { (void)r; (void)name; return NULL; }
bool req_repeats_read_header(const struct req *r) { (void)r; return false; }
const char *req_id(const struct req *r) { (void)r; return "id"; }
const char *req_key(const struct req *r) { (void)r; return "k"; }
const char *req_method(const struct req *r) { (void)r; return "GET"; }
unsigned req_peer_hop(const struct req *r) { (void)r; return 0; }
const char *req_query(const struct req *r) { (void)r; return ""; }
bool req_presigned(const struct req *r) { (void)r; return false; }
enum MHD_Result req_queue_response(struct req *r, unsigned status, struct MHD_Response *resp)
{
	(void)r; (void)status; (void)resp;
	return MHD_NO;
}
void req_ref(struct req *r) { (void)r; }
enum MHD_Result req_respond_error(struct req *r) { (void)r; return MHD_NO; }
bool req_responded(const struct req *r) { (void)r; return false; }
const struct s3req *req_s3(const struct req *r) { (void)r; return NULL; }
void req_set_cread(struct req *r, struct cread *c) { (void)r; (void)c; }
void req_set_upstream_status(struct req *r, long s) { (void)r; (void)s; }
void req_telling_others(struct req *r, uint64_t t) { (void)r; (void)t; }
int req_status_sent(const struct req *r) { (void)r; return 0; }
void req_unref(struct req *r) { (void)r; }
const struct hdrs *req_upstream_headers(const struct req *r) { (void)r; return NULL; }
uint64_t req_upstream_length(const struct req *r) { (void)r; return 0; }
long req_upstream_status(const struct req *r) { (void)r; return 0; }
bool req_barrier_lapsed(const struct req *r) { (void)r; return false; }
bool req_upstream_wait(struct req *r) { (void)r; return false; }
bool req_upstream_waits(const struct req *r) { (void)r; return false; }
void req_upstream_unwait(struct req *r) { (void)r; }
void req_count_out(struct req *r, uint64_t n) { (void)r; (void)n; }
unsigned pass_query_header(struct req *r, const char *name, struct buf *value)
{
	(void)r;
	(void)name;
	(void)value;
	return 0;
}

uint64_t cread_chunk_bytes(const struct req *r) { (void)r; return 1; }
bool cread_all_held(struct req *r, const struct obj_meta *m) { (void)r; (void)m; return false; }
bool cread_refetch_allowed(struct cread *c, uint64_t i) { (void)c; (void)i; return false; }
bool cread_over_budget(const struct req *r, uint64_t extra) { (void)r; (void)extra; return true; }
struct chunk *cread_chunk_for(struct req *r, uint64_t i) { (void)r; (void)i; return NULL; }
struct MHD_Response *cread_zero_copy(struct req *r) { (void)r; return NULL; }
bool cread_small(const struct req *r) { (void)r; return false; }
ssize_t cread_read(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)cls; (void)pos; (void)out; (void)max;
	return 0;
}
void cread_release_as(struct req *r, bool gave_up) { (void)r; (void)gave_up; }
void cread_release(struct req *r) { (void)r; }

void fetch_disown(struct fetch *f) { (void)f; }
void fetch_written(const char *bucket, const char *key, double now)
{
	(void)bucket; (void)key;
}
void fetch_changed(struct gw *gw, const char *bucket, const char *key, bool dropped)
{
	(void)gw; (void)bucket; (void)key; (void)dropped;
}
bool fetch_unsteady(const char *bucket, const char *key)
{
	(void)bucket; (void)key;
	return false;
}
struct fetch *fetch_meta_start(struct worker *w, const struct fetch_owner_ops *ops, void *owner,
                               unsigned hop, unsigned charge, const char *bucket,
                               const char *key, const char *revalidate, uint64_t first_chunk,
                               uint64_t from)
{
	(void)w; (void)ops; (void)owner; (void)hop; (void)charge; (void)bucket; (void)key;
	(void)revalidate; (void)first_chunk; (void)from;
	return NULL;
}
struct fetch *fetch_meta_start_checksums(struct worker *w, const struct fetch_owner_ops *ops,
                                         void *owner, unsigned hop, unsigned charge,
                                         const char *bucket, const char *key,
                                         const char *revalidate)
{
	return fetch_meta_start(w, ops, owner, hop, charge, bucket, key, revalidate, 0, 0);
}
void lookahead_note_read(struct lookaheads *l, const char *b, const char *k, double now)
{
	(void)l; (void)b; (void)k; (void)now;
}
void listcache_invalidate(struct listcache *lc, const char *b, const char *k)
{
	(void)lc; (void)b; (void)k;
}
uint64_t cluster_publish_invalidate(struct cluster *cl, const char *b, const char *k)
{
	(void)cl; (void)b; (void)k;
	return 0;
}
bool cluster_listening(struct cluster *cl)
{
	(void)cl;
	return true;
}
bool pins_hold_peer(struct pins *p, const char *b, const char *hdr, const struct chunk_id *cid,
                    size_t len)
{
	(void)p; (void)b; (void)hdr; (void)cid; (void)len;
	return false;
}

/* ---- helpers -------------------------------------------------------------- */

static struct worker wk;

static void worker_setup(void)
{
	memset(&wk, 0, sizeof wk);
	wk.magic = WORKER_MAGIC;
	wk.loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(wk.loop);
	pthread_mutex_init(&wk.wake_lock, NULL);
	ev_async_init(&wk.wake_async, cache_wake_cb);
	wk.wake_async.data = &wk;
	ev_async_start(wk.loop, &wk.wake_async);
}

static void worker_teardown(void)
{
	ev_async_stop(wk.loop, &wk.wake_async);
	ev_loop_destroy(wk.loop);
	pthread_mutex_destroy(&wk.wake_lock);
}

/* A reader of ch, suspended until ch changes (as cread_read leaves it). */
static void reader_wait(struct req *r, struct chunk *ch)
{
	memset(r, 0, sizeof *r);
	r->w = &wk;
	r->c.pass_through = true; /* cache_begin: no metadata step */
	cache_begin(r);
	r->c.pass_through = false;
	r->c.wait_chunk = ch;
	r->c.chunk_waiting = true;
	chunk_wait(ch, &r->c.waiter, 0);
	req_suspend(r);
}

static void grow(struct chunk *ch)
{
	char b = 'x';
	chunk_append(ch, &b, 1);
}

static struct chunk *new_chunk(uint8_t n)
{
	struct chunk_id id;
	memset(&id, 0, sizeof id);
	id.b[0] = n;
	struct chunk *ch = chunk_new(&id, 4);
	assert_non_null(ch);
	return ch;
}

/* ---- tests ---------------------------------------------------------------- */

static struct chunk *chunks[3];
static struct req readers[3];

/* Another thread's producer growing chunk 1 while the worker resumes
 * reader 2: reader 1 is queued again. */
static void grow_chunk1(struct req *r)
{
	(void)r;
	grow(chunks[1]);
}

/* Three readers woken together (queued 0, 1, 2: handled 2, 1, 0). While
 * the worker handles reader 2, reader 1 is woken again from another
 * thread: reader 0, behind it, must still be resumed. Taking the list
 * whole lost it (reader 1's wake_next was rewritten to the new list), and
 * with chunk 0 at its last event the reader waited forever. */
static void test_requeued_reader_keeps_the_rest(void **state)
{
	(void)state;
	worker_setup();
	for (int i = 0; i < 3; i++) {
		chunks[i] = new_chunk((uint8_t)i);
		reader_wait(&readers[i], chunks[i]);
	}
	for (int i = 0; i < 3; i++)
		grow(chunks[i]);
	readers[2].on_wake = grow_chunk1;
	/* What the worker's loop would run: until nothing is queued. */
	for (int round = 0; round < 5 && wk.wake_head; round++)
		cache_wake_cb(wk.loop, &wk.wake_async, EV_ASYNC);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(readers[i].wakes, 1);
		assert_false(readers[i].c.chunk_waiting);
	}
	assert_null(wk.wake_head);
	for (int i = 0; i < 3; i++) {
		chunk_unwait(chunks[i], &readers[i].c.waiter); /* a no-op once woken */
		chunk_unref(chunks[i]);
	}
	worker_teardown();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_requeued_reader_keeps_the_rest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
