/*
 * disk_tomb.c - tombstones: the durable record of invalidations that
 * keeps stale object metadata from coming back after a restart.
 *
 * Drops and evictions live in memory only: nothing is written for them.
 * After a restart an entry dropped or evicted earlier comes back if its
 * segment has not been reclaimed yet (its bytes were still counted, so
 * space accounting is unaffected; a corrupt one fails its CRC again).
 * That is harmless for chunks (an id names one version's bytes) but not
 * for object metadata, which chunk-0 entries carry: invalidations (a
 * write through larder, a purge, another node's write) are therefore
 * written, as tombstones, to TOMB_NAME, and fdatasync'd before
 * disk_invalidate returns (disk_invalidate_unsynced, for a version change
 * a reader saw, leaves that to the kernel or the next synced one). A tombstone (generation, bucket, key or key
 * prefix) makes recovery drop every chunk-0 entry it names with an older
 * generation. It is kept while any entry on disk is older than it: each
 * open rewrites the file without the ones no entry needs any more.
 *
 * A full file system must not lose one: a write acknowledged to its
 * client whose tombstone is lost comes back as the old version after a
 * restart. So the file keeps TOMB_RESERVE bytes allocated past its end
 * (fallocate, FALLOC_FL_KEEP_SIZE), topped up when half is used: appends
 * land in allocated space, and fail only once a full file system has used
 * up the reserve (then the error is logged; the metadata may come back).
 *
 * Tombstone record, little-endian: magic "LRDT", version u16 (1), flags
 * u16 (bit 0: key is a prefix), generation u64, bucket_len u16, key_len
 * u16, crc32c u32 of bytes [0, 20) and the names; then bucket, key. A
 * record that does not check out ends the file (a torn tail: truncated).
 */
#include "store/disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

void dk_name_id(const char *bucket, const char *key, struct chunk_id *out)
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
	dk_name_id(t->bucket, t->key, &t->name);
	return (long)(TOMB_HDR + bl + kl);
}

void dk_tombs_free(struct tomb *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].bucket);
	free(t);
}

int dk_tombs_load(struct disk *d, struct tomb **out, size_t *nout, uint64_t *good, int *state)
{
	*out = NULL;
	*nout = 0;
	*good = 0;
	*state = 0;
	int fd = openat(d->dirfd, TOMB_NAME, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		*state = -1;
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	struct stat st;
	unsigned char *buf = NULL;
	int rc = fstat(fd, &st) < 0 ? -errno : 0;
	size_t len = rc == 0 ? (size_t)st.st_size : 0;
	if (rc == 0 && len > 0 && !(buf = malloc(len)))
		rc = -ENOMEM;
	if (rc == 0 && len > 0 && (rc = file_pread_all(fd, buf, len, 0)) == -ENODATA)
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
		dk_tombs_free(t, n);
		return rc;
	}
	if (off < len) {
		*state = 1;
		log_warn(TOPIC, "%s/%s: bad or torn record at offset %zu of %zu; dropped: the "
		         "records after it are lost, so every object recovered is revalidated",
		         d->dir, TOMB_NAME, off, len);
	}
	*good = off;
	*out = t;
	*nout = n;
	return 0;
}

/* Allocates the file up to TOMB_RESERVE past its end; a file system that
 * cannot (no fallocate, or full) leaves appends to find their space. */
static void tomb_reserve(struct disk *d)
{
	if (fallocate(d->tfd, FALLOC_FL_KEEP_SIZE, (off_t)d->tsize, TOMB_RESERVE) == 0)
		d->treserved = d->tsize + TOMB_RESERVE;
}

int dk_tombs_rewrite(struct disk *d, const struct tomb *t, size_t n, bool rewrite,
                     uint64_t good)
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
			rc = file_pwritev_all(fd, &iov, 1, off);
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
	/* Appends must follow the good records: after a bad one they would be
	 * lost at the next load. */
	if (!rewrite && (uint64_t)st.st_size > good) {
		if (ftruncate(d->tfd, (off_t)good) < 0)
			return -errno;
		st.st_size = (off_t)good;
	}
	d->tsize = (uint64_t)st.st_size;
	tomb_reserve(d);
	/* The file's name (new, or renamed) must survive a crash too. */
	return fsync(d->dirfd) < 0 ? -errno : 0;
}

int dk_cmp_id(const struct chunk_id *a, const struct chunk_id *b)
{
	return memcmp(a->b, b->b, CHUNK_ID_LEN);
}

static bool tomb_same(const struct tomb *x, const struct tomb *y)
{
	return x->prefix == y->prefix &&
	       (x->prefix ? strcmp(x->bucket, y->bucket) == 0 && strcmp(x->key, y->key) == 0
	                  : dk_cmp_id(&x->name, &y->name) == 0);
}

int dk_cmp_tomb(const void *a, const void *b)
{
	const struct tomb *x = a, *y = b;
	if (x->prefix != y->prefix)
		return x->prefix - y->prefix;
	int c = x->prefix ? strcmp(x->bucket, y->bucket) : dk_cmp_id(&x->name, &y->name);
	if (c == 0 && x->prefix)
		c = strcmp(x->key, y->key);
	if (c != 0)
		return c;
	return x->gen < y->gen ? 1 : x->gen > y->gen ? -1 : 0;
}

size_t dk_tombs_dedupe(struct tomb *t, size_t n)
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

bool dk_tombstoned(const struct tomb *t, size_t n, size_t nexact, const char *bucket,
                   const char *key, const struct chunk_id *name, uint64_t gen)
{
	size_t lo = 0, hi = nexact;
	while (lo < hi) { /* the first exact one >= name */
		size_t mid = lo + (hi - lo) / 2;
		if (dk_cmp_id(&t[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < nexact && dk_cmp_id(&t[lo].name, name) == 0; lo++)
		if (t[lo].gen > gen)
			return true;
	for (size_t i = nexact; i < n; i++)
		if (t[i].gen > gen && strcmp(t[i].bucket, bucket) == 0 &&
		    strncmp(t[i].key, key, strlen(t[i].key)) == 0)
			return true;
	return false;
}

static int tomb_append(struct disk *d, const char *bucket, const char *key, bool prefix,
                       bool sync)
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
	int rc = d->tfd < 0 ? -EBADF : file_pwritev_all(d->tfd, &iov, 1, d->tsize);
	if (rc == 0 && sync && fdatasync(d->tfd) < 0)
		rc = -errno;
	if (rc == 0) {
		d->tsize += n;
		d->tombstones++;
		if (d->treserved < d->tsize + TOMB_RESERVE / 2)
			tomb_reserve(d);
	} else if (d->tfd >= 0) {
		d->treserved = 0; /* the truncation frees the reserve too */
		if (ftruncate(d->tfd, (off_t)d->tsize) < 0) {
			/* A torn record stays: recovery stops there, so later ones
			 * would be lost. Nothing more is appended after it. */
			close(d->tfd);
			d->tfd = -1;
		}
	}
	pthread_mutex_unlock(&d->tlock);
	free(b);
	if (rc < 0)
		log_error(TOPIC, "%s/%s: writing a tombstone for %s/%s%s failed: %s; a restart may "
		          "give back what it invalidated", d->dir, TOMB_NAME, bucket, key,
		          prefix ? "*" : "", strerror(-rc));
	return rc;
}

int disk_invalidate(struct disk *d, const char *bucket, const char *key, bool prefix)
{
	return tomb_append(d, bucket, key, prefix, true);
}

int disk_invalidate_unsynced(struct disk *d, const char *bucket, const char *key)
{
	return tomb_append(d, bucket, key, false, false);
}
