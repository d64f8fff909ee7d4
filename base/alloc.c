/*
 * alloc.c - the allocator's two out-of-memory policies (base/alloc.h).
 */
#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Per thread, so a test's injected failure never lands in another thread
 * (a libev loop, a store worker) that happens to allocate meanwhile.
 * initial-exec, as in log.c: the static library is built -fPIC, and the
 * default model would make larder call __tls_get_addr and need ld.so by
 * name (tests/integration/deploy checks the runtime image has every
 * library larder names). */
#define THREAD_LOCAL __thread __attribute__((tls_model("initial-exec")))
static THREAD_LOCAL unsigned long fail_countdown;
static THREAD_LOCAL bool fail_fired;

void alloc_fail_nth(unsigned long n)
{
	fail_countdown = n;
	fail_fired = false;
}

bool alloc_fail_fired(void)
{
	return fail_fired;
}

/* True when this allocation is the one to fail. */
static bool inject(void)
{
	if (__builtin_expect(fail_countdown == 0, 1))
		return false;
	if (--fail_countdown)
		return false;
	fail_fired = true;
	return true;
}

void *mem_malloc(size_t size)
{
	return inject() ? NULL : malloc(size);
}

void *mem_calloc(size_t n, size_t size)
{
	return inject() ? NULL : calloc(n, size);
}

void *mem_realloc(void *p, size_t size)
{
	return inject() ? NULL : realloc(p, size);
}

char *mem_strdup(const char *s)
{
	return inject() ? NULL : strdup(s);
}

char *mem_strndup(const char *s, size_t n)
{
	return inject() ? NULL : strndup(s, n);
}

static void *must(void *p, size_t size)
{
	if (!p) {
		log_error("alloc", "out of memory allocating %zu bytes", size);
		abort();
	}
	return p;
}

void *xmalloc(size_t size)
{
	/* malloc(0) may return NULL; that is not running out. */
	return must(malloc(size ? size : 1), size);
}

void *xcalloc(size_t n, size_t size)
{
	return must(calloc(n ? n : 1, size ? size : 1), n * size);
}

void *xrealloc(void *p, size_t size)
{
	return must(realloc(p, size ? size : 1), size);
}

char *xstrdup(const char *s)
{
	return must(strdup(s), strlen(s) + 1);
}
