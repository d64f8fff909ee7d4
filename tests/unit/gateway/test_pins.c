/*
 * test_pins.c - saved pins (gateway/pins.h): a pin written under DIR/pins
 * is pinned again by a new registry (a restart) with its expiry, objects
 * and chunks; an expired one, or one that ended, is gone; a file that is
 * not a saved pin is ignored; without a directory nothing is written; a
 * chunk that finds no memory when it is pinned again is logged as such and
 * stays in the file (store_pin_in and log_write are wrapped: meson.build);
 * the room a sized pin was taken for is kept for it.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "gateway/pins.h"
#include "store/store.h"

#define CLEN 1000

static struct store *ram_store(void)
{
	char err[256];
	struct store_config cfg = { .ram_bytes = 1 << 20, .policy = POLICY_LRU,
	                            .stale_after_s = 86400 };
	struct store *s = store_open(&cfg, NULL, NULL, err, sizeof err);
	assert_non_null(s);
	return s;
}

/* A registry saving under dir (NULL: memory only). */
static struct pins *open_pins(struct store *s, const char *dir)
{
	char err[256];
	struct pins *p = pins_create(s, dir, err, sizeof err);
	if (!p)
		print_error("pins_create: %s\n", err);
	assert_non_null(p);
	return p;
}

static struct chunk_id cid(unsigned i)
{
	struct chunk_id id;
	chunk_id_make("b", "k", "\"e\"", i, &id);
	return id;
}

/* store_pin_in fails with -ENOMEM for the chunk of this index (-1: never). */
static int pin_nomem_index = -1;
static char warned[1024]; /* the WARN lines logged, one after another */

int __real_store_pin_in(struct store *s, const struct chunk_id *id, size_t len, int tiers);
int __wrap_store_pin_in(struct store *s, const struct chunk_id *id, size_t len, int tiers);
void __wrap_log_write(enum log_level l, const char *topic, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

int __wrap_store_pin_in(struct store *s, const struct chunk_id *id, size_t len, int tiers)
{
	if (pin_nomem_index >= 0) {
		struct chunk_id bad = cid((unsigned)pin_nomem_index);
		if (chunk_id_eq(id, &bad))
			return -ENOMEM;
	}
	return __real_store_pin_in(s, id, len, tiers);
}

void __wrap_log_write(enum log_level l, const char *topic, const char *fmt, ...)
{
	(void)topic;
	if (l != LOG_WARN)
		return;
	size_t used = strlen(warned);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(warned + used, sizeof warned - used, fmt, ap);
	va_end(ap);
	used = strlen(warned);
	snprintf(warned + used, sizeof warned - used, "\n");
}

static uint64_t pin_held(struct store *s)
{
	struct store_stats st;
	store_get_stats(s, &st);
	return st.pin_held;
}

static size_t files_in(const char *dir)
{
	char path[512];
	snprintf(path, sizeof path, "%s/pins", dir);
	DIR *d = opendir(path);
	size_t n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/pins", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/pins/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void cleanup(const char *dir)
{
	char path[512];
	snprintf(path, sizeof path, "%s/pins", dir);
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));) {
		char f[1024];
		snprintf(f, sizeof f, "%s/%s", path, e->d_name);
		if (e->d_name[0] != '.')
			unlink(f);
	}
	if (d)
		closedir(d);
	rmdir(path);
	rmdir(dir);
}

/* A registry saving under dir with pin id of chunks 0, 1 and 2. */
static struct pins *pin_three(struct store *s, const char *dir, const char *id, int64_t until)
{
	struct pins *p = open_pins(s, dir);
	assert_int_equal(pins_begin(p, id, "b", NULL, until), 0);
	for (unsigned i = 0; i < 3; i++) {
		struct chunk_id c = cid(i);
		assert_int_equal(pins_add(p, id, &c, CLEN), 0);
	}
	return p;
}

static void t_saved_and_restored(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-pins-XXXXXX";
	assert_non_null(mkdtemp(dir));
	int64_t until = (int64_t)time(NULL) + 3600;
	struct store *s = ram_store();
	struct pins *p = pin_three(s, dir, "pf-3", until);
	pins_add_object(p, "pf-3");
	pins_add_object(p, "pf-3");
	const char *hdr = "node-b/pf-9 4000000000";   /* a peer's pin, held here */
	struct chunk_id c9 = cid(9);
	assert_true(pins_hold_peer(p, "b", hdr, &c9, CLEN));
	assert_int_equal(pins_begin(p, "pf-4", "b", "gone/", until), 0); /* ends: its file goes */
	assert_int_equal(pins_end(p, "pf-4"), 0);
	pins_destroy(p); /* saves */
	assert_int_equal(pin_held(s), 0);
	assert_int_equal(files_in(dir), 2);

	p = open_pins(s, dir);
	assert_true(pins_has(p, "pf-3"));
	assert_false(pins_has(p, "pf-4"));
	struct pin_info info[4];
	size_t n = pins_list(p, info, 4);
	assert_int_equal(n, 2);
	struct pin_info *a = strcmp(info[0].id, "pf-3") == 0 ? &info[0] : &info[1];
	struct pin_info *b = a == &info[0] ? &info[1] : &info[0];
	assert_string_equal(a->bucket, "b");
	assert_null(a->prefix);
	assert_int_equal(a->n_keys, 2);
	assert_int_equal(a->bytes, 3 * CLEN);
	assert_int_equal(a->until, until);
	assert_string_equal(b->id, "node-b/pf-9");
	assert_int_equal(b->until, 4000000000);
	assert_int_equal(b->bytes, CLEN);
	free(info[0].prefix);
	free(info[1].prefix);
	assert_int_equal(pin_held(s), 4 * CLEN); /* its chunks are pinned again */
	/* Ended now, its file goes (the destroy's save removes it). */
	assert_int_equal(pins_end(p, "pf-3"), 0);
	pins_destroy(p);
	assert_int_equal(files_in(dir), 1);
	store_close(s);
	cleanup(dir);
}

/* A chunk that finds no memory when its pin is restored is logged as that,
 * not as past the pin limits (which would send an operator to raise them),
 * and the saved pin keeps it: the next start pins it. */
static void t_restore_without_memory(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-pins-XXXXXX";
	assert_non_null(mkdtemp(dir));
	int64_t until = (int64_t)time(NULL) + 3600;
	struct store *s = ram_store();
	struct pins *p = pin_three(s, dir, "pf-5", until);
	pins_destroy(p); /* saves */

	pin_nomem_index = 1;
	warned[0] = '\0';
	p = open_pins(s, dir);
	pin_nomem_index = -1;
	assert_non_null(strstr(warned, "pin pf-5: 1 chunks not pinned again: out of memory"));
	assert_null(strstr(warned, "past the pin limits"));
	struct pin_info info[2];
	assert_int_equal(pins_list(p, info, 2), 1);
	assert_int_equal(info[0].bytes, 2 * CLEN);
	free(info[0].prefix);
	pins_destroy(p);

	warned[0] = '\0';
	p = open_pins(s, dir); /* memory again: all three */
	assert_string_equal(warned, "");
	assert_int_equal(pins_list(p, info, 2), 1);
	assert_int_equal(info[0].bytes, 3 * CLEN);
	free(info[0].prefix);
	assert_int_equal(pins_end(p, "pf-5"), 0);
	pins_destroy(p);
	store_close(s);
	cleanup(dir);
}

static void t_expired_and_bad_files(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-pins-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct store *s = ram_store();
	const char *ok_chunk = "[[\"00112233445566778899aabbccddeeff\",1000]]";
	char text[512];
	snprintf(text, sizeof text, "{\"version\":1,\"id\":\"pf-1\",\"bucket\":\"b\",\"keys\":0,"
	         "\"until\":%lld,\"chunks\":%s}", (long long)time(NULL) - 1, ok_chunk);
	write_file(dir, "expired.json", text);
	write_file(dir, "a.json", "not json");
	write_file(dir, "b.json", "{\"version\":1,\"id\":\"pf-8\",\"bucket\":\"b\",\"keys\":0,"
	                          "\"until\":4000000000,\"chunks\":[[\"0011\",1000]]}");
	snprintf(text, sizeof text, "{\"version\":2,\"id\":\"pf-8\",\"bucket\":\"b\",\"keys\":0,"
	         "\"until\":4000000000,\"chunks\":%s}", ok_chunk);
	write_file(dir, "c.json", text);
	snprintf(text, sizeof text, "{\"version\":1,\"id\":\"pf-8\",\"bucket\":\"b\",\"keys\":0,"
	         "\"chunks\":%s}", ok_chunk);
	write_file(dir, "d.json", text); /* no expiry */
	write_file(dir, "e.json", "{\"version\":1,\"id\":\"pf-8\",\"bucket\":\"b\",\"keys\":0,"
	                          "\"until\":4000000000,\"chunks\":[[\"00112233445566778899aabbccddeeff\",0]]}");
	struct pins *p = open_pins(s, dir);
	struct pin_info info[2];
	assert_int_equal(pins_list(p, info, 2), 0);
	assert_int_equal(pin_held(s), 0);
	pins_destroy(p);
	assert_int_equal(files_in(dir), 5); /* the expired pin's file went; the others stay */
	store_close(s);
	cleanup(dir);
}

static void t_memory_only(void **state)
{
	(void)state;
	struct store *s = ram_store();
	struct pins *p = open_pins(s, NULL);
	assert_int_equal(pins_begin(p, "pf-1", "b", "x/", (int64_t)time(NULL) + 60), 0);
	struct chunk_id c = cid(1);
	assert_int_equal(pins_add(p, "pf-1", &c, CLEN), 0);
	assert_int_equal(pin_held(s), CLEN);
	pins_destroy(p);
	assert_int_equal(pin_held(s), 0);
	store_close(s);
}

/* A chunk whose fetch failed leaves its pin: unpinned, no longer counted;
 * the pin's other chunks stay. */
static void t_drop(void **state)
{
	(void)state;
	struct store *s = ram_store();
	struct pins *p = open_pins(s, NULL);
	assert_int_equal(pins_begin(p, "pf-1", "b", NULL, (int64_t)time(NULL) + 60), 0);
	struct chunk_id c[3] = { cid(1), cid(2), cid(3) };
	for (int i = 0; i < 3; i++)
		assert_int_equal(pins_add(p, "pf-1", &c[i], CLEN), 0);
	assert_int_equal(pins_drop(p, "pf-1", &c[1]), 0);
	assert_int_equal(pins_drop(p, "pf-1", &c[1]), -ENOENT);
	assert_int_equal(pins_drop(p, "pf-9", &c[0]), -ENOENT);
	assert_int_equal(store_pinned(s, &c[1]), 0);
	assert_int_not_equal(store_pinned(s, &c[2]), 0);
	assert_int_equal(pin_held(s), 2 * CLEN);
	struct pin_info info[2];
	assert_int_equal(pins_list(p, info, 2), 1);
	assert_int_equal(info[0].bytes, 2 * CLEN);
	free(info[0].prefix);
	assert_int_equal(pins_add(p, "pf-1", &c[1], CLEN), 0); /* pinned again: counted once */
	assert_int_equal(pin_held(s), 3 * CLEN);
	assert_int_equal(pins_end(p, "pf-1"), 0);
	assert_int_equal(pin_held(s), 0);
	pins_destroy(p);
	store_close(s);
}

/* A pin that ends after pins_shutdown (a warm job a shutdown cancels)
 * keeps its file. */
static void t_shutdown_keeps_files(void **state)
{
	(void)state;
	char dir[] = "/tmp/larder-test-pins-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct store *s = ram_store();
	struct pins *p = open_pins(s, dir);
	assert_int_equal(pins_begin(p, "pf-1", "b", "x/", (int64_t)time(NULL) + 60), 0);
	pins_shutdown(p);
	assert_int_equal(pins_end(p, "pf-1"), 0);
	pins_destroy(p);
	assert_int_equal(files_in(dir), 1);
	p = open_pins(s, dir);
	assert_true(pins_has(p, "pf-1"));
	pins_destroy(p);
	store_close(s);
	cleanup(dir);
}

/* The room a sized pin was taken for is kept for it until its job ends:
 * a second one that would not fit beside it is refused, another pin's
 * chunks find no room there, and the pin itself fills it. (RAM only,
 * 1 MiB: the pin limit is 512 KiB.) */
static void t_reserved_room(void **state)
{
	(void)state;
	struct store *s = ram_store();
	struct pins *p = open_pins(s, NULL);
	int64_t until = (int64_t)time(NULL) + 60;
	uint64_t others;
	assert_int_equal(pins_begin(p, "pf-a", "b", "a/", until), 0);
	assert_int_equal(pins_begin(p, "pf-b", "b", "b/", until), 0);
	assert_int_equal(pins_begin(p, "pf-k", "b", NULL, until), 0);
	assert_int_equal(pins_reserve(p, "pf-a", 400 * CLEN, UINT64_MAX, &others), 0);
	assert_int_equal(pins_reserve(p, "pf-b", 200 * CLEN, UINT64_MAX, &others), -ENOSPC);
	assert_int_equal(others, 400 * CLEN);
	assert_int_equal(pins_reserve(p, "pf-zz", 1, 1, &others), -ENOENT);
	/* The key list has 512 KiB - 400,000 bytes = 124,288 left: 124 chunks. */
	unsigned added = 0;
	for (unsigned i = 0; i < 1000; i++) {
		struct chunk_id id;
		chunk_id_make("b", "k", "\"e\"", i, &id);
		if (pins_add(p, "pf-k", &id, CLEN) != 0)
			break;
		added++;
	}
	assert_int_equal(added, 124);
	for (unsigned j = 0; j < 400; j++) {
		struct chunk_id id;
		chunk_id_make("b", "a", "\"e\"", j, &id);
		assert_int_equal(pins_add(p, "pf-a", &id, CLEN), 0);
	}
	/* Its job ended: what it did not pin is free again. */
	assert_int_equal(pins_end(p, "pf-k"), 0);
	pins_settle(p, "pf-a");
	assert_int_equal(pins_reserve(p, "pf-b", 100 * CLEN, UINT64_MAX, &others), 0);
	pins_destroy(p);
	store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_saved_and_restored),
		cmocka_unit_test(t_restore_without_memory),
		cmocka_unit_test(t_expired_and_bad_files),
		cmocka_unit_test(t_memory_only),
		cmocka_unit_test(t_drop),
		cmocka_unit_test(t_shutdown_keeps_files),
		cmocka_unit_test(t_reserved_room),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
