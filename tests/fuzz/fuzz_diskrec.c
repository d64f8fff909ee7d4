/*
 * fuzz_diskrec.c - NVMe recovery (disk_open's scan of segment entries and
 * of the tombstone file, then the metadata blobs it hands back) on
 * arbitrary bytes: a crash or a failing device leaves whatever it leaves
 * in LARDER_CACHE_DIR, and larder reads it at the next start.
 *
 * Input: byte 0's low 7 bits times 32 are the length of the tombstone
 * file's bytes, which follow it; the rest is one segment file. With byte
 * 0's high bit set, the checksums of every record that starts where one
 * may (each 4 KiB of the segment, one tombstone after another) are made
 * right first, so mutations of lengths, generations and metadata get past
 * the CRC checks to the code behind them. Each run writes both into
 * a scratch directory (on /dev/shm when there is one: the scan is real
 * file I/O), opens the disk, checks its invariants, reads back every chunk
 * the recovery reported (the data CRC path) and decodes its metadata.
 *
 * The seeds in corpus/diskrec/ are real files written by disk_write and
 * disk_invalidate (chunk-0 entries with metadata from meta_encode, later
 * chunks, tombstones for a key and for a prefix), framed as above.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc.h"
#include "base/log.h"
#include "store/disk.h"
#include "store/meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

struct found {
	struct chunk_id id[32];
	int n;
};

static void on_recover(void *arg, const struct chunk_origin *o)
{
	struct found *f = arg;
	volatile size_t n = strlen(o->bucket) + strlen(o->key) + strlen(o->etag);
	(void)n;
	struct obj_meta *m = o->meta ? meta_decode(o->meta, o->meta_len, 0) : NULL;
	if (m)
		meta_unref(m);
	if (f->n < 32)
		chunk_id_make(o->bucket, o->key, o->etag, o->index, &f->id[f->n++]);
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

/* Seals the segment entry headers (72 bytes, CRC at 68 over the header and
 * the names and metadata after it) at every 4 KiB, as disk.c lays them out. */
static void fix_segment(uint8_t *p, size_t n)
{
	for (size_t off = 0; off + 72 <= n; off += 4096) {
		uint8_t *h = p + off;
		if (memcmp(h, "LRDR", 4) != 0)
			continue;
		size_t vl = (size_t)get16(h + 36) + get16(h + 38) + get16(h + 40) + get32(h + 44);
		if (vl > n - off - 72)
			continue;
		put32(h + 68, crc32c(crc32c(0, h, 68), h + 72, vl));
	}
}

/* The same for the tombstone records (24 bytes, CRC at 20), one after another. */
static void fix_tombstones(uint8_t *p, size_t n)
{
	for (size_t off = 0; off + 24 <= n;) {
		uint8_t *h = p + off;
		size_t nl = (size_t)get16(h + 16) + get16(h + 18);
		if (nl > n - off - 24)
			return;
		put32(h + 20, crc32c(crc32c(0, h, 20), h + 24, nl));
		off += 24 + nl;
	}
}

static int put_file(const char *name, const uint8_t *p, size_t n)
{
	char path[128];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	ssize_t w = n ? write(fd, p, n) : 0;
	close(fd);
	return w == (ssize_t)n ? 0 : -1;
}

static void empty_dir(void)
{
	DIR *dh = opendir(dir);
	struct dirent *de;
	while (dh && (de = readdir(dh)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[384];
		snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
		unlink(path);
	}
	if (dh)
		closedir(dh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!dir[0]) {
		log_set_level(LOG_ERROR);
		snprintf(dir, sizeof dir, "%s/larder-fuzz-XXXXXX",
		         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
		if (!mkdtemp(dir))
			__builtin_trap();
	}
	if (size == 0)
		return 0;
	size_t nt = (size_t)(data[0] & 0x7f) * 32;
	if (nt > size - 1)
		nt = size - 1;
	uint8_t *copy = malloc(size);
	if (!copy)
		return 0;
	memcpy(copy, data, size);
	if (data[0] & 0x80) {
		fix_tombstones(copy + 1, nt);
		fix_segment(copy + 1 + nt, size - 1 - nt);
	}
	empty_dir();
	if (put_file("tombstones.log", copy + 1, nt) < 0 ||
	    put_file("seg-0000000000000001.log", copy + 1 + nt, size - 1 - nt) < 0)
		__builtin_trap();
	free(copy);

	struct found f = { .n = 0 };
	char err[256];
	struct disk *d = disk_open(dir, 64u << 20, 1u << 20, 0, POLICY_LRU, 86400, on_recover, &f,
	                           err, sizeof err);
	if (!d) /* no content of the files may keep larder from starting */
		__builtin_trap();
	if (disk_check(d) != 0)
		__builtin_trap();
	for (int i = 0; i < f.n; i++) {
		size_t len;
		if (!disk_lookup(d, &f.id[i], &len))
			continue; /* a later duplicate id, dropped */
		void *buf = malloc(len ? len : 1);
		if (buf && disk_read(d, &f.id[i], buf, len, NULL) == -EINVAL)
			__builtin_trap(); /* the length disk_lookup gave */
		free(buf);
	}
	if (disk_check(d) != 0)
		__builtin_trap();
	disk_close(d);
	return 0;
}
