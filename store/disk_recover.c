/*
 * disk_recover.c - disk_open's recovery: the scan of every segment into the
 * index (truncating torn tails), then the report of each object's newest
 * metadata that no tombstone covers.
 *
 * Older formats. A segment written by another version of the format (v1
 * had no generations, so its metadata cannot be ordered) is discarded at
 * open with a log line: the cache starts cold, nothing stale is served.
 */
#include "store/disk_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int dk_list_segments(struct disk *d, uint64_t **out, size_t *n)
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
	struct dent *old = dk_idx_find(d, &h->id, hash);
	if (old && old->gen > h->gen)
		return 0; /* an older copy: the newer one stays */
	if (old)
		dk_entry_drop(d, old);
	struct dent *e = calloc(1, sizeof *e);
	if (!e || dk_idx_reserve(d) < 0) {
		free(e);
		return -ENOMEM;
	}
	e->id = h->id;
	e->hash = hash;
	e->copy = h->flags & HDR_F_COPY;
	e->off = off;
	e->var_len = (uint32_t)dk_var_len_of(h);
	e->esz = dk_entry_size(e->var_len, h->data_len);
	e->data_len = h->data_len;
	e->data_crc = h->data_crc;
	e->gen = h->gen;
	e->chunk0 = h->index == 0;
	dk_idx_put(d->slots, d->nslots, e);
	d->count++;
	dk_seg_link_entry(s, e);
	d->live += e->esz;
	policy_insert(d->pol, &e->pe, dk_rank(e), e->esz, now);
	return 0;
}

int dk_scan_segment(struct disk *d, uint64_t seq, double now, unsigned char **var,
                    size_t *cap, char *err, size_t errlen)
{
	char name[SEG_NAME_LEN + 1];
	dk_seg_name(name, seq);
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
	struct seg *s = dk_seg_add(d, seq, fd, 0);
	if (!s) {
		close(fd);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	uint64_t fsize = (uint64_t)st.st_size, off = 0;
	unsigned char magic[6];
	if (fsize >= sizeof magic && file_pread_all(fd, magic, sizeof magic, 0) == 0 &&
	    memcmp(magic, "LRDR", 4) == 0 && get16(magic + 4) != HDR_VERSION) {
		log_warn(TOPIC, "%s/%s: written in format version %u, this larder reads %u: "
		         "discarded (its chunks are fetched again)", d->dir, name, get16(magic + 4),
		         HDR_VERSION);
		fsize = 0; /* the truncation below empties it, and it is removed */
	}
	if (d->discard)
		fsize = 0; /* cut to another chunk size (disk_open says so once) */
	int rc = 0;
	while (off < fsize) {
		struct hdr h;
		if ((rc = dk_entry_read(fd, off, fsize, &h, var, cap)) == 1)
			break;
		if (rc == 0)
			rc = scan_add(d, s, off, &h, now);
		if (rc == -ENOMEM) {
			snprintf(err, errlen, "out of memory");
			return rc;
		}
		if (rc < 0)
			break;
		off += dk_entry_size(dk_var_len_of(&h), h.data_len);
	}
	if (rc < 0) {
		/* The device failed, not the format: keep the rest, unscanned
		 * (and the tombstones its entries may need: dk_recover). */
		d->scan_failed = true;
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
	} else if ((uint64_t)st.st_blocks * 512 > fsize) {
		(void)ftruncate(fd, (off_t)fsize); /* a head's preallocation, left by a crash */
	}
	s->size = fsize;
	d->used += fsize;
	if (fsize == 0)
		dk_seg_remove(d, s);
	return 0;
}

struct rec {
	struct chunk_id name;
	uint64_t gen;
	struct dent *e;
};

/* By name, then newest first. */
static int cmp_rec(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;
	int c = dk_cmp_id(&x->name, &y->name);
	if (c != 0)
		return c;
	return x->gen < y->gen ? 1 : x->gen > y->gen ? -1 : 0;
}

/* Reads e's header and names (NUL-terminated copies in *names). */
static int rec_names(struct disk *d, struct dent *e, struct hdr *h, unsigned char **var,
                     size_t *cap, char **names)
{
	if (dk_entry_read(e->seg->fd, e->off, e->off + e->esz, h, var, cap) != 0)
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
		dk_name_id(names, names + h.bucket_len + 1, &v[n++].name);
		free(names);
	}
	if (n > 0)
		qsort(v, n, sizeof *v, cmp_rec);
	for (size_t i = 0; i < n; i++) {
		struct dent *e = v[i].e;
		struct hdr h;
		char *names = NULL;
		bool stale = i > 0 && dk_cmp_id(&v[i - 1].name, &v[i].name) == 0;
		if (!stale && rec_names(d, e, &h, var, cap, &names) != 0)
			continue;
		const char *b = names, *k = stale ? NULL : names + h.bucket_len + 1;
		if (stale || dk_tombstoned(t, nt, nexact, b, k, &v[i].name, e->gen)) {
			dk_entry_drop(d, e);
			free(names);
			continue;
		}
		const unsigned char *p = *var;
		struct chunk_origin o = {
			.bucket = b, .key = k, .etag = k + h.key_len + 1, .index = h.index,
			.meta = h.meta_len ? p + h.bucket_len + h.key_len + h.etag_len : NULL,
			.meta_len = h.meta_len, .gen = e->gen, .copy = e->copy,
		};
		if (cb)
			cb(arg, &o);
		free(names);
	}
	free(v);
	return 0;
}

int dk_recover(struct disk *d, store_recover_cb cb, void *arg, unsigned char **var,
               size_t *cap, char *err, size_t errlen)
{
	struct tomb *t;
	size_t nt;
	uint64_t good;
	int state;
	int rc = dk_tombs_load(d, &t, &nt, &good, &state);
	if (rc < 0) {
		snprintf(err, errlen, "cache directory %s: reading %s failed: %s", d->dir, TOMB_NAME,
		         strerror(-rc));
		return rc;
	}
	/* Tombstones lost (a bad record, and every one after it; or the file
	 * gone beside entries): any object recovered may have been written
	 * since, so the caller revalidates them all (disk_doubtful). */
	d->doubtful = state > 0 || (state < 0 && d->count > 0);
	if (state < 0 && d->count > 0)
		log_warn(TOPIC, "%s: no %s beside %" PRIu64 " entries: every object recovered is "
		         "revalidated", d->dir, TOMB_NAME, (uint64_t)d->count);
	size_t loaded = nt;
	if (nt > 0) {
		qsort(t, nt, sizeof *t, dk_cmp_tomb);
		nt = dk_tombs_dedupe(t, nt);
	}
	if ((rc = recover_report(d, t, nt, cb, arg, var, cap)) < 0) {
		snprintf(err, errlen, "out of memory");
		dk_tombs_free(t, nt);
		return rc;
	}
	/* A segment not read whole may hold entries older than min_gen that
	 * its tombstones cover: then none is dropped. */
	size_t keep = 0;
	for (size_t i = 0; i < nt; i++) {
		if (t[i].gen > d->min_gen || d->scan_failed)
			t[keep++] = t[i];
		else
			free(t[i].bucket);
	}
	bool rewrite = state > 0 || keep < loaded;
	rc = dk_tombs_rewrite(d, t, keep, rewrite, good);
	if (rc < 0 && rewrite) {
		/* The rewrite only saves space; a full file system keeps the file
		 * as it is (cut after its good records) and works on. */
		log_warn(TOPIC, "%s/%s: rewriting it failed (%s); kept as it is", d->dir, TOMB_NAME,
		         strerror(-rc));
		if (d->tfd >= 0)
			close(d->tfd);
		d->tfd = -1;
		rc = dk_tombs_rewrite(d, t, keep, false, good);
	}
	if (rc < 0)
		snprintf(err, errlen, "cache directory %s: writing %s failed: %s", d->dir, TOMB_NAME,
		         strerror(-rc));
	dk_tombs_free(t, keep);
	return rc;
}
