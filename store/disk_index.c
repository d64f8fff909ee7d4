/*
 * disk_index.c - what is where: the in-memory index of entries, the
 * segments and their live lists, and making room (eviction, reclaim).
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
 * capacity - reserve. A drop (a purge, an invalidation) that leaves a
 * sealed segment with no live entry removes it at once, so used follows
 * what a purge freed; the head stays, and the segment reclaim is copying
 * out of (it drops the lock around each copy) is left to reclaim.
 *
 * Preallocation. A new head's file gets its blocks at once (fallocate,
 * FALLOC_FL_KEEP_SIZE, up to the reserve), so an append writes into
 * allocated blocks: ext4's buffered write of a 128 KiB entry then costs
 * 12-13 us of system CPU instead of 21-25, which delayed allocation spends
 * page by page (docs/benchmarks.md, "Preallocated segments"). The file's
 * size stays what was appended, so used and the scan at open are as
 * above. A sealed segment gives back the blocks past its end (ftruncate
 * to its size), as do the head at close and, at open, any segment a crash
 * left preallocated. The blocks of all files stay under capacity: the
 * head is preallocated at most to capacity - used.
 *
 * Pins. A pinned entry is out of the policy, so it is never a victim;
 * reclaim copies it forward like any live entry. Its bytes still count
 * in used and live, so the writes of others evict around it.
 */
#include "store/disk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

struct dent *dk_idx_find(struct disk *d, const struct chunk_id *id, uint64_t h)
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

void dk_idx_put(struct dent **slots, size_t n, struct dent *e)
{
	size_t i = e->hash & (n - 1);
	while (slots[i])
		i = (i + 1) & (n - 1);
	slots[i] = e;
}

int dk_idx_reserve(struct disk *d)
{
	if ((d->count + 1) * 4 <= d->nslots * 3)
		return 0;
	size_t n = d->nslots ? d->nslots * 2 : 1024;
	struct dent **ns = calloc(n, sizeof *ns);
	if (!ns)
		return -ENOMEM;
	for (size_t i = 0; i < d->nslots; i++)
		if (d->slots[i])
			dk_idx_put(ns, n, d->slots[i]);
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

void dk_seg_link_entry(struct seg *s, struct dent *e)
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

void dk_seg_unref(struct seg *s)
{
	if (atomic_fetch_sub(&s->refs, 1) == 1) {
		close(s->fd);
		if (s->dfd >= 0)
			close(s->dfd);
		free(s);
	}
}

struct seg *dk_seg_add(struct disk *d, uint64_t seq, int fd, uint64_t size)
{
	struct seg *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->seq = seq;
	s->fd = fd;
	s->dfd = -1;
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

void dk_seg_remove(struct disk *d, struct seg *s)
{
	char name[SEG_NAME_LEN + 1];
	dk_seg_name(name, s->seq);
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
	dk_seg_unref(s);
}

void dk_seg_remove_if_empty(struct disk *d, struct seg *s)
{
	if (!s->first && s != d->head && s != d->reclaiming)
		dk_seg_remove(d, s);
}

void dk_seg_trim(struct seg *s)
{
	(void)ftruncate(s->fd, (off_t)s->size);
}

int dk_head_ensure(struct disk *d, uint64_t esz)
{
	if (d->head && (d->head->size == 0 || d->head->size + esz <= d->seg_bytes))
		return 0;
	if (d->head) {
		dk_seg_trim(d->head);
		if (d->head->dfd >= 0) /* sealed: no more appends (writers hold wlock) */
			close(d->head->dfd);
		d->head->dfd = -1;
	}
	char name[SEG_NAME_LEN + 1];
	dk_seg_name(name, d->next_seq);
	int fd = openat(d->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		log_warn(TOPIC, "%s/%s: open() failed: %s", d->dir, name, strerror(e));
		return -e;
	}
	struct seg *s = dk_seg_add(d, d->next_seq, fd, 0);
	if (!s) {
		close(fd);
		unlinkat(d->dirfd, name, 0);
		return -ENOMEM;
	}
	if (!atomic_load(&d->no_direct)) { /* large entries' (disk.c, write_entry) */
		s->dfd = openat(d->dirfd, name, O_WRONLY | O_DIRECT | O_CLOEXEC);
		if (s->dfd < 0 && errno == EINVAL)
			dk_no_direct(d, "open(O_DIRECT)");
	}
	/* Allocated now, appends find their blocks: see "Preallocation" above.
	 * Bounded by what the other files leave of capacity, so the files'
	 * blocks never pass it; an entry larger than the reserve gets its own. */
	uint64_t want = esz > d->reserve ? esz : d->reserve;
	uint64_t room = d->capacity > d->used ? d->capacity - d->used : 0;
	if (want > room)
		want = room;
	if (want)
		(void)fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)want);
	d->next_seq++;
	d->head = s;
	return 0;
}

void dk_no_direct(struct disk *d, const char *what)
{
	if (!atomic_exchange(&d->no_direct, true))
		log_info(TOPIC, "%s: %s refused: large entries go through the page cache", d->dir, what);
}

void dk_append_undo(struct disk *d, struct seg *s, uint64_t off, uint64_t esz)
{
	if (ftruncate(s->fd, (off_t)off) == 0) {
		s->size -= esz;
		d->used -= esz;
	} else if (d->head == s) {
		d->head = NULL;
	}
}

void dk_entry_pin(struct disk *d, struct dent *e, bool on, double now)
{
	if (e->pinned == on)
		return;
	e->pinned = on;
	if (on) {
		policy_remove(d->pol, &e->pe);
		d->pinned += e->esz;
		d->npinned++;
	} else {
		d->pinned -= e->esz;
		d->npinned--;
		policy_insert(d->pol, &e->pe, dk_rank(e), e->esz, now);
	}
}

void dk_entry_drop(struct disk *d, struct dent *e)
{
	if (e->pinned) {
		d->pinned -= e->esz;
		d->npinned--;
	} else {
		policy_remove(d->pol, &e->pe);
	}
	idx_remove(d, e);
	seg_unlink_entry(e->seg, e);
	d->live -= e->esz;
	free(e);
}

void dk_evict(struct disk *d, struct dent *e)
{
	if (d->evicted)
		d->evicted(d->evicted_arg, &e->id);
	dk_entry_drop(d, e);
	d->evictions++;
}

struct dent *dk_entry_of(struct policy_entry *pe)
{
	return (struct dent *)(void *)((char *)pe - offsetof(struct dent, pe));
}

static int copy_bytes(int from_fd, uint64_t from, int to_fd, uint64_t to, uint64_t n,
                      char *buf, bool *read_failed)
{
	while (n > 0) {
		size_t k = n < COPY_BUF ? (size_t)n : COPY_BUF;
		int rc = file_pread_all(from_fd, buf, k, from);
		if (rc < 0) {
			*read_failed = true;
			return rc;
		}
		struct iovec iov = { buf, k };
		if ((rc = file_pwritev_all(to_fd, &iov, 1, to)) < 0)
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
	d->reclaiming = s; /* entries dropped meanwhile must not remove it */
	while (s->first) {
		struct dent *e = s->first;
		struct chunk_id id = e->id;
		uint64_t h = e->hash, from = e->off, esz = e->esz;
		if ((rc = dk_head_ensure(d, esz)) < 0) {
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
		e = dk_idx_find(d, &id, h);
		bool same = e && e->seg == s && e->off == from;
		if (rc < 0) {
			dk_append_undo(d, hd, to, esz);
			dk_seg_unref(hd);
			log_warn(TOPIC, "%s: reclaiming segment %016" PRIx64 ": %s() failed: %s", d->dir,
			         s->seq, read_failed ? "pread" : "pwrite", strerror(-rc));
			if (!read_failed) {
				d->write_errors++;
				break;
			}
			d->read_errors++;
			if (same)
				dk_entry_drop(d, e);
			rc = 0;
			continue;
		}
		if (same) {
			seg_unlink_entry(s, e);
			e->off = to;
			dk_seg_link_entry(hd, e);
		}
		dk_seg_unref(hd);
	}
	free(buf);
	d->reclaiming = NULL;
	if (rc == 0) {
		log_debug(TOPIC, "%s: reclaimed segment %016" PRIx64 " (%" PRIu64 " bytes)", d->dir,
		          s->seq, s->size);
		dk_seg_remove(d, s);
		d->reclaimed++;
	}
	return rc;
}

int dk_room_make(struct disk *d, uint64_t esz, double now)
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
			dk_seg_trim(d->head);
			d->head = NULL; /* sealed: reclaimable from now on */
			continue;
		}
		struct policy_entry *v = policy_victim(d->pol, now);
		if (!v)
			return 0;
		dk_evict(d, dk_entry_of(v));
	}
	return 1;
}
