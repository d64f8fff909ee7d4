/*
 * disk.c - the NVMe tier as a log of segment files: open, close, and the
 * calls the store makes (write, read, lookup, drop, stats). The rest is
 * beside it, behind disk_internal.h:
 *   disk_format.c   the entry format and the file I/O loops
 *   disk_index.c    the index, the segments, eviction and reclaim
 *   disk_recover.c  the scan at open and the recovery of metadata
 *   disk_tomb.c     tombstones (disk_invalidate)
 *
 * Files. <dir>/seg-<16 lowercase hex>.log, the sequence number growing by
 * one per new segment. Exactly one segment, the head, is appended to; the
 * others are sealed. A new head is started when an entry would take the
 * head past segment_bytes (an entry larger than segment_bytes gets a
 * segment to itself). disk_open always starts a fresh head, so an old
 * tail is never appended to after a crash. flock() on the directory keeps
 * a second process (or a second disk_open) out.
 *
 * No fsync. Cache contents can always be fetched again, so entries are
 * written with pwritev (large ones with O_DIRECT, see write_entry) and
 * never synced: after a crash the tail of a
 * segment may be missing, zeroed or half written. The scan at open stops
 * a segment at the first header that does not check out (bad magic, bad
 * CRC, running past the end of the file) and truncates the file there;
 * a data block that did not reach the disk fails its CRC when read, and
 * the entry is dropped and fetched again.
 *
 * Locking. d->lock guards the index, the policy, the segment bookkeeping
 * and the stats; it is never held across file I/O. d->wlock serialises
 * writers (appends and reclaim): only a writer holding it appends to the
 * head or removes a segment, so a writer may drop d->lock while it copies.
 * A reader pins the segment (refs) before unlocking; a reclaimed segment
 * is unlinked at once but its fd is closed by the last unpin. Lock order:
 * wlock, then lock.
 */
#include "store/disk.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/file.h"
#include "base/log.h"
#include "store/disk_internal.h"
#include "store/tier.h"

static const unsigned char zeros[ENTRY_ALIGN];

static int mkdirs(const char *dir)
{
	char *p = strdup(dir);
	if (!p)
		return -ENOMEM;
	int rc = 0;
	for (char *q = p + 1;; q++) {
		if (*q != '/' && *q != '\0')
			continue;
		char c = *q;
		*q = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		*q = c;
		if (c == '\0')
			break;
	}
	free(p);
	return rc;
}

/* The chunk size CHUNK_SIZE_NAME records: 0 when there is none (a new
 * directory, or one whose record is lost), UINT64_MAX when it cannot be
 * read as one. */
static uint64_t recorded_chunk_bytes(struct disk *d)
{
	char text[32] = "";
	int fd = openat(d->dirfd, CHUNK_SIZE_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : UINT64_MAX;
	ssize_t n = read(fd, text, sizeof text - 1);
	close(fd);
	char *end = NULL;
	uint64_t v = n > 0 ? strtoull(text, &end, 10) : 0;
	return v && end && *end == '\n' ? v : UINT64_MAX;
}

static int record_chunk_bytes(struct disk *d, uint64_t chunk_bytes)
{
	char path[4096], text[32];
	int n = snprintf(text, sizeof text, "%" PRIu64 "\n", chunk_bytes);
	if (snprintf(path, sizeof path, "%s/%s", d->dir, CHUNK_SIZE_NAME) >= (int)sizeof path)
		return -ENAMETOOLONG;
	return file_replace(path, text, (size_t)n);
}

/* Whole oldest segments go (never the head) until what the tier holds is
 * under its limit. */
static void drop_oldest_past_limit(struct disk *d)
{
	while (d->used > d->limit && d->first && d->first != d->head) {
		struct seg *s = d->first;
		while (s->first)
			dk_evict(d, s->first);
		dk_seg_remove(d, s);
	}
}

/*
 * A tier larger than its file system filled it (and everything else on
 * it), then switched itself off at the first failed writes, and stayed so:
 * it never evicted to make room. It is cut to what the file system has
 * room for (free, and what the tier holds), less an eighth for what else
 * writes there (tombstones, pins, other tenants), with a WARN.
 */
#define FIT_FLOOR (64u << 10) /* LARDER_DISK_CACHE_SIZE's least */
static void fit_file_system(struct disk *d)
{
	struct statvfs fs;
	if (fstatvfs(d->dirfd, &fs) != 0 || fs.f_blocks == 0) /* ramfs: no size to fit */
		return;
	/* The head's preallocation (dk_head_ensure) is the tier's own room,
	 * not taken from it: counted in, or a tier that fits would be cut. */
	struct stat hs;
	uint64_t room = (uint64_t)fs.f_bavail * fs.f_frsize + d->used;
	if (d->head && fstat(d->head->fd, &hs) == 0 && (uint64_t)hs.st_blocks * 512 > d->head->size)
		room += (uint64_t)hs.st_blocks * 512 - d->head->size;
	if (d->capacity <= room)
		return;
	uint64_t fit = room - room / 8;
	if (fit < FIT_FLOOR)
		fit = FIT_FLOOR;
	log_warn(TOPIC, "%s: LARDER_DISK_CACHE_SIZE is %" PRIu64 " bytes, but its file system has "
	         "room for %" PRIu64 " (free, and what the tier holds): the tier uses %" PRIu64
	         "; set a size below that", d->dir, d->capacity, room, fit);
	d->capacity = fit; /* disk_open's: no other thread has d yet */
	d->reserve = d->seg_bytes < fit / 4 ? d->seg_bytes : fit / 4;
	d->limit = fit - d->reserve;
	policy_set_capacity(d->pol, d->limit);
	drop_oldest_past_limit(d);
}

/*
 * What the directory holds, read into d (disk_open's, under no lock: no
 * other thread has d yet): the segments scanned (entries cut to another
 * chunk size than chunk_bytes discarded, and the size recorded), whole
 * oldest segments dropped past the limit, a fresh head started, and the
 * entries' metadata handed to cb. Returns 0, or a negative errno with err
 * filled.
 */
static int load_segments(struct disk *d, uint64_t chunk_bytes, store_recover_cb cb, void *cb_arg,
                         char *err, size_t errlen)
{
	const char *dir = d->dir;
	/* A chunk is found by its id, (bucket, key, ETag, index), and under
	 * another chunk size an index names other bytes of the object: entries
	 * cut to another size are discarded, not served. */
	uint64_t was = chunk_bytes ? recorded_chunk_bytes(d) : 0;
	/* No record: a new directory, or one whose record was lost (or from
	 * before it): its entries' size is unknown, so they go too. */
	d->discard = chunk_bytes && !was;
	if (was && was != chunk_bytes) {
		d->discard = true;
		if (was == UINT64_MAX)
			log_warn(TOPIC, "%s/%s: unreadable: every entry is discarded (fetched again)",
			         dir, CHUNK_SIZE_NAME);
		else
			log_warn(TOPIC, "%s: entries cut to %" PRIu64 "-byte chunks, this larder cuts %"
			         PRIu64 ": every entry is discarded (fetched again)", dir, was,
			         chunk_bytes);
	}

	uint64_t *seqs = NULL;
	size_t nseqs = 0, cap = 0;
	unsigned char *var = NULL;
	int rc = dk_list_segments(d, &seqs, &nseqs);
	if (rc < 0) {
		snprintf(err, errlen, "cache directory %s: reading it failed: %s", dir, strerror(-rc));
		return rc;
	}
	double now = clock_mono_s();
	for (size_t i = 0; i < nseqs && rc == 0; i++)
		rc = dk_scan_segment(d, seqs[i], now, &var, &cap, err, errlen);
	if (rc == 0 && chunk_bytes && !was && nseqs)
		log_warn(TOPIC, "%s: no %s file: the size its entries were cut to is unknown, so "
		         "every entry is discarded (fetched again)", dir, CHUNK_SIZE_NAME);
	d->next_seq = nseqs ? seqs[nseqs - 1] + 1 : 1;
	free(seqs);
	d->discard = false;
	/* Recorded once the old entries are gone, before any new one is cut. */
	if (rc == 0 && chunk_bytes && was != chunk_bytes &&
	    (rc = record_chunk_bytes(d, chunk_bytes)) < 0)
		snprintf(err, errlen, "cache directory %s: writing %s failed: %s", dir,
		         CHUNK_SIZE_NAME, strerror(-rc));
	/* A smaller capacity than last time: whole oldest segments go. */
	if (rc == 0)
		drop_oldest_past_limit(d);
	if (rc == 0 && (rc = dk_head_ensure(d, 0)) < 0)
		snprintf(err, errlen, "cache directory %s: cannot create a segment: %s", dir,
		         strerror(-rc));
	if (rc == 0)
		rc = dk_recover(d, cb, cb_arg, &var, &cap, err, errlen);
	free(var);
	return rc;
}

struct disk *disk_open(const char *dir, uint64_t capacity, uint64_t segment_bytes,
                       uint64_t chunk_bytes, enum policy_kind policy, double stale_after_s,
                       store_recover_cb cb, void *cb_arg, char *err, size_t errlen)
{
	if (!dir || !*dir || capacity == 0 || segment_bytes < ENTRY_ALIGN) {
		snprintf(err, errlen, "cache directory: need a path, a capacity and segments of at "
		         "least %u bytes", ENTRY_ALIGN);
		return NULL;
	}
	int rc = mkdirs(dir);
	if (rc < 0) {
		snprintf(err, errlen, "cache directory %s: mkdir() failed: %s", dir, strerror(-rc));
		return NULL;
	}
	struct disk *d = calloc(1, sizeof *d);
	if (!d || !(d->dir = strdup(dir))) {
		free(d);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->wlock, NULL);
	pthread_mutex_init(&d->tlock, NULL);
	d->tfd = -1;
	atomic_init(&d->next_gen, 1);
	d->min_gen = UINT64_MAX;
	d->capacity = capacity;
	d->seg_bytes = segment_bytes;
	d->reserve = segment_bytes < capacity / 4 ? segment_bytes : capacity / 4;
	d->limit = capacity - d->reserve;
	d->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->dirfd < 0) {
		snprintf(err, errlen, "cache directory %s: open() failed: %s", dir, strerror(errno));
		goto fail;
	}
	if (flock(d->dirfd, LOCK_EX | LOCK_NB) < 0) {
		snprintf(err, errlen, "cache directory %s: %s", dir, errno == EWOULDBLOCK ?
		         "in use by another larder (flock)" : strerror(errno));
		goto fail;
	}
	d->pol = policy_create(policy, d->limit, stale_after_s);
	if (!d->pol) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}

	if ((rc = load_segments(d, chunk_bytes, cb, cb_arg, err, errlen)) < 0)
		goto fail;
	log_info(TOPIC, "%s: %" PRIu64 " entries in %" PRIu64 " segments, %" PRIu64 " of %" PRIu64
	         " bytes", dir, (uint64_t)d->count, d->nsegs, d->used, capacity);
	fit_file_system(d);
	return d;
fail:
	disk_close(d);
	return NULL;
}

bool disk_doubtful(const struct disk *d)
{
	return d->doubtful;
}

void disk_close(struct disk *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nslots; i++)
		free(d->slots[i]);
	free(d->slots);
	if (d->head)
		dk_seg_trim(d->head);
	while (d->first) {
		struct seg *s = d->first;
		d->first = s->next;
		dk_seg_unref(s);
	}
	pinset_free(&d->pins);
	if (d->pol)
		policy_destroy(d->pol);
	if (d->tfd >= 0)
		close(d->tfd);
	if (d->dirfd >= 0)
		close(d->dirfd); /* releases the flock */
	pthread_mutex_destroy(&d->lock);
	pthread_mutex_destroy(&d->wlock);
	pthread_mutex_destroy(&d->tlock);
	free(d->dir);
	free(d);
}

/* Writes an entry (its pieces in iov[3]) at off in s: from whole, the same
 * bytes laid out in one page-aligned buffer, with O_DIRECT when it is set
 * and the head has that descriptor (s->dfd, stable while the caller holds
 * wlock: only a writer seals a head); through the page cache otherwise,
 * and after a refused direct write, which turns them off. */
static int entry_pwrite(struct disk *d, struct seg *s, unsigned char *whole,
                        struct iovec *iov, uint64_t off)
{
	if (whole && s->dfd >= 0) {
		struct iovec all = { whole, iov[0].iov_len + iov[1].iov_len + iov[2].iov_len };
		int rc = file_pwritev_all(s->dfd, &all, 1, off);
		if (rc != -EINVAL)
			return rc;
		dk_no_direct(d, "a write with O_DIRECT");
	}
	return file_pwritev_all(s->fd, iov, 3, off);
}

/* An entry laid out before any lock is taken (entry_lay_out): its header
 * and names in hb, its bytes at data, and its index entry e. With O_DIRECT
 * (whole set) hb is the thread's page-aligned buffer and holds the whole
 * entry, data and padding included; otherwise hb is allocated. */
struct entry_out {
	unsigned char *whole;       /* chunk_scratch: the entry laid out for O_DIRECT */
	unsigned char *hb;          /* header and names: whole, or allocated */
	const void *data;
	size_t vl;                  /* bytes of names and metadata */
	struct dent *e;             /* the index entry; NULL once the index holds it */
};

static void entry_out_free(struct entry_out *x)
{
	free(x->e);
	if (!x->whole)
		free(x->hb);
}

/* Lays out the entry of chunk id (data, or c's bytes when data is NULL) in
 * x: everything that needs no lock, the bytes, the CRCs, the header. An
 * entry of more than DISK_DIRECT_ABOVE bytes is laid out whole for O_DIRECT
 * (write_entry). Returns 0, or a negative errno with nothing left to free. */
static int entry_lay_out(struct disk *d, const struct chunk_id *id, const struct chunk_origin *o,
                         const void *data, struct chunk *c, size_t len, struct entry_out *x)
{
	const char *bucket = o && o->bucket ? o->bucket : "";
	const char *key = o && o->key ? o->key : "";
	const char *etag = o && o->etag ? o->etag : "";
	size_t bl = strlen(bucket), kl = strlen(key), el = strlen(etag);
	size_t ml = o && o->meta ? o->meta_len : 0;
	if (bl > UINT16_MAX || kl > UINT16_MAX || el > UINT16_MAX || ml > MAX_META ||
	    len > UINT32_MAX)
		return -EINVAL;

	size_t vl = bl + kl + el + ml;
	uint64_t esz = dk_entry_size(vl, len);
	*x = (struct entry_out){ .vl = vl };
	if (len > DISK_DIRECT_ABOVE && !atomic_load_explicit(&d->no_direct, memory_order_relaxed))
		x->whole = chunk_scratch(esz);
	x->hb = x->whole ? x->whole : malloc(HDR_LEN + vl);
	if (!x->hb)
		return -ENOMEM;
	if (x->whole) {
		unsigned char *at = x->whole + HDR_LEN + vl;
		int r = c ? chunk_read(c, 0, at, len) : 0;
		if (r < 0)
			return r;
		if (!c)
			memcpy(at, data, len);
		memset(at + len, 0, esz - HDR_LEN - vl - len);
		data = at;
	} else if (c && !(data = chunk_view(c))) {
		entry_out_free(x);
		return -ENOMEM;
	}
	x->data = data;
	struct hdr h = {
		.id = *id, .index = o ? o->index : 0,
		.bucket_len = (uint16_t)bl, .key_len = (uint16_t)kl, .etag_len = (uint16_t)el,
		.meta_len = (uint32_t)ml, .data_len = (uint32_t)len,
		.data_crc = crc32c(0, data, len),
		.gen = o && o->gen ? o->gen : disk_next_gen(d),
		.flags = o && o->copy ? HDR_F_COPY : 0,
	};
	struct dent *e = calloc(1, sizeof *e);
	if (!e) {
		entry_out_free(x);
		return -ENOMEM;
	}
	unsigned char *v = x->hb + HDR_LEN;
	memcpy(v, bucket, bl);
	memcpy(v + bl, key, kl);
	memcpy(v + bl + kl, etag, el);
	if (ml)
		memcpy(v + bl + kl + el, o->meta, ml);
	dk_hdr_encode(&h, x->hb, v);
	e->id = *id;
	e->hash = chunk_id_hash(id);
	e->copy = h.flags & HDR_F_COPY;
	e->esz = esz;
	e->var_len = (uint32_t)vl;
	e->data_len = (uint32_t)len;
	e->data_crc = h.data_crc;
	e->gen = h.gen;
	e->chunk0 = h.index == 0;
	x->e = e;
	return 0;
}

/* Under wlock and lock: drops the entry e replaces, admits e, evicts and
 * reclaims until it fits, and reserves its bytes at the end of the head.
 * Returns 1 with *off where e goes in d->head (counted in s->size and
 * d->used; the head referenced once more for the write), 0 when e is not
 * admitted or no room can be made, or a negative errno. */
static int entry_place(struct disk *d, struct dent *e, double now, uint64_t *off)
{
	struct dent *old = dk_idx_find(d, &e->id, e->hash);
	if (old)
		dk_entry_drop(d, old); /* a write replaces */
	/* A pinned chunk is always admitted (its cap bounds them); pinned
	 * entries take their bytes out of what the policy may hold. */
	if (e->esz > d->limit ||
	    (!pinset_has(&d->pins, &e->id) &&
	     !policy_admit_reserved(d->pol, dk_rank(e), e->esz, d->pinned, now)))
		return 0;
	struct policy_entry *victim;
	while (policy_used(d->pol) + d->pinned + e->esz > policy_capacity(d->pol) &&
	       (victim = policy_victim(d->pol, now)) != NULL) {
		dk_evict(d, dk_entry_of(victim));
	}
	int rc;
	if ((rc = dk_room_make(d, e->esz, now)) <= 0 || (rc = dk_idx_reserve(d)) < 0)
		return rc;
	if ((rc = dk_head_ensure(d, e->esz)) < 0) {
		d->write_errors++;
		return rc;
	}
	struct seg *s = d->head;
	*off = s->size;
	s->size += e->esz;
	d->used += e->esz;
	atomic_fetch_add(&s->refs, 1);
	return 1;
}

/* Under lock, after the write of x's entry at off in s ended with rc: the
 * entry joins the index (x->e then belongs to it), or on a failed write
 * its room in s is given back. Drops the write's reference to s. */
static void entry_commit(struct disk *d, struct seg *s, uint64_t off, int rc,
                         struct entry_out *x, double now)
{
	struct dent *e = x->e;
	if (rc < 0) {
		d->write_errors++;
		dk_append_undo(d, s, off, e->esz);
		log_warn(TOPIC, "%s: segment %016" PRIx64 ": pwritev() failed: %s", d->dir, s->seq,
		         strerror(-rc));
	} else {
		e->off = off;
		dk_idx_put(d->slots, d->nslots, e);
		d->count++;
		dk_seg_link_entry(s, e);
		d->live += e->esz;
		policy_insert(d->pol, &e->pe, dk_rank(e), e->esz, now);
		if (pinset_has(&d->pins, &e->id)) /* pinned now, not when the write began */
			dk_entry_pin(d, e, true, now);
		x->e = NULL;
	}
	dk_seg_unref(s);
}

/* disk_write of data, or of chunk c's bytes when data is NULL. An entry of
 * more than DISK_DIRECT_ABOVE bytes is laid out whole (header, names, data,
 * padding) in the thread's page-aligned buffer and written with O_DIRECT:
 * for such sizes that costs a fraction of the page cache's copy, and the
 * machine does not hold the tier's bytes twice (docs/benchmarks.md,
 * "Large entries past the page cache"). Smaller entries go through the
 * page cache, where a hit reads them without waiting on the device
 * (store.c, INLINE_READ_MAX). data must not be in that buffer.
 *
 * Three steps: the entry is laid out with no lock held (entry_lay_out),
 * placed under wlock and lock (entry_place), written with only wlock held,
 * and committed under lock again (entry_commit). */
static int write_entry(struct disk *d, const struct chunk_id *id, const struct chunk_origin *o,
                       const void *data, struct chunk *c, size_t len)
{
	struct entry_out x;
	int rc = entry_lay_out(d, id, o, data, c, len, &x);
	if (rc < 0)
		return rc;

	pthread_mutex_lock(&d->wlock);
	pthread_mutex_lock(&d->lock);
	double now = clock_mono_s();
	uint64_t off = 0;
	rc = entry_place(d, x.e, now, &off);
	if (rc > 0) {
		struct seg *s = d->head;
		pthread_mutex_unlock(&d->lock);
		uint64_t esz = x.e->esz;
		struct iovec iov[3] = {
			{ x.hb, HDR_LEN + x.vl },
			{ (void *)(uintptr_t)x.data, len },
			{ (void *)(uintptr_t)zeros, (size_t)(esz - HDR_LEN - x.vl - len) },
		};
		rc = entry_pwrite(d, s, x.whole, iov, off);
		pthread_mutex_lock(&d->lock);
		entry_commit(d, s, off, rc, &x, now);
	}
	if (rc > 0)
		rc = 0;
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_unlock(&d->wlock);
	entry_out_free(&x);
	return rc;
}

int disk_write(struct disk *d, const struct chunk_id *id, const struct chunk_origin *o,
               const void *data, size_t len)
{
	return write_entry(d, id, o, data, NULL, len);
}

/* disk_read, and with cached_only disk_read_cached: a read that would wait
 * for the device ends -EAGAIN, with nothing dropped or counted. */
static int read_entry(struct disk *d, const struct chunk_id *id, void *out, size_t len,
                      bool cached_only, bool *copy)
{
	int flags = cached_only ? RWF_NOWAIT : 0;
	uint64_t hash = chunk_id_hash(id);
	pthread_mutex_lock(&d->lock);
	struct dent *e = dk_idx_find(d, id, hash);
	if (!e || len != e->data_len) {
		pthread_mutex_unlock(&d->lock);
		return e ? -EINVAL : -ENOENT;
	}
	struct seg *s = e->seg;
	uint64_t off = e->off;
	uint32_t vl = e->var_len, crc = e->data_crc;
	if (copy)
		*copy = e->copy;
	atomic_fetch_add(&s->refs, 1);
	if (!e->pinned)
		policy_touch(d->pol, &e->pe, clock_mono_s());
	pthread_mutex_unlock(&d->lock);

	unsigned char b[HDR_LEN];
	struct hdr h;
	bool bad = false;
	int rc = file_pread_flags(s->fd, b, HDR_LEN, off, flags);
	if (rc == 0)
		bad = !dk_hdr_decode(b, &h) || !chunk_id_eq(&h.id, id) || h.data_len != len ||
		      h.data_crc != crc;
	if (rc == 0 && !bad)
		rc = file_pread_flags(s->fd, out, len, off + HDR_LEN + vl, flags);
	if (rc == 0 && !bad)
		bad = crc32c(0, out, len) != crc;
	if (rc == -ENODATA) /* short: the file was cut */
		bad = true;
	if (!bad && (rc == 0 || rc == -EAGAIN)) { /* -EAGAIN: RWF_NOWAIT only */
		dk_seg_unref(s);
		return rc;
	}

	pthread_mutex_lock(&d->lock);
	e = dk_idx_find(d, id, hash);
	if (e && e->seg == s && e->off == off)
		dk_entry_drop(d, e);
	if (bad)
		d->corrupt++;
	else
		d->read_errors++;
	uint64_t seq = s->seq;
	dk_seg_unref(s);
	pthread_mutex_unlock(&d->lock);
	if (bad)
		log_warn(TOPIC, "%s: segment %016" PRIx64 " offset %" PRIu64 ": checksum mismatch; "
		         "entry dropped", d->dir, seq, off);
	else
		log_warn(TOPIC, "%s: segment %016" PRIx64 ": pread() failed: %s", d->dir, seq,
		         strerror(-rc));
	return bad ? -EIO : rc;
}

int disk_read(struct disk *d, const struct chunk_id *id, void *out, size_t len, bool *copy)
{
	return read_entry(d, id, out, len, false, copy);
}

int disk_read_cached(struct disk *d, const struct chunk_id *id, void *out, size_t len,
                     bool *copy)
{
	return read_entry(d, id, out, len, true, copy);
}

uint64_t disk_next_gen(struct disk *d)
{
	return atomic_fetch_add(&d->next_gen, 1);
}

void disk_pin_limit(struct disk *d, uint64_t bytes)
{
	pthread_mutex_lock(&d->lock);
	/* Past the limit under the reclaim reserve a pinned write would find
	 * no room it could make. */
	d->pins.limit = bytes < d->limit ? bytes : d->limit;
	pthread_mutex_unlock(&d->lock);
}

uint64_t disk_pin_bytes(uint64_t len)
{
	return dk_entry_size(0, len);
}

int disk_pin(struct disk *d, const struct chunk_id *id, size_t len)
{
	pthread_mutex_lock(&d->lock);
	int rc = pinset_add(&d->pins, id, disk_pin_bytes(len));
	struct dent *e = rc == 1 ? dk_idx_find(d, id, chunk_id_hash(id)) : NULL;
	if (e)
		dk_entry_pin(d, e, true, 0);
	pthread_mutex_unlock(&d->lock);
	return rc < 0 ? rc : 0;
}

void disk_unpin(struct disk *d, const struct chunk_id *id)
{
	pthread_mutex_lock(&d->lock);
	struct dent *e = pinset_remove(&d->pins, id) ? dk_idx_find(d, id, chunk_id_hash(id)) : NULL;
	if (e)
		dk_entry_pin(d, e, false, clock_mono_s());
	pthread_mutex_unlock(&d->lock);
}

bool disk_pinned(struct disk *d, const struct chunk_id *id)
{
	pthread_mutex_lock(&d->lock);
	bool on = pinset_has(&d->pins, id);
	pthread_mutex_unlock(&d->lock);
	return on;
}

bool disk_lookup(struct disk *d, const struct chunk_id *id, size_t *len)
{
	pthread_mutex_lock(&d->lock);
	struct dent *e = dk_idx_find(d, id, chunk_id_hash(id));
	if (e && len)
		*len = e->data_len;
	pthread_mutex_unlock(&d->lock);
	return e != NULL;
}

void disk_each(struct disk *d, store_each_fn fn, void *arg)
{
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->nslots; i++) {
		const struct dent *e = d->slots[i];
		if (e)
			fn(arg, &e->id, e->chunk0, e->copy);
	}
	pthread_mutex_unlock(&d->lock);
}

void disk_drop(struct disk *d, const struct chunk_id *id)
{
	pthread_mutex_lock(&d->lock);
	struct dent *e = dk_idx_find(d, id, chunk_id_hash(id));
	if (e) {
		struct seg *s = e->seg;
		dk_entry_drop(d, e);
		dk_seg_remove_if_empty(d, s); /* a purge gives its room back now */
	}
	pthread_mutex_unlock(&d->lock);
}

void disk_on_evict(struct disk *d, store_change_cb cb, void *arg)
{
	pthread_mutex_lock(&d->lock);
	d->evicted = cb;
	d->evicted_arg = arg;
	pthread_mutex_unlock(&d->lock);
}

void disk_get_stats(struct disk *d, struct disk_stats *out)
{
	pthread_mutex_lock(&d->lock);
	*out = (struct disk_stats){
		.used = d->used, .capacity = d->capacity, .live_bytes = d->live,
		.entries = d->count, .segments = d->nsegs, .evictions = d->evictions,
		.reclaimed_segments = d->reclaimed, .write_errors = d->write_errors,
		.read_errors = d->read_errors, .corrupt = d->corrupt, .pinned = d->pinned,
		.pin_held = d->pins.held, .pin_limit = d->pins.limit,
	};
	pthread_mutex_unlock(&d->lock);
}

int disk_check(struct disk *d)
{
	int bad = 0;
	pthread_mutex_lock(&d->lock);
	uint64_t used = 0, live = 0, nsegs = 0, entries = 0, pinned = 0, npinned = 0;
	for (struct seg *s = d->first; s; s = s->next) {
		uint64_t sl = 0;
		for (struct dent *e = s->first; e; e = e->snext) {
			bad |= e->seg != s || e->off + e->esz > s->size ||
			       dk_idx_find(d, &e->id, e->hash) != e || e->off % ENTRY_ALIGN != 0;
			sl += e->esz;
			entries++;
			pinned += e->pinned ? e->esz : 0;
			npinned += e->pinned;
		}
		bad |= sl != s->live || (s->next && s->next->seq <= s->seq);
		used += s->size;
		live += sl;
		nsegs++;
	}
	size_t n = 0;
	for (size_t i = 0; i < d->nslots; i++)
		n += d->slots[i] != NULL;
	bad |= used != d->used || live != d->live || nsegs != d->nsegs || entries != d->count ||
	       n != d->count || d->used > d->capacity || pinned != d->pinned ||
	       npinned != d->npinned || policy_used(d->pol) + d->pinned != d->live ||
	       policy_count(d->pol) + d->npinned != d->count || policy_check(d->pol) != 0;
	pthread_mutex_unlock(&d->lock);
	return bad ? -1 : 0;
}

/* ---- the tier interface (store/tier.h) ---- */

static bool tier_holds_op(void *t, const struct chunk_id *id, size_t *len)
{
	return disk_lookup(t, id, len);
}

static int tier_admit_op(void *t, struct chunk *c, const struct chunk_origin *o, struct tier_gone **gone)
{
	return write_entry(t, &c->id, o, NULL, c, c->len);
}

static void tier_drop_op(void *t, const struct chunk_id *id, struct tier_gone **gone)
{
	disk_drop(t, id);
}

static void tier_get_stats_op(void *t, struct tier_stats *out)
{
	struct disk_stats d;
	disk_get_stats(t, &d);
	*out = (struct tier_stats){
		.used = d.used,
		.capacity = d.capacity,
		.entries = d.entries,
		.evictions = d.evictions,
		.corrupt = d.corrupt,
		.pinned = d.pinned,
		.pin_held = d.pin_held,
		.pin_limit = d.pin_limit,
	};
}

static void tier_on_evict_op(void *t, store_change_cb cb, void *arg)
{
	disk_on_evict(t, cb, arg);
}

static void tier_close_op(void *t)
{
	disk_close(t);
}

const struct tier_ops disk_tier_ops = {
	.holds = tier_holds_op,
	.admit = tier_admit_op,
	.drop = tier_drop_op,
	.get_stats = tier_get_stats_op,
	.on_evict = tier_on_evict_op,
	.close = tier_close_op,
};
