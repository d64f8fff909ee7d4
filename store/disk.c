/*
 * disk.c - the NVMe tier as a log of segment files.
 *
 * Files. <dir>/seg-<16 lowercase hex>.log, the sequence number growing by
 * one per new segment. Exactly one segment, the head, is appended to; the
 * others are sealed. A new head is started when an entry would take the
 * head past segment_bytes (an entry larger than segment_bytes gets a
 * segment to itself). disk_open always starts a fresh head, so an old
 * tail is never appended to after a crash. flock() on the directory keeps
 * a second process (or a second disk_open) out.
 *
 * Entry. Starts at a multiple of ENTRY_ALIGN (4 KiB), so appending never
 * rewrites a page holding an earlier entry, and is padded with zeros to
 * the next multiple. The fixed header is HDR_LEN (72) bytes, little-endian:
 *
 *     0  magic "LRDR"          28  index u64           48  data_len u32
 *     4  version u16 (2)       36  bucket_len u16      52  data_crc32c u32
 *     6  header_len u16 (72)   38  key_len u16         56  generation u64
 *     8  flags u32 (0)         40  etag_len u16        64  reserved u32 (0)
 *    12  chunk id [16]         42  reserved u16 (0)    68  header_crc32c u32
 *                              44  meta_len u32
 *
 * then bucket, key, etag (no NULs), the metadata blob, the data, padding.
 * The generation orders entries in time across segments and restarts
 * (reclaim copies an entry with its generation): recovery keeps only the
 * newest chunk-0 entry per (bucket, key), and a tombstone hides entries
 * older than itself. header_crc32c covers bytes [0, 68) and then the
 * names and metadata, so
 * whatever recovery hands to the recover callback has been checked; the
 * data has its own CRC, checked on every read (not at open: a scan reads
 * headers only, so restart costs one small read per entry, not a read of
 * the whole cache; a chunk-0 entry is read once or twice more, by the
 * recovery of metadata below).
 *
 * No fsync. Cache contents can always be fetched again, so entries are
 * written with pwritev and never synced: after a crash the tail of a
 * segment may be missing, zeroed or half written. The scan at open stops
 * a segment at the first header that does not check out (bad magic, bad
 * CRC, running past the end of the file) and truncates the file there;
 * a data block that did not reach the disk fails its CRC when read, and
 * the entry is dropped and fetched again.
 *
 * Drops and evictions live in memory only: nothing is written for them.
 * After a restart an entry dropped or evicted earlier comes back if its
 * segment has not been reclaimed yet (its bytes were still counted, so
 * space accounting is unaffected; a corrupt one fails its CRC again).
 * That is harmless for chunks (an id names one version's bytes) but not
 * for object metadata, which chunk-0 entries carry: invalidations (a
 * write through larder, a purge, another node's write) are therefore
 * written, as tombstones, to TOMB_NAME, and fdatasync'd before
 * disk_invalidate returns. A tombstone (generation, bucket, key or key
 * prefix) makes recovery drop every chunk-0 entry it names with an older
 * generation. It is kept while any entry on disk is older than it: each
 * open rewrites the file without the ones no entry needs any more.
 *
 * Tombstone record, little-endian: magic "LRDT", version u16 (1), flags
 * u16 (bit 0: key is a prefix), generation u64, bucket_len u16, key_len
 * u16, crc32c u32 of bytes [0, 20) and the names; then bucket, key. A
 * record that does not check out ends the file (a torn tail: truncated).
 *
 * Older formats. A segment written by another version of the format (v1
 * had no generations, so its metadata cannot be ordered) is discarded at
 * open with a log line: the cache starts cold, nothing stale is served.
 *
 * Index. An open-addressing table (linear probing, backward-shift delete)
 * of entry pointers keyed by chunk_id_hash. Each entry is on its
 * segment's list of live entries; a segment counts its file bytes (size)
 * and live bytes. A later entry for the same id supersedes the earlier
 * one, on write and during the scan.
 *
 * Space. used is the sum of the segment file sizes, and a segment's size
 * is what was appended to it, so used is what the files really take
 * (pages of a file removed while a reader still has it open are freed
 * at its close). The policy sees each entry's on-disk size (header,
 * names, metadata and padding included) so its accounting matches the
 * files. Writes keep used <= capacity - reserve, reserve = min(segment
 * bytes, capacity / 4): the reserve is room to reclaim a segment, which
 * copies its live entries to the head before removing the file, without
 * ever passing capacity even for a moment. To make room a write, in
 * order: reclaims the sealed segment with the fewest live bytes if it
 * holds any dead bytes and the copy fits under capacity; else seals a
 * head that holds dead bytes (so it can be reclaimed next); else evicts
 * the policy's next victim. A write that still cannot fit is declined
 * (returns 0, like a policy refusal), as is an entry larger than
 * capacity - reserve.
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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crc.h"
#include "base/log.h"

#define TOPIC "disk"
#define HDR_LEN 72u
#define HDR_CRC_OFF 68u
#define HDR_VERSION 2u
#define TOMB_NAME "tombstones.log"
#define TOMB_TMP "tombstones.tmp"
#define TOMB_HDR 24u
#define TOMB_VERSION 1u
#define TOMB_PREFIX 1u
#define ENTRY_ALIGN 4096u
#define MAX_META (1u << 20)
#define COPY_BUF (1u << 20)
#define SEG_NAME_LEN 24 /* "seg-" + 16 + ".log" */

struct seg;

struct dent {
	struct policy_entry pe;
	struct chunk_id id;
	uint64_t hash;
	struct seg *seg;
	uint64_t off, esz;          /* where in seg, bytes on disk */
	uint32_t var_len, data_len, data_crc;
	uint64_t gen;
	bool chunk0;
	struct dent *sprev, *snext; /* seg's live list */
};

struct seg {
	uint64_t seq;
	int fd;
	_Atomic int refs;           /* 1 for d->segs, 1 per pin */
	uint64_t size, live;
	struct dent *first, *last;
	struct seg *prev, *next;    /* d->segs, by seq */
};

struct disk {
	int dirfd;
	char *dir;
	uint64_t capacity, limit, seg_bytes;
	pthread_mutex_t lock, wlock;
	struct policy *pol;
	struct dent **slots;
	size_t nslots, count;
	struct seg *first, *last, *head;
	uint64_t nsegs, next_seq, used, live;
	uint64_t evictions, reclaimed, write_errors, read_errors, corrupt;
	store_change_cb evicted;    /* told of each eviction, under lock */
	void *evicted_arg;
	_Atomic uint64_t next_gen;  /* generations handed out so far + 1 */
	uint64_t min_gen;           /* at open: the oldest entry in any segment */
	pthread_mutex_t tlock;      /* guards the tombstone file's appends */
	int tfd;                    /* TOMB_NAME, or -1 */
	uint64_t tsize;
	uint64_t tombstones;        /* written since open */
};

struct hdr {
	struct chunk_id id;
	uint64_t index, gen;
	uint16_t bucket_len, key_len, etag_len;
	uint32_t meta_len, data_len, data_crc;
};

static const unsigned char zeros[ENTRY_ALIGN];

/* ---- helpers --------------------------------------------------------- */


static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i); }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i); }
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint64_t var_len_of(const struct hdr *h)
{
	return (uint64_t)h->bucket_len + h->key_len + h->etag_len + h->meta_len;
}

static uint64_t entry_size(uint64_t var_len, uint64_t data_len)
{
	uint64_t n = HDR_LEN + var_len + data_len;
	return (n + ENTRY_ALIGN - 1) / ENTRY_ALIGN * ENTRY_ALIGN;
}

/* Encodes h into b[0, HDR_LEN) and seals it with the CRC of b and var. */
static void hdr_encode(const struct hdr *h, unsigned char *b, const unsigned char *var)
{
	memset(b, 0, HDR_LEN);
	memcpy(b, "LRDR", 4);
	put16(b + 4, HDR_VERSION);
	put16(b + 6, HDR_LEN);
	memcpy(b + 12, h->id.b, CHUNK_ID_LEN);
	put64(b + 28, h->index);
	put16(b + 36, h->bucket_len);
	put16(b + 38, h->key_len);
	put16(b + 40, h->etag_len);
	put32(b + 44, h->meta_len);
	put32(b + 48, h->data_len);
	put32(b + 52, h->data_crc);
	put64(b + 56, h->gen);
	uint32_t crc = crc32c(0, b, HDR_CRC_OFF);
	put32(b + HDR_CRC_OFF, crc32c(crc, var, var_len_of(h)));
}

/* Decodes the fixed part; false when it is not a version-1 header. */
static bool hdr_decode(const unsigned char *b, struct hdr *h)
{
	if (memcmp(b, "LRDR", 4) != 0 || get16(b + 4) != HDR_VERSION || get16(b + 6) != HDR_LEN ||
	    get32(b + 8) != 0 || get16(b + 42) != 0 || get32(b + 64) != 0)
		return false;
	memcpy(h->id.b, b + 12, CHUNK_ID_LEN);
	h->index = get64(b + 28);
	h->bucket_len = get16(b + 36);
	h->key_len = get16(b + 38);
	h->etag_len = get16(b + 40);
	h->meta_len = get32(b + 44);
	h->data_len = get32(b + 48);
	h->data_crc = get32(b + 52);
	h->gen = get64(b + 56);
	return h->meta_len <= MAX_META;
}

/* Reads n bytes at off. Returns 0, -errno, or -ENODATA at end of file. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;
	while (n > 0) {
		ssize_t r = pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ENODATA;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Writes the iovecs at off, resuming after short writes; modifies iov. */
static int pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off)
{
	while (cnt > 0) {
		ssize_t r = pwritev(fd, iov, cnt, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		size_t left = (size_t)r;
		while (cnt > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			cnt--;
		}
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

/*
 * Reads and checks the entry at off (which must end by limit): header
 * into h, names and metadata into *var (grown as needed, *cap its size).
 * Returns 0, 1 when the entry is bad or torn, or -errno.
 */
static int entry_read(int fd, uint64_t off, uint64_t limit, struct hdr *h, unsigned char **var,
                      size_t *cap)
{
	unsigned char b[HDR_LEN];
	if (limit < off || limit - off < HDR_LEN)
		return 1;
	int rc = pread_all(fd, b, HDR_LEN, off);
	if (rc < 0)
		return rc == -ENODATA ? 1 : rc;
	if (!hdr_decode(b, h))
		return 1;
	uint64_t vl = var_len_of(h);
	if (entry_size(vl, h->data_len) > limit - off)
		return 1;
	if (vl > *cap) {
		unsigned char *nv = realloc(*var, vl);
		if (!nv)
			return -ENOMEM;
		*var = nv;
		*cap = vl;
	}
	if (vl > 0 && (rc = pread_all(fd, *var, vl, off + HDR_LEN)) < 0)
		return rc == -ENODATA ? 1 : rc;
	uint32_t crc = crc32c(0, b, HDR_CRC_OFF);
	return crc32c(crc, *var, vl) == get32(b + HDR_CRC_OFF) ? 0 : 1;
}

static void seg_name(char out[SEG_NAME_LEN + 1], uint64_t seq)
{
	snprintf(out, SEG_NAME_LEN + 1, "seg-%016" PRIx64 ".log", seq);
}

/* ---- index ----------------------------------------------------------- */

static struct dent *idx_find(struct disk *d, const struct chunk_id *id, uint64_t h)
{
	if (d->nslots == 0)
		return NULL;
	for (size_t i = h & (d->nslots - 1);; i = (i + 1) & (d->nslots - 1)) {
		struct dent *e = d->slots[i];
		if (!e)
			return NULL;
		if (e->hash == h && chunk_id_eq(&e->id, id))
			return e;
	}
}

static void idx_put(struct dent **slots, size_t n, struct dent *e)
{
	size_t i = e->hash & (n - 1);
	while (slots[i])
		i = (i + 1) & (n - 1);
	slots[i] = e;
}

/* Makes room for one more entry (load <= 3/4). Returns 0 or -ENOMEM. */
static int idx_reserve(struct disk *d)
{
	if ((d->count + 1) * 4 <= d->nslots * 3)
		return 0;
	size_t n = d->nslots ? d->nslots * 2 : 1024;
	struct dent **ns = calloc(n, sizeof *ns);
	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < d->nslots; i++)
		if (d->slots[i])
			idx_put(ns, n, d->slots[i]);
	free(d->slots);
	d->slots = ns;
	d->nslots = n;
	return 0;
}

static void idx_remove(struct disk *d, struct dent *e)
{
	size_t mask = d->nslots - 1, i = e->hash & mask;
	while (d->slots[i] != e)
		i = (i + 1) & mask;
	/* Backward shift: pull later members of the probe run into the hole. */
	for (size_t j = (i + 1) & mask; d->slots[j]; j = (j + 1) & mask) {
		size_t home = d->slots[j]->hash & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			d->slots[i] = d->slots[j];
			i = j;
		}
	}
	d->slots[i] = NULL;
	d->count--;
}

/* ---- segments and entries -------------------------------------------- */

static void seg_link_entry(struct seg *s, struct dent *e)
{
	e->seg = s;
	e->snext = NULL;
	e->sprev = s->last;
	if (s->last)
		s->last->snext = e;
	else
		s->first = e;
	s->last = e;
	s->live += e->esz;
}

static void seg_unlink_entry(struct seg *s, struct dent *e)
{
	if (e->sprev)
		e->sprev->snext = e->snext;
	else
		s->first = e->snext;
	if (e->snext)
		e->snext->sprev = e->sprev;
	else
		s->last = e->sprev;
	s->live -= e->esz;
}

static void seg_unref(struct seg *s)
{
	if (atomic_fetch_sub(&s->refs, 1) == 1) {
		close(s->fd);
		free(s);
	}
}

/* A segment object for fd, appended to d's list. NULL when out of memory. */
static struct seg *seg_add(struct disk *d, uint64_t seq, int fd, uint64_t size)
{
	struct seg *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->seq = seq;
	s->fd = fd;
	atomic_init(&s->refs, 1);
	s->size = size;
	s->prev = d->last;
	if (d->last)
		d->last->next = s;
	else
		d->first = s;
	d->last = s;
	d->nsegs++;
	d->used += size;
	return s;
}

/* Removes an empty-of-live-entries segment: unlinks the file, drops the
 * list's reference (the fd closes when no reader has it pinned). */
static void seg_remove(struct disk *d, struct seg *s)
{
	char name[SEG_NAME_LEN + 1];
	seg_name(name, s->seq);
	if (unlinkat(d->dirfd, name, 0) < 0)
		log_warn(TOPIC, "%s/%s: unlink() failed: %s", d->dir, name, strerror(errno));
	if (s->prev)
		s->prev->next = s->next;
	else
		d->first = s->next;
	if (s->next)
		s->next->prev = s->prev;
	else
		d->last = s->prev;
	if (d->head == s)
		d->head = NULL;
	d->nsegs--;
	d->used -= s->size;
	seg_unref(s);
}

/* Makes d->head able to take esz more bytes: starts a new segment when
 * there is none or the entry would overflow a non-empty one. */
static int head_ensure(struct disk *d, uint64_t esz)
{
	if (d->head && (d->head->size == 0 || d->head->size + esz <= d->seg_bytes))
		return 0;
	char name[SEG_NAME_LEN + 1];
	seg_name(name, d->next_seq);
	int fd = openat(d->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		log_warn(TOPIC, "%s/%s: open() failed: %s", d->dir, name, strerror(e));
		return -e;
	}
	struct seg *s = seg_add(d, d->next_seq, fd, 0);
	if (!s) {
		close(fd);
		unlinkat(d->dirfd, name, 0);
		return -ENOMEM;
	}
	d->next_seq++;
	d->head = s;
	return 0;
}

/* Gives back a reservation of esz bytes at off in s after a failed write:
 * truncates the file; if that fails too the bytes stay counted (dead) and
 * the segment is sealed so nothing is ever appended after them. */
static void append_undo(struct disk *d, struct seg *s, uint64_t off, uint64_t esz)
{
	if (ftruncate(s->fd, (off_t)off) == 0) {
		s->size -= esz;
		d->used -= esz;
	} else if (d->head == s) {
		d->head = NULL;
	}
}

/* Forgets an entry; its bytes become dead. */
static void entry_drop(struct disk *d, struct dent *e)
{
	policy_remove(d->pol, &e->pe);
	idx_remove(d, e);
	seg_unlink_entry(e->seg, e);
	d->live -= e->esz;
	free(e);
}

/* Capacity, not a drop or a replacement, takes e out. */
static void evict(struct disk *d, struct dent *e)
{
	if (d->evicted)
		d->evicted(d->evicted_arg, &e->id);
	entry_drop(d, e);
	d->evictions++;
}

static struct dent *entry_of(struct policy_entry *pe)
{
	return (struct dent *)(void *)((char *)pe - offsetof(struct dent, pe));
}

/* ---- reclaim and room ------------------------------------------------ */

static int copy_bytes(int from_fd, uint64_t from, int to_fd, uint64_t to, uint64_t n,
                      char *buf, bool *read_failed)
{
	while (n > 0) {
		size_t k = n < COPY_BUF ? (size_t)n : COPY_BUF;
		int rc = pread_all(from_fd, buf, k, from);
		if (rc < 0) {
			*read_failed = true;
			return rc;
		}
		struct iovec iov = { buf, k };
		if ((rc = pwritev_all(to_fd, &iov, 1, to)) < 0)
			return rc;
		from += k;
		to += k;
		n -= k;
	}
	return 0;
}

/*
 * Copies s's live entries to the head and removes s. Called and returns
 * with d->lock held (and wlock); drops d->lock around each copy. An entry
 * dropped meanwhile leaves dead bytes in the head. An entry that cannot
 * be read is dropped; a failed write stops the reclaim (s stays).
 */
static int reclaim(struct disk *d, struct seg *s)
{
	char *buf = malloc(COPY_BUF);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	while (s->first) {
		struct dent *e = s->first;
		struct chunk_id id = e->id;
		uint64_t h = e->hash, from = e->off, esz = e->esz;
		if ((rc = head_ensure(d, esz)) < 0) {
			d->write_errors++;
			break;
		}
		struct seg *hd = d->head;
		uint64_t to = hd->size;
		hd->size += esz;
		d->used += esz;
		atomic_fetch_add(&hd->refs, 1);
		pthread_mutex_unlock(&d->lock);
		bool read_failed = false;
		rc = copy_bytes(s->fd, from, hd->fd, to, esz, buf, &read_failed);
		pthread_mutex_lock(&d->lock);
		e = idx_find(d, &id, h);
		bool same = e && e->seg == s && e->off == from;
		if (rc < 0) {
			append_undo(d, hd, to, esz);
			seg_unref(hd);
			log_warn(TOPIC, "%s: reclaiming segment %016" PRIx64 ": %s() failed: %s", d->dir,
			         s->seq, read_failed ? "pread" : "pwrite", strerror(-rc));
			if (!read_failed) {
				d->write_errors++;
				break;
			}
			d->read_errors++;
			if (same)
				entry_drop(d, e);
			rc = 0;
			continue;
		}
		if (same) {
			seg_unlink_entry(s, e);
			e->off = to;
			seg_link_entry(hd, e);
		}
		seg_unref(hd);
	}
	free(buf);
	if (rc == 0) {
		log_debug(TOPIC, "%s: reclaimed segment %016" PRIx64 " (%" PRIu64 " bytes)", d->dir,
		          s->seq, s->size);
		seg_remove(d, s);
		d->reclaimed++;
	}
	return rc;
}

/*
 * Frees file bytes until esz more fit under d->limit. Returns 1 when they
 * do, 0 when nothing more can be freed, or -errno (reclaim failed).
 */
static int room_make(struct disk *d, uint64_t esz, double now)
{
	while (d->used + esz > d->limit) {
		struct seg *best = NULL;
		for (struct seg *s = d->first; s; s = s->next)
			if (s != d->head && (s->live < s->size || s->size == 0) &&
			    (!best || s->live < best->live))
				best = s;
		if (best && d->used + best->live <= d->capacity) {
			int rc = reclaim(d, best);
			if (rc < 0)
				return rc;
			continue;
		}
		if (d->head && d->head->live < d->head->size) {
			d->head = NULL; /* sealed: reclaimable from now on */
			continue;
		}
		struct policy_entry *v = policy_victim(d->pol, now);
		if (!v)
			return 0;
		evict(d, entry_of(v));
	}
	return 1;
}

/* ---- open and recovery ----------------------------------------------- */

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

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The sequence numbers of the segment files in the directory, sorted. */
static int list_segments(struct disk *d, uint64_t **out, size_t *n)
{
	int fd = dup(d->dirfd);
	DIR *dh = fd < 0 ? NULL : fdopendir(fd);
	if (!dh) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	uint64_t *v = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(dh)) != NULL) {
		const char *nm = de->d_name;
		if (strlen(nm) != SEG_NAME_LEN || strncmp(nm, "seg-", 4) != 0 ||
		    strcmp(nm + 20, ".log") != 0 || strspn(nm + 4, "0123456789abcdef") != 16)
			continue;
		if (len == cap) {
			cap = cap ? cap * 2 : 64;
			uint64_t *nv = realloc(v, cap * sizeof *v);
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[len++] = strtoull(nm + 4, NULL, 16);
	}
	closedir(dh);
	if (rc < 0) {
		free(v);
		return rc;
	}
	if (len > 0)
		qsort(v, len, sizeof *v, cmp_u64);
	*out = v;
	*n = len;
	return 0;
}

/* Adds a checked entry found by the scan, superseding an earlier one. */
static int scan_add(struct disk *d, struct seg *s, uint64_t off, const struct hdr *h, double now)
{
	if (h->gen < d->min_gen)
		d->min_gen = h->gen;
	if (h->gen >= atomic_load(&d->next_gen))
		atomic_store(&d->next_gen, h->gen + 1);
	uint64_t hash = chunk_id_hash(&h->id);
	struct dent *old = idx_find(d, &h->id, hash);
	if (old && old->gen > h->gen)
		return 0; /* an older copy: the newer one stays */
	if (old)
		entry_drop(d, old);
	struct dent *e = calloc(1, sizeof *e);
	if (!e || idx_reserve(d) < 0) {
		free(e);
		return -ENOMEM;
	}
	e->id = h->id;
	e->hash = hash;
	e->off = off;
	e->var_len = (uint32_t)var_len_of(h);
	e->esz = entry_size(e->var_len, h->data_len);
	e->data_len = h->data_len;
	e->data_crc = h->data_crc;
	e->gen = h->gen;
	e->chunk0 = h->index == 0;
	idx_put(d->slots, d->nslots, e);
	d->count++;
	seg_link_entry(s, e);
	d->live += e->esz;
	policy_insert(d->pol, &e->pe, hash, e->esz, now);
	return 0;
}

/* Scans one segment file into the index; truncates a torn or bad tail. */
static int scan_segment(struct disk *d, uint64_t seq, double now, unsigned char **var,
                        size_t *cap, char *err, size_t errlen)
{
	char name[SEG_NAME_LEN + 1];
	seg_name(name, seq);
	int fd = openat(d->dirfd, name, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;
		snprintf(err, errlen, "cache directory %s: %s: %s() failed: %s", d->dir, name,
		         fd < 0 ? "open" : "fstat", strerror(e));
		if (fd >= 0)
			close(fd);
		return -e;
	}
	struct seg *s = seg_add(d, seq, fd, 0);
	if (!s) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint64_t fsize = (uint64_t)st.st_size, off = 0;
	unsigned char magic[6];
	if (fsize >= sizeof magic && pread_all(fd, magic, sizeof magic, 0) == 0 &&
	    memcmp(magic, "LRDR", 4) == 0 && get16(magic + 4) != HDR_VERSION) {
		log_warn(TOPIC, "%s/%s: written in format version %u, this larder reads %u: "
		         "discarded (its chunks are fetched again)", d->dir, name, get16(magic + 4),
		         HDR_VERSION);
		fsize = 0; /* the truncation below empties it, and it is removed */
	}
	int rc = 0;
	while (off < fsize) {
		struct hdr h;
		if ((rc = entry_read(fd, off, fsize, &h, var, cap)) == 1)
			break;
		if (rc == 0)
			rc = scan_add(d, s, off, &h, now);
		if (rc == -ENOMEM) {
			snprintf(err, errlen, "out of memory");
			return rc;
		}
		if (rc < 0)
			break;
		off += entry_size(var_len_of(&h), h.data_len);
	}
	if (rc < 0) {
		/* The device failed, not the format: keep the rest, unscanned. */
		log_warn(TOPIC, "%s/%s: pread() at offset %" PRIu64 " failed: %s; the rest of the "
		         "segment is ignored", d->dir, name, off, strerror(-rc));
	} else if (off < fsize || off < (uint64_t)st.st_size) {
		if (fsize > 0)
			log_warn(TOPIC, "%s/%s: bad or torn entry at offset %" PRIu64 " of %" PRIu64
			         "; truncating", d->dir, name, off, fsize);
		if (ftruncate(fd, (off_t)off) == 0)
			fsize = off;
		else
			log_warn(TOPIC, "%s/%s: ftruncate() failed: %s", d->dir, name, strerror(errno));
	}
	s->size = fsize;
	d->used += fsize;
	if (fsize == 0)
		seg_remove(d, s);
	return 0;
}

/* ---- tombstones ------------------------------------------------------- */

struct tomb {
	uint64_t gen;
	bool prefix;
	struct chunk_id name;      /* of (bucket, key), for exact ones */
	char *bucket, *key;        /* one allocation, bucket first */
};

/* The identity of (bucket, key) regardless of version. */
static void name_id(const char *bucket, const char *key, struct chunk_id *out)
{
	chunk_id_make(bucket, key, "", UINT64_MAX, out);
}

static size_t tomb_encode(unsigned char *b, uint64_t gen, bool prefix, const char *bucket,
                          size_t bl, const char *key, size_t kl)
{
	memcpy(b, "LRDT", 4);
	put16(b + 4, TOMB_VERSION);
	put16(b + 6, prefix ? TOMB_PREFIX : 0);
	put64(b + 8, gen);
	put16(b + 16, (uint16_t)bl);
	put16(b + 18, (uint16_t)kl);
	memcpy(b + TOMB_HDR, bucket, bl);
	memcpy(b + TOMB_HDR + bl, key, kl);
	uint32_t crc = crc32c(0, b, 20);
	put32(b + 20, crc32c(crc, b + TOMB_HDR, bl + kl));
	return TOMB_HDR + bl + kl;
}

/* Parses the record at b (n bytes left) into t (names allocated).
 * Returns its length, 0 when it is bad or torn, or -ENOMEM. */
static long tomb_parse(const unsigned char *b, size_t n, struct tomb *t)
{
	if (n < TOMB_HDR || memcmp(b, "LRDT", 4) != 0 || get16(b + 4) != TOMB_VERSION ||
	    (get16(b + 6) & ~TOMB_PREFIX) != 0)
		return 0;
	size_t bl = get16(b + 16), kl = get16(b + 18);
	if (n - TOMB_HDR < bl + kl || memchr(b + TOMB_HDR, '\0', bl + kl))
		return 0;
	uint32_t crc = crc32c(0, b, 20);
	if (crc32c(crc, b + TOMB_HDR, bl + kl) != get32(b + 20))
		return 0;
	if (!(t->bucket = malloc(bl + kl + 2)))
		return -ENOMEM;
	memcpy(t->bucket, b + TOMB_HDR, bl);
	t->bucket[bl] = '\0';
	t->key = t->bucket + bl + 1;
	memcpy(t->key, b + TOMB_HDR + bl, kl);
	t->key[kl] = '\0';
	t->gen = get64(b + 8);
	t->prefix = get16(b + 6) & TOMB_PREFIX;
	name_id(t->bucket, t->key, &t->name);
	return (long)(TOMB_HDR + bl + kl);
}

static void tombs_free(struct tomb *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].bucket);
	free(t);
}

/* Reads TOMB_NAME into *out (sorted: exact ones by name, then prefixes).
 * *torn: the file held bytes past its last good record. */
static int tombs_load(struct disk *d, struct tomb **out, size_t *nout, bool *torn)
{
	*out = NULL;
	*nout = 0;
	*torn = false;
	int fd = openat(d->dirfd, TOMB_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	unsigned char *buf = NULL;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	size_t len = rc == 0 ? (size_t)st.st_size : 0;
	if (rc == 0 && len > 0 && !(buf = malloc(len)))
		rc = -ENOMEM;
	if (rc == 0 && len > 0 && (rc = pread_all(fd, buf, len, 0)) == -ENODATA)
		rc = 0, len = 0; /* shrank under us: nobody else writes it, so never */
	close(fd);
	struct tomb *t = NULL;
	size_t n = 0, cap = 0, off = 0;
	while (rc == 0 && off < len) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			struct tomb *nt = realloc(t, cap * sizeof *t);
			if (!nt) {
				rc = -ENOMEM;
				break;
			}
			t = nt;
		}
		long k = tomb_parse(buf + off, len - off, &t[n]);
		if (k < 0)
			rc = (int)k;
		if (k <= 0)
			break;
		if (t[n].gen >= atomic_load(&d->next_gen))
			atomic_store(&d->next_gen, t[n].gen + 1);
		off += (size_t)k;
		n++;
	}
	free(buf);
	if (rc < 0) {
		tombs_free(t, n);
		return rc;
	}
	if (off < len) {
		*torn = true;
		log_warn(TOPIC, "%s/%s: bad or torn record at offset %zu of %zu; dropped", d->dir,
		         TOMB_NAME, off, len);
	}
	*out = t;
	*nout = n;
	return 0;
}

/* Rewrites TOMB_NAME with t[0, n) (via a temporary file and rename, so a
 * crash leaves the old or the new file whole), then opens it for appends. */
static int tombs_rewrite(struct disk *d, const struct tomb *t, size_t n, bool rewrite)
{
	int rc = 0;
	if (rewrite) {
		int fd = openat(d->dirfd, TOMB_TMP, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		uint64_t off = 0;
		for (size_t i = 0; i < n && rc == 0; i++) {
			size_t bl = strlen(t[i].bucket), kl = strlen(t[i].key);
			unsigned char *b = malloc(TOMB_HDR + bl + kl);
			if (!b) {
				rc = -ENOMEM;
				break;
			}
			struct iovec iov = { b, tomb_encode(b, t[i].gen, t[i].prefix, t[i].bucket, bl,
			                                    t[i].key, kl) };
			rc = pwritev_all(fd, &iov, 1, off);
			off += TOMB_HDR + bl + kl;
			free(b);
		}
		if (rc == 0 && fdatasync(fd) < 0)
			rc = -errno;
		close(fd);
		if (rc == 0 && renameat(d->dirfd, TOMB_TMP, d->dirfd, TOMB_NAME) < 0)
			rc = -errno;
		if (rc < 0) {
			unlinkat(d->dirfd, TOMB_TMP, 0);
			return rc;
		}
	}
	d->tfd = openat(d->dirfd, TOMB_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	struct stat st;
	if (d->tfd < 0 || fstat(d->tfd, &st) < 0)
		return -errno;
	d->tsize = (uint64_t)st.st_size;
	/* The file's name (new, or renamed) must survive a crash too. */
	return fsync(d->dirfd) < 0 ? -errno : 0;
}

static int cmp_id(const struct chunk_id *a, const struct chunk_id *b)
{
	return memcmp(a->b, b->b, CHUNK_ID_LEN);
}

static bool tomb_same(const struct tomb *x, const struct tomb *y)
{
	return x->prefix == y->prefix &&
	       (x->prefix ? strcmp(x->bucket, y->bucket) == 0 && strcmp(x->key, y->key) == 0
	                  : cmp_id(&x->name, &y->name) == 0);
}

/* Exact tombstones first, by name; prefixes after, by bucket and key; the
 * newest first among those naming the same thing. */
static int cmp_tomb(const void *a, const void *b)
{
	const struct tomb *x = a, *y = b;
	if (x->prefix != y->prefix)
		return x->prefix - y->prefix;
	int c = x->prefix ? strcmp(x->bucket, y->bucket) : cmp_id(&x->name, &y->name);
	if (c == 0 && x->prefix)
		c = strcmp(x->key, y->key);
	if (c != 0)
		return c;
	return x->gen < y->gen ? 1 : x->gen > y->gen ? -1 : 0;
}

/* Keeps, of sorted tombstones naming the same thing, only the newest: it
 * covers all an older one does. So repeated writes to one key, or repeated
 * DeleteObjects on one bucket (each a whole-bucket prefix), cost recovery
 * one lookup, not one per write. Returns the count left. */
static size_t tombs_dedupe(struct tomb *t, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k > 0 && tomb_same(&t[k - 1], &t[i]))
			free(t[i].bucket);
		else
			t[k++] = t[i];
	}
	return k;
}

/* Whether a tombstone newer than gen covers (bucket, key). */
static bool tombstoned(const struct tomb *t, size_t n, size_t nexact, const char *bucket,
                       const char *key, const struct chunk_id *name, uint64_t gen)
{
	size_t lo = 0, hi = nexact;
	while (lo < hi) { /* the first exact one >= name */
		size_t mid = lo + (hi - lo) / 2;
		if (cmp_id(&t[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < nexact && cmp_id(&t[lo].name, name) == 0; lo++)
		if (t[lo].gen > gen)
			return true;
	for (size_t i = nexact; i < n; i++)
		if (t[i].gen > gen && strcmp(t[i].bucket, bucket) == 0 &&
		    strncmp(t[i].key, key, strlen(t[i].key)) == 0)
			return true;
	return false;
}

/* ---- recovery of object metadata ---------------------------------------- */

struct rec {
	struct chunk_id name;
	uint64_t gen;
	struct dent *e;
};

/* By name, then newest first. */
static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	int c = cmp_id(&x->name, &y->name);
	if (c != 0)
		return c;
	return x->gen < y->gen ? 1 : x->gen > y->gen ? -1 : 0;
}

/* Reads e's header and names (NUL-terminated copies in *names). */
static int rec_names(struct disk *d, struct dent *e, struct hdr *h, unsigned char **var,
                     size_t *cap, char **names)
{
	if (entry_read(e->seg->fd, e->off, e->off + e->esz, h, var, cap) != 0)
		return -1;
	char *nb = malloc((size_t)h->bucket_len + h->key_len + h->etag_len + 3);
	if (!nb)
		return -1;
	/* Empty names leave *var unallocated: never copy from NULL. */
	const unsigned char *p = *var ? *var : (const unsigned char *)"";
	char *b = nb, *k = b + h->bucket_len + 1, *t = k + h->key_len + 1;
	memcpy(b, p, h->bucket_len);
	b[h->bucket_len] = '\0';
	memcpy(k, p + h->bucket_len, h->key_len);
	k[h->key_len] = '\0';
	memcpy(t, p + h->bucket_len + h->key_len, h->etag_len);
	t[h->etag_len] = '\0';
	*names = nb;
	return 0;
}

/*
 * Reports to cb the newest chunk-0 entry of every (bucket, key) that no
 * newer tombstone covers, re-reading its names and metadata (the scan kept
 * only the index). Older chunk-0 entries of the same object, and covered
 * ones, are dropped: their metadata is stale.
 */
static int recover_report(struct disk *d, const struct tomb *t, size_t nt, store_recover_cb cb,
                          void *arg, unsigned char **var, size_t *cap)
{
	size_t nexact = 0;
	while (nexact < nt && !t[nexact].prefix)
		nexact++;
	struct rec *v = NULL;
	size_t n = 0, vcap = 0;
	for (size_t i = 0; i < d->nslots; i++) {
		struct dent *e = d->slots[i];
		struct hdr h;
		char *names;
		if (!e || !e->chunk0 || rec_names(d, e, &h, var, cap, &names) != 0)
			continue; /* changed under us since the scan: the read will fail it */
		if (n == vcap) {
			vcap = vcap ? vcap * 2 : 256;
			struct rec *nv = realloc(v, vcap * sizeof *v);
			if (!nv) {
				free(names);
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n].gen = e->gen;
		v[n].e = e;
		name_id(names, names + h.bucket_len + 1, &v[n++].name);
		free(names);
	}
	if (n > 0)
		qsort(v, n, sizeof *v, cmp_rec);
	for (size_t i = 0; i < n; i++) {
		struct dent *e = v[i].e;
		struct hdr h;
		char *names = NULL;
		bool stale = i > 0 && cmp_id(&v[i - 1].name, &v[i].name) == 0;
		if (!stale && rec_names(d, e, &h, var, cap, &names) != 0)
			continue;
		const char *b = names, *k = stale ? NULL : names + h.bucket_len + 1;
		if (stale || tombstoned(t, nt, nexact, b, k, &v[i].name, e->gen)) {
			entry_drop(d, e);
			free(names);
			continue;
		}
		const unsigned char *p = *var;
		struct chunk_origin o = {
			.bucket = b, .key = k, .etag = k + h.key_len + 1, .index = h.index,
			.meta = h.meta_len ? p + h.bucket_len + h.key_len + h.etag_len : NULL,
			.meta_len = h.meta_len, .gen = e->gen,
		};
		if (cb)
			cb(arg, &o);
		free(names);
	}
	free(v);
	return 0;
}

/* Recovers metadata under the tombstones, then keeps only the tombstones
 * an entry on disk is still older than. */
static int recover(struct disk *d, store_recover_cb cb, void *arg, unsigned char **var,
                   size_t *cap, char *err, size_t errlen)
{
	struct tomb *t;
	size_t nt;
	bool torn;
	int rc = tombs_load(d, &t, &nt, &torn);
	if (rc < 0) {
		snprintf(err, errlen, "cache directory %s: reading %s failed: %s", d->dir, TOMB_NAME,
		         strerror(-rc));
		return rc;
	}
	size_t loaded = nt;
	if (nt > 0) {
		qsort(t, nt, sizeof *t, cmp_tomb);
		nt = tombs_dedupe(t, nt);
	}
	if ((rc = recover_report(d, t, nt, cb, arg, var, cap)) < 0) {
		snprintf(err, errlen, "out of memory");
		tombs_free(t, nt);
		return rc;
	}
	size_t keep = 0;
	for (size_t i = 0; i < nt; i++) {
		if (t[i].gen > d->min_gen)
			t[keep++] = t[i];
		else
			free(t[i].bucket);
	}
	rc = tombs_rewrite(d, t, keep, torn || keep < loaded);
	if (rc < 0)
		snprintf(err, errlen, "cache directory %s: writing %s failed: %s", d->dir, TOMB_NAME,
		         strerror(-rc));
	tombs_free(t, keep);
	return rc;
}

struct disk *disk_open(const char *dir, uint64_t capacity, uint64_t segment_bytes,
                       enum policy_kind policy, double stale_after_s,
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
	uint64_t reserve = segment_bytes < capacity / 4 ? segment_bytes : capacity / 4;
	d->limit = capacity - reserve;
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

	uint64_t *seqs = NULL;
	size_t nseqs = 0, cap = 0;
	unsigned char *var = NULL;
	if ((rc = list_segments(d, &seqs, &nseqs)) < 0) {
		snprintf(err, errlen, "cache directory %s: reading it failed: %s", dir, strerror(-rc));
		goto fail;
	}
	double now = clock_mono_s();
	for (size_t i = 0; i < nseqs && rc == 0; i++)
		rc = scan_segment(d, seqs[i], now, &var, &cap, err, errlen);
	d->next_seq = nseqs ? seqs[nseqs - 1] + 1 : 1;
	free(seqs);
	/* A smaller capacity than last time: whole oldest segments go. */
	while (rc == 0 && d->used > d->limit && d->first) {
		struct seg *s = d->first;
		while (s->first) {
			evict(d, s->first);
		}
		seg_remove(d, s);
	}
	if (rc == 0 && (rc = head_ensure(d, 0)) < 0)
		snprintf(err, errlen, "cache directory %s: cannot create a segment: %s", dir,
		         strerror(-rc));
	if (rc == 0)
		rc = recover(d, cb, cb_arg, &var, &cap, err, errlen);
	free(var);
	if (rc < 0)
		goto fail;
	log_info(TOPIC, "%s: %" PRIu64 " entries in %" PRIu64 " segments, %" PRIu64 " of %" PRIu64
	         " bytes", dir, (uint64_t)d->count, d->nsegs, d->used, capacity);
	return d;
fail:
	disk_close(d);
	return NULL;
}

void disk_close(struct disk *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nslots; i++)
		free(d->slots[i]);
	free(d->slots);
	while (d->first) {
		struct seg *s = d->first;
		d->first = s->next;
		seg_unref(s);
	}
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

/* ---- the API ---------------------------------------------------------- */

int disk_write(struct disk *d, const struct chunk_id *id, const struct chunk_origin *o,
               const void *data, size_t len)
{
	const char *bucket = o && o->bucket ? o->bucket : "";
	const char *key = o && o->key ? o->key : "";
	const char *etag = o && o->etag ? o->etag : "";
	size_t bl = strlen(bucket), kl = strlen(key), el = strlen(etag);
	size_t ml = o && o->meta ? o->meta_len : 0;
	if (bl > UINT16_MAX || kl > UINT16_MAX || el > UINT16_MAX || ml > MAX_META ||
	    len > UINT32_MAX)
		return -EINVAL;

	/* Everything that needs no lock: the header, the CRCs, the entry. */
	struct hdr h = {
		.id = *id, .index = o ? o->index : 0,
		.bucket_len = (uint16_t)bl, .key_len = (uint16_t)kl, .etag_len = (uint16_t)el,
		.meta_len = (uint32_t)ml, .data_len = (uint32_t)len,
		.data_crc = crc32c(0, data, len),
		.gen = o && o->gen ? o->gen : disk_next_gen(d),
	};
	size_t vl = bl + kl + el + ml;
	uint64_t esz = entry_size(vl, len);
	unsigned char *hb = malloc(HDR_LEN + vl);
	struct dent *e = calloc(1, sizeof *e);
	if (!hb || !e) {
		free(hb);
		free(e);
		return -ENOMEM;
	}
	unsigned char *v = hb + HDR_LEN;
	memcpy(v, bucket, bl);
	memcpy(v + bl, key, kl);
	memcpy(v + bl + kl, etag, el);
	if (ml)
		memcpy(v + bl + kl + el, o->meta, ml);
	hdr_encode(&h, hb, v);
	e->id = *id;
	e->hash = chunk_id_hash(id);
	e->esz = esz;
	e->var_len = (uint32_t)vl;
	e->data_len = (uint32_t)len;
	e->data_crc = h.data_crc;
	e->gen = h.gen;
	e->chunk0 = h.index == 0;

	pthread_mutex_lock(&d->wlock);
	pthread_mutex_lock(&d->lock);
	double now = clock_mono_s();
	struct dent *old = idx_find(d, id, e->hash);
	if (old)
		entry_drop(d, old); /* a write replaces */
	int rc = 0;
	if (esz > d->limit || !policy_admit(d->pol, e->hash, esz, now))
		goto out;
	struct policy_entry *victim;
	while (policy_used(d->pol) + esz > policy_capacity(d->pol) &&
	       (victim = policy_victim(d->pol, now)) != NULL) {
		evict(d, entry_of(victim));
	}
	if ((rc = room_make(d, esz, now)) <= 0 || (rc = idx_reserve(d)) < 0)
		goto out;
	if ((rc = head_ensure(d, esz)) < 0) {
		d->write_errors++;
		goto out;
	}
	struct seg *s = d->head;
	uint64_t off = s->size;
	s->size += esz;
	d->used += esz;
	atomic_fetch_add(&s->refs, 1);
	pthread_mutex_unlock(&d->lock);

	struct iovec iov[3] = {
		{ hb, HDR_LEN + vl },
		{ (void *)(uintptr_t)data, len },
		{ (void *)(uintptr_t)zeros, (size_t)(esz - HDR_LEN - vl - len) },
	};
	rc = pwritev_all(s->fd, iov, 3, off);

	pthread_mutex_lock(&d->lock);
	if (rc < 0) {
		d->write_errors++;
		append_undo(d, s, off, esz);
		log_warn(TOPIC, "%s: segment %016" PRIx64 ": pwritev() failed: %s", d->dir, s->seq,
		         strerror(-rc));
	} else {
		e->off = off;
		idx_put(d->slots, d->nslots, e);
		d->count++;
		seg_link_entry(s, e);
		d->live += esz;
		policy_insert(d->pol, &e->pe, e->hash, esz, now);
		e = NULL;
	}
	seg_unref(s);
out:
	if (rc > 0)
		rc = 0;
	pthread_mutex_unlock(&d->lock);
	pthread_mutex_unlock(&d->wlock);
	free(e);
	free(hb);
	return rc;
}

int disk_read(struct disk *d, const struct chunk_id *id, void *out, size_t len)
{
	uint64_t hash = chunk_id_hash(id);
	pthread_mutex_lock(&d->lock);
	struct dent *e = idx_find(d, id, hash);
	if (!e || len != e->data_len) {
		pthread_mutex_unlock(&d->lock);
		return e ? -EINVAL : -ENOENT;
	}
	struct seg *s = e->seg;
	uint64_t off = e->off;
	uint32_t vl = e->var_len, crc = e->data_crc;
	atomic_fetch_add(&s->refs, 1);
	policy_touch(d->pol, &e->pe, clock_mono_s());
	pthread_mutex_unlock(&d->lock);

	unsigned char b[HDR_LEN];
	struct hdr h;
	bool bad = false;
	int rc = pread_all(s->fd, b, HDR_LEN, off);
	if (rc == 0)
		bad = !hdr_decode(b, &h) || !chunk_id_eq(&h.id, id) || h.data_len != len ||
		      h.data_crc != crc;
	if (rc == 0 && !bad)
		rc = pread_all(s->fd, out, len, off + HDR_LEN + vl);
	if (rc == 0 && !bad)
		bad = crc32c(0, out, len) != crc;
	if (rc == -ENODATA) /* short: the file was cut */
		bad = true;
	if (!bad && rc == 0) {
		seg_unref(s);
		return 0;
	}

	pthread_mutex_lock(&d->lock);
	e = idx_find(d, id, hash);
	if (e && e->seg == s && e->off == off)
		entry_drop(d, e);
	if (bad)
		d->corrupt++;
	else
		d->read_errors++;
	uint64_t seq = s->seq;
	seg_unref(s);
	pthread_mutex_unlock(&d->lock);
	if (bad)
		log_warn(TOPIC, "%s: segment %016" PRIx64 " offset %" PRIu64 ": checksum mismatch; "
		         "entry dropped", d->dir, seq, off);
	else
		log_warn(TOPIC, "%s: segment %016" PRIx64 ": pread() failed: %s", d->dir, seq,
		         strerror(-rc));
	return bad ? -EIO : rc;
}

uint64_t disk_next_gen(struct disk *d)
{
	return atomic_fetch_add(&d->next_gen, 1);
}

int disk_invalidate(struct disk *d, const char *bucket, const char *key, bool prefix)
{
	size_t bl = strlen(bucket), kl = strlen(key);
	if (bl > UINT16_MAX || kl > UINT16_MAX)
		return -EINVAL;
	unsigned char *b = malloc(TOMB_HDR + bl + kl);
	if (!b)
		return -ENOMEM;
	pthread_mutex_lock(&d->tlock);
	/* Taken under tlock, so the file's records are in generation order. */
	size_t n = tomb_encode(b, disk_next_gen(d), prefix, bucket, bl, key, kl);
	struct iovec iov = { b, n };
	int rc = d->tfd < 0 ? -EBADF : pwritev_all(d->tfd, &iov, 1, d->tsize);
	if (rc == 0 && fdatasync(d->tfd) < 0)
		rc = -errno;
	if (rc == 0) {
		d->tsize += n;
		d->tombstones++;
	} else if (d->tfd >= 0 && ftruncate(d->tfd, (off_t)d->tsize) < 0) {
		/* A torn record stays: recovery stops there, so later ones would
		 * be lost. Nothing more is appended after it. */
		close(d->tfd);
		d->tfd = -1;
	}
	pthread_mutex_unlock(&d->tlock);
	free(b);
	if (rc < 0)
		log_warn(TOPIC, "%s/%s: writing a tombstone for %s/%s%s failed: %s", d->dir, TOMB_NAME,
		         bucket, key, prefix ? "*" : "", strerror(-rc));
	return rc;
}

bool disk_lookup(struct disk *d, const struct chunk_id *id, size_t *len)
{
	pthread_mutex_lock(&d->lock);
	struct dent *e = idx_find(d, id, chunk_id_hash(id));
	if (e && len)
		*len = e->data_len;
	pthread_mutex_unlock(&d->lock);
	return e != NULL;
}

void disk_drop(struct disk *d, const struct chunk_id *id)
{
	pthread_mutex_lock(&d->lock);
	struct dent *e = idx_find(d, id, chunk_id_hash(id));
	if (e)
		entry_drop(d, e);
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
		.read_errors = d->read_errors, .corrupt = d->corrupt,
	};
	pthread_mutex_unlock(&d->lock);
}

int disk_check(struct disk *d)
{
	int bad = 0;
	pthread_mutex_lock(&d->lock);
	uint64_t used = 0, live = 0, nsegs = 0, entries = 0;
	for (struct seg *s = d->first; s; s = s->next) {
		uint64_t sl = 0;
		for (struct dent *e = s->first; e; e = e->snext) {
			bad |= e->seg != s || e->off + e->esz > s->size ||
			       idx_find(d, &e->id, e->hash) != e || e->off % ENTRY_ALIGN != 0;
			sl += e->esz;
			entries++;
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
	       n != d->count || d->used > d->capacity || policy_used(d->pol) != d->live ||
	       policy_count(d->pol) != d->count || policy_check(d->pol) != 0;
	pthread_mutex_unlock(&d->lock);
	return bad ? -1 : 0;
}
