/*
 * test_disk_recovery.c - the NVMe segment log (store/disk.h) across reopenings:
 * which object metadata recovery gives back (the newest version per key,
 * none that a tombstone covers), the tombstone file's upkeep, and a
 * directory in an older format.
 *
 * Each test works in a fresh directory under $TMPDIR and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/disk.h"

static char tmpdir[512];

static int setup_dir(void **state)
{
	(void)state;
	const char *t = getenv("TMPDIR");
	snprintf(tmpdir, sizeof tmpdir, "%s/larder-disk-XXXXXX", t && *t ? t : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown_dir(void **state)
{
	(void)state;
	return nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* What the recover callback heard: "bucket/key etag" lines. */
struct heard {
	char lines[16][128];
	int n;
};

static void heard_cb(void *arg, const struct chunk_origin *o)
{
	struct heard *h = arg;
	assert_true(h->n < 16);
	assert_int_equal(o->index, 0);
	snprintf(h->lines[h->n++], sizeof h->lines[0], "%s/%s %s", o->bucket, o->key, o->etag);
}

static bool heard(const struct heard *h, const char *line)
{
	for (int i = 0; i < h->n; i++)
		if (strcmp(h->lines[i], line) == 0)
			return true;
	return false;
}

/* chunk_bytes 0: the chunk size is not checked. */
static struct disk *open_cut(const char *dir, struct heard *h, uint64_t chunk_bytes)
{
	char err[256] = "";
	if (h)
		memset(h, 0, sizeof *h);
	struct disk *d = disk_open(dir, 16 << 20, 1 << 20, chunk_bytes, POLICY_LRU, 86400,
	                           h ? heard_cb : NULL,
	                           h, err, sizeof err);
	if (!d)
		print_error("disk_open: %s\n", err);
	assert_non_null(d);
	assert_int_equal(disk_check(d), 0);
	return d;
}

static struct disk *open_at(const char *dir, struct heard *h)
{
	return open_cut(dir, h, 0);
}

/* Writes chunk 0 of (bucket, key, etag) with generation gen (0: now). */
static void put0(struct disk *d, const char *bucket, const char *key, const char *etag,
                 uint64_t gen)
{
	struct chunk_id id;
	chunk_id_make(bucket, key, etag, 0, &id);
	struct chunk_origin o = { .bucket = bucket, .key = key, .etag = etag, .index = 0,
	                          .meta = "m", .meta_len = 1, .gen = gen };
	char data[100];
	memset(data, etag[1], sizeof data);
	assert_int_equal(disk_write(d, &id, &o, data, sizeof data), 0);
}

static bool holds0(struct disk *d, const char *bucket, const char *key, const char *etag)
{
	struct chunk_id id;
	chunk_id_make(bucket, key, etag, 0, &id);
	return disk_lookup(d, &id, NULL);
}

static off_t file_size(const char *dir, const char *name)
{
	char p[700];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* Two versions of one object on disk: the newer one (by generation, not by
 * where it lies in the files or in the index) is the one recovered. */
static void test_newest_version_wins(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	/* Written in the opposite order of their generations. */
	uint64_t g1 = disk_next_gen(d), g2 = disk_next_gen(d);
	for (int i = 0; i < 8; i++) {
		char key[16];
		snprintf(key, sizeof key, "k%d", i);
		put0(d, "b", key, "\"new\"", g2 + 2 * (uint64_t)i + 100);
		put0(d, "b", key, "\"old\"", g1);
	}
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 8);
	for (int i = 0; i < 8; i++) {
		char line[64], key[16];
		snprintf(key, sizeof key, "k%d", i);
		snprintf(line, sizeof line, "b/%s \"new\"", key);
		assert_true(heard(&h, line));
		assert_false(holds0(d, "b", key, "\"old\"")); /* stale metadata: dropped */
		assert_true(holds0(d, "b", key, "\"new\""));
	}
	assert_int_equal(disk_check(d), 0);
	/* The next generation handed out is past everything on disk. */
	assert_true(disk_next_gen(d) > g2 + 114);
	disk_close(d);
}

/* A tombstone hides what is older than itself, for its key, its prefix or
 * its bucket, and nothing newer or elsewhere. */
static void test_tombstones(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	put0(d, "b", "gone", "\"1\"", 0);
	put0(d, "b", "gone2", "\"1\"", 0);
	put0(d, "b", "dir/a", "\"1\"", 0);
	put0(d, "b", "dir/b", "\"1\"", 0);
	put0(d, "b", "dirx", "\"1\"", 0);
	put0(d, "b", "back", "\"1\"", 0);
	put0(d, "c", "all/x", "\"1\"", 0);
	put0(d, "c2", "kept", "\"1\"", 0);
	assert_int_equal(disk_invalidate(d, "b", "gone", false), 0);
	assert_int_equal(disk_invalidate(d, "b", "dir/", true), 0);
	assert_int_equal(disk_invalidate(d, "b", "back", false), 0);
	assert_int_equal(disk_invalidate(d, "c", "", true), 0);
	put0(d, "b", "back", "\"2\"", 0); /* written again after its tombstone */
	disk_close(d);

	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 4);
	assert_true(heard(&h, "b/gone2 \"1\""));
	assert_true(heard(&h, "b/dirx \"1\""));
	assert_true(heard(&h, "b/back \"2\""));
	assert_true(heard(&h, "c2/kept \"1\""));
	assert_false(holds0(d, "b", "gone", "\"1\""));
	assert_false(holds0(d, "b", "dir/a", "\"1\""));
	assert_false(holds0(d, "c", "all/x", "\"1\""));
	disk_close(d);
	/* And again: the tombstones were kept (older entries still lie on disk). */
	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 4);
	assert_false(heard(&h, "b/gone \"1\""));
	disk_close(d);
}

/* Tombstones no entry on disk is older than are dropped at open; a torn
 * last record is cut off, the ones before it still count. */
static void test_tombstone_file_upkeep(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	assert_int_equal(disk_invalidate(d, "b", "nothing-older", false), 0);
	disk_close(d);
	assert_true(file_size(tmpdir, "tombstones.log") > 0);
	d = open_at(tmpdir, NULL);
	disk_close(d);
	assert_int_equal(file_size(tmpdir, "tombstones.log"), 0);

	d = open_at(tmpdir, NULL);
	put0(d, "b", "k", "\"1\"", 0);
	assert_int_equal(disk_invalidate(d, "b", "k", false), 0);
	disk_close(d);
	off_t good = file_size(tmpdir, "tombstones.log");
	char p[700];
	snprintf(p, sizeof p, "%s/tombstones.log", tmpdir);
	FILE *f = fopen(p, "ab");
	assert_non_null(f);
	fwrite("LRDT\1\0\0\0garbage", 1, 15, f);
	fclose(f);
	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 0);
	assert_false(holds0(d, "b", "k", "\"1\""));
	disk_close(d);
	assert_int_equal(file_size(tmpdir, "tombstones.log"), good);
}

/* Repeated tombstones naming the same key, or the same prefix, are kept
 * once, the newest: it still hides an entry written between them. */
static void test_tombstones_deduplicated(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	put0(d, "b", "k", "\"1\"", 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(disk_invalidate(d, "b", "k", false), 0);
	assert_int_equal(disk_invalidate(d, "b", "", true), 0);
	put0(d, "b", "between", "\"1\"", 0);
	assert_int_equal(disk_invalidate(d, "b", "", true), 0);
	disk_close(d);
	assert_int_equal(file_size(tmpdir, "tombstones.log"), 5 * 24 + 3 * 2 + 2 * 1);

	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 0);
	assert_false(holds0(d, "b", "between", "\"1\""));
	disk_close(d);
	/* One record each for (b, k) and (b, ""*): 24 + 2 and 24 + 1 bytes. */
	assert_int_equal(file_size(tmpdir, "tombstones.log"), 24 + 2 + 24 + 1);
}

/* A segment of format version 1 (no generations) is discarded, not read:
 * its metadata could not be ordered against tombstones. */
static void test_old_format_discarded(void **state)
{
	(void)state;
	struct heard h;
	char p[700];
	snprintf(p, sizeof p, "%s/seg-0000000000000001.log", tmpdir);
	unsigned char b[4096] = { 'L', 'R', 'D', 'R', 1, 0, 64, 0 };
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, sizeof b), (ssize_t)sizeof b);
	close(fd);
	struct disk *d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 0);
	struct disk_stats st;
	disk_get_stats(d, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(file_size(tmpdir, "seg-0000000000000001.log"), -1);
	put0(d, "b", "k", "\"1\"", 0); /* and the tier works */
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 1);
	disk_close(d);
}

/* A chunk-0 entry with empty names (no origin given) as the first one the
 * recovery reads: fuzz_diskrec found a copy from a NULL buffer there. Only
 * clang's UBSan reports that (gcc's inlines the empty memcpy); the same
 * input is corpus/diskrec/nameless-chunk0 for the clang fuzz build. */
static void test_nameless_entry(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	struct chunk_id id;
	chunk_id_make("", "", "", 0, &id);
	assert_int_equal(disk_write(d, &id, NULL, "x", 1), 0);
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_int_equal(h.n, 1);
	assert_string_equal(h.lines[0], "/ ");
	disk_close(d);
}

/* An entry is found by its chunk's id, and under another chunk size the
 * same index names other bytes: entries cut to another size are discarded
 * at open (the audit's wrong bytes after 64 KiB chunks became 128 KiB),
 * entries cut to the same size kept. A directory without the record (lost,
 * or from before it) may have been cut to any size: its entries go too
 * (the second audit's wrong bytes after the file was lost), and the size
 * is recorded. */
static void test_other_chunk_size_discarded(void **state)
{
	(void)state;
	struct heard h;
	char text[32] = "", p[700];
	struct disk *d = open_at(tmpdir, NULL); /* no record */
	put0(d, "b", "k", "\"0\"", 0);
	disk_close(d);
	d = open_cut(tmpdir, &h, 65536);
	assert_int_equal(h.n, 0);
	assert_false(holds0(d, "b", "k", "\"0\""));
	put0(d, "b", "k", "\"1\"", 0);
	disk_close(d);
	snprintf(p, sizeof p, "%s/chunk-size", tmpdir);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	assert_non_null(fgets(text, sizeof text, f));
	fclose(f);
	assert_string_equal(text, "65536\n");

	d = open_cut(tmpdir, &h, 65536); /* the same size: kept */
	assert_int_equal(h.n, 1);
	assert_true(holds0(d, "b", "k", "\"1\""));
	disk_close(d);
	d = open_cut(tmpdir, &h, 131072); /* another: discarded, and the tier works */
	assert_int_equal(h.n, 0);
	assert_false(holds0(d, "b", "k", "\"1\""));
	put0(d, "b", "k", "\"2\"", 0);
	disk_close(d);
	d = open_cut(tmpdir, &h, 131072);
	assert_int_equal(h.n, 1);
	assert_true(holds0(d, "b", "k", "\"2\""));
	disk_close(d);

	f = fopen(p, "w"); /* a record that is not a size: discarded too */
	assert_non_null(f);
	fputs("junk\n", f);
	fclose(f);
	d = open_cut(tmpdir, &h, 131072);
	assert_int_equal(h.n, 0);
	disk_close(d);
}

/* Tombstones lost, a bad record (and every one after it) or the whole
 * file: the entries recovered may be of objects written since, so the open
 * says so (disk_doubtful) and the caller revalidates them; records written
 * after such an open follow the good ones and are read back. */
static void test_lost_tombstones_make_recovery_doubtful(void **state)
{
	(void)state;
	struct heard h;
	char p[700];
	snprintf(p, sizeof p, "%s/tombstones.log", tmpdir);
	struct disk *d = open_at(tmpdir, NULL);
	assert_false(disk_doubtful(d)); /* a new directory */
	put0(d, "b", "k1", "\"1\"", 0);
	put0(d, "b", "k2", "\"1\"", 0);
	assert_int_equal(disk_invalidate(d, "b", "k1", false), 0);
	assert_int_equal(disk_invalidate(d, "b", "k2", false), 0);
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_false(disk_doubtful(d));
	assert_int_equal(h.n, 0);
	disk_close(d);

	/* One bit of the first record flipped: the second is lost with it. */
	int fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	unsigned char c;
	assert_int_equal(pread(fd, &c, 1, 10), 1);
	c ^= 1;
	assert_int_equal(pwrite(fd, &c, 1, 10), 1);
	close(fd);
	d = open_at(tmpdir, &h);
	assert_true(disk_doubtful(d));
	assert_int_equal(disk_invalidate(d, "b", "k1", false), 0);
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_false(disk_doubtful(d));
	assert_false(heard(&h, "b/k1 \"1\"")); /* the record written after is read */
	disk_close(d);

	/* The file gone beside entries. */
	d = open_at(tmpdir, NULL);
	put0(d, "b", "k3", "\"1\"", 0);
	disk_close(d);
	assert_int_equal(unlink(p), 0);
	d = open_at(tmpdir, &h);
	assert_true(disk_doubtful(d));
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_false(disk_doubtful(d));
	disk_close(d);
}

/* Reads of one segment fail at open (the device, for now): its entries stay
 * on disk unread, and so must the tombstones that cover them, though every
 * entry read is newer (the audit's old version back at the next start). */
static const char *failing_segment;

ssize_t __real_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags);
ssize_t __wrap_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags);
ssize_t __wrap_preadv64v2(int fd, const struct iovec *iov, int n, off_t off, int flags)
{
	char link[64], path[700] = "";
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t l = failing_segment ? readlink(link, path, sizeof path - 1) : -1;
	if (l > 0 && strstr(path, failing_segment)) {
		errno = EIO;
		return -1;
	}
	return __real_preadv64v2(fd, iov, n, off, flags);
}

static void test_unread_segment_keeps_its_tombstones(void **state)
{
	(void)state;
	struct heard h;
	struct disk *d = open_at(tmpdir, NULL);
	put0(d, "b", "old", "\"1\"", 0);
	assert_int_equal(disk_invalidate(d, "b", "old", false), 0);
	/* A chunk that fills the 1 MiB segment: what follows goes to the next. */
	static char big[1044000];
	struct chunk_id id;
	chunk_id_make("b", "big", "\"1\"", 1, &id);
	struct chunk_origin o = { .bucket = "b", .key = "big", .etag = "\"1\"", .index = 1 };
	assert_int_equal(disk_write(d, &id, &o, big, sizeof big), 0);
	put0(d, "b", "new", "\"1\"", 0);
	disk_close(d);
	assert_true(file_size(tmpdir, "seg-0000000000000002.log") > 0);

	failing_segment = "seg-0000000000000001.log";
	d = open_at(tmpdir, &h);
	failing_segment = NULL;
	assert_true(heard(&h, "b/new \"1\""));
	disk_close(d);
	d = open_at(tmpdir, &h);
	assert_true(heard(&h, "b/new \"1\""));
	assert_false(heard(&h, "b/old \"1\""));
	assert_false(holds0(d, "b", "old", "\"1\""));
	disk_close(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_newest_version_wins, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_tombstones, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_tombstone_file_upkeep, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_tombstones_deduplicated, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_old_format_discarded, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_nameless_entry, setup_dir, teardown_dir),
		cmocka_unit_test_setup_teardown(test_other_chunk_size_discarded, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_lost_tombstones_make_recovery_doubtful, setup_dir,
		                                teardown_dir),
		cmocka_unit_test_setup_teardown(test_unread_segment_keeps_its_tombstones, setup_dir,
		                                teardown_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
