/*
 * disk_internal.h - what the NVMe tier's files (disk.c, disk_format.c,
 * disk_index.c, disk_recover.c, disk_tomb.c) share: the structures of the
 * index and the segments, the on-disk constants, and the functions one file
 * calls in another. Private to store/; everything else uses disk.h.
 */
#ifndef LARDER_DISK_INTERNAL_H
#define LARDER_DISK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/crc.h" /* crc32c: entries and tombstones carry CRC32Cs */
#include "base/file.h" /* file_pread_all, file_pwritev_all */
#include "store/chunk.h"
#include "store/disk.h"
#include "store/pinset.h"
#include "store/policy.h"

#define TOPIC "disk"
#define HDR_LEN 72u
#define HDR_CRC_OFF 68u
#define HDR_VERSION 2u
#define HDR_F_COPY 1u              /* struct hdr flags: a copy (disk_format.c) */
#define TOMB_NAME "tombstones.log"
/* The chunk size the entries were cut to, in decimal (disk_open). */
#define CHUNK_SIZE_NAME "chunk-size"
#define TOMB_TMP "tombstones.tmp"
/* Space kept allocated past the tombstone file's end (disk_tomb.c). */
#define TOMB_RESERVE (1u << 20)
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
	bool copy;                  /* a cluster node's copy of another node's chunk (HDR_F_COPY) */
	bool pinned;                /* out of the policy: never a victim (reclaim still moves it) */
	struct dent *sprev, *snext; /* seg's live list */
};

struct seg {
	uint64_t seq;
	int fd;
	int dfd;                    /* the head's, opened O_DIRECT (large entries), or -1 */
	_Atomic int refs;           /* 1 for d->segs, 1 per pin */
	uint64_t size, live;
	struct dent *first, *last;
	struct seg *prev, *next;    /* d->segs, by seq */
};

struct disk {
	int dirfd;
	char *dir;
	uint64_t capacity, limit, reserve, seg_bytes;
	pthread_mutex_t lock, wlock;
	struct policy *pol;
	struct dent **slots;
	size_t nslots, count;
	struct seg *first, *last, *head;
	struct seg *reclaiming;     /* the segment reclaim is copying out of, or NULL */
	_Atomic bool no_direct;     /* the file system refused O_DIRECT: all through the page cache */
	uint64_t nsegs, next_seq, used, live;
	uint64_t evictions, reclaimed, write_errors, read_errors, corrupt;
	struct pinset pins;         /* pinned ids, held here or still to come */
	uint64_t pinned, npinned;   /* on-disk bytes and count of pinned entries (in live) */
	store_change_cb evicted;    /* told of each eviction, under lock */
	void *evicted_arg;
	_Atomic uint64_t next_gen;  /* generations handed out so far + 1 */
	uint64_t min_gen;           /* at open: the oldest entry in any segment */
	pthread_mutex_t tlock;      /* guards the tombstone file's appends */
	int tfd;                    /* TOMB_NAME, or -1 */
	uint64_t tsize;
	uint64_t treserved;         /* the file's space allocated up to here (TOMB_RESERVE) */
	uint64_t tombstones;        /* written since open */
	bool discard;               /* at open: the entries were cut to another chunk size */
	bool scan_failed;           /* at open: a segment could not be read whole */
	bool doubtful;              /* at open: tombstones may have been lost (disk_doubtful) */
};

struct hdr {
	struct chunk_id id;
	uint64_t index, gen;
	uint16_t bucket_len, key_len, etag_len, flags;
	uint32_t meta_len, data_len, data_crc;
};

struct tomb {
	uint64_t gen;
	bool prefix;
	struct chunk_id name;      /* of (bucket, key), for exact ones */
	char *bucket, *key;        /* one allocation, bucket first */
};

/* Little-endian fields of headers and tombstone records. */
static inline void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}
static inline void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> 8 * i);
}
static inline void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> 8 * i);
}
static inline uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ---- the entry format and file I/O (disk_format.c) ---- */

uint64_t dk_var_len_of(const struct hdr *h);

uint64_t dk_entry_size(uint64_t var_len, uint64_t data_len);

/* Encodes h into b[0, HDR_LEN) and seals it with the CRC of b and var. */
void dk_hdr_encode(const struct hdr *h, unsigned char *b, const unsigned char *var);

/* Decodes the fixed part; false when it is not a version-1 header. */
bool dk_hdr_decode(const unsigned char *b, struct hdr *h);


/*
 * Reads and checks the entry at off (which must end by limit): header
 * into h, names and metadata into *var (grown as needed, *cap its size).
 * Returns 0, 1 when the entry is bad or torn, or -errno.
 */
int dk_entry_read(int fd, uint64_t off, uint64_t limit, struct hdr *h, unsigned char **var,
                  size_t *cap);

void dk_seg_name(char out[SEG_NAME_LEN + 1], uint64_t seq);

/* ---- index, segments, room (disk_index.c) ---- */

struct dent *dk_idx_find(struct disk *d, const struct chunk_id *id, uint64_t h);

void dk_idx_put(struct dent **slots, size_t n, struct dent *e);

/* Makes room for one more entry (load <= 3/4). Returns 0 or -ENOMEM. */
int dk_idx_reserve(struct disk *d);

void dk_seg_link_entry(struct seg *s, struct dent *e);

void dk_seg_unref(struct seg *s);

/* A segment object for fd, appended to d's list. NULL when out of memory. */
struct seg *dk_seg_add(struct disk *d, uint64_t seq, int fd, uint64_t size);

/* Removes an empty-of-live-entries segment: unlinks the file, drops the
 * list's reference (the fd closes when no reader has it pinned). */
void dk_seg_remove(struct disk *d, struct seg *s);

/* Removes s if no live entry is left in it, unless it is the head or
 * being reclaimed (reclaim removes it itself). Called with d->lock held. */
void dk_seg_remove_if_empty(struct disk *d, struct seg *s);

/* Gives back the blocks past the end of s's file (its preallocation). */
void dk_seg_trim(struct seg *s);

/* Makes d->head able to take esz more bytes: starts a new segment when
 * there is none or the entry would overflow a non-empty one. The old head
 * is trimmed; the new one is preallocated. */
int dk_head_ensure(struct disk *d, uint64_t esz);

/* The file system refused O_DIRECT (what: the open or the write that got
 * EINVAL): from now on every entry goes through the page cache. Logged once. */
void dk_no_direct(struct disk *d, const char *what);

/* Gives back a reservation of esz bytes at off in s after a failed write:
 * truncates the file; if that fails too the bytes stay counted (dead) and
 * the segment is sealed so nothing is ever appended after them. */
void dk_append_undo(struct disk *d, struct seg *s, uint64_t off, uint64_t esz);

/* Takes e out of the policy (pinned), or puts it back. */
void dk_entry_pin(struct disk *d, struct dent *e, bool on, double now);

/* Forgets an entry; its bytes become dead. */
void dk_entry_drop(struct disk *d, struct dent *e);

/* Capacity, not a drop or a replacement, takes e out. */
void dk_evict(struct disk *d, struct dent *e);

struct dent *dk_entry_of(struct policy_entry *pe);

/* What the policy ranks e by (store/policy.h). */
static inline uint64_t dk_rank(const struct dent *e)
{
	return policy_rank(e->hash, e->copy);
}

/*
 * Frees file bytes until esz more fit under d->limit. Returns 1 when they
 * do, 0 when nothing more can be freed, or -errno (reclaim failed).
 */
int dk_room_make(struct disk *d, uint64_t esz, double now);

/* ---- the scan and recovery at open (disk_recover.c) ---- */

/* The sequence numbers of the segment files in the directory, sorted. */
int dk_list_segments(struct disk *d, uint64_t **out, size_t *n);

/* Scans one segment file into the index; truncates a torn or bad tail. */
int dk_scan_segment(struct disk *d, uint64_t seq, double now, unsigned char **var,
                    size_t *cap, char *err, size_t errlen);

/* Recovers metadata under the tombstones, then keeps only the tombstones
 * an entry on disk is still older than. */
int dk_recover(struct disk *d, store_recover_cb cb, void *arg, unsigned char **var,
               size_t *cap, char *err, size_t errlen);

/* ---- tombstones (disk_tomb.c) ---- */

/* The identity of (bucket, key) regardless of version. */
void dk_name_id(const char *bucket, const char *key, struct chunk_id *out);

void dk_tombs_free(struct tomb *t, size_t n);

/* Reads TOMB_NAME into *out (sorted: exact ones by name, then prefixes).
 * *good: the bytes of its good records, from the start; *state: 0 when
 * that is all of it, 1 when bytes past them were bad or torn, -1 when
 * there is no file. */
int dk_tombs_load(struct disk *d, struct tomb **out, size_t *nout, uint64_t *good, int *state);

/* Rewrites TOMB_NAME with t[0, n) (via a temporary file and rename, so a
 * crash leaves the old or the new file whole), then opens it for appends.
 * Without rewrite, the file is cut to its first good bytes and kept. */
int dk_tombs_rewrite(struct disk *d, const struct tomb *t, size_t n, bool rewrite,
                     uint64_t good);

int dk_cmp_id(const struct chunk_id *a, const struct chunk_id *b);

/* Exact tombstones first, by name; prefixes after, by bucket and key; the
 * newest first among those naming the same thing. */
int dk_cmp_tomb(const void *a, const void *b);

/* Keeps, of sorted tombstones naming the same thing, only the newest: it
 * covers all an older one does. So repeated writes to one key, or repeated
 * DeleteObjects on one bucket (each a whole-bucket prefix), cost recovery
 * one lookup, not one per write. Returns the count left. */
size_t dk_tombs_dedupe(struct tomb *t, size_t n);

/* Whether a tombstone newer than gen covers (bucket, key). */
bool dk_tombstoned(const struct tomb *t, size_t n, size_t nexact, const char *bucket,
                   const char *key, const struct chunk_id *name, uint64_t gen);

#endif
