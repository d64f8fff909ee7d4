/*
 * alloc.h - the allocator, and what running out of memory means.
 *
 * Two policies; the caller picks one by the name it calls:
 *
 * - mem_*: per-request and per-object memory (buffers, header lists, a
 *   request's state). Returns NULL when memory is short; the caller undoes
 *   what it started and returns -ENOMEM (or NULL), and the request that
 *   needed it is answered 500 InternalError. The process keeps serving.
 *
 * - x*: memory without which larder cannot run at all (startup, the
 *   configuration, tables sized once). Never returns NULL: on failure it
 *   logs "out of memory" with the size and calls abort(). Not for anything
 *   a client's request can make large.
 *
 * Free either with free(). Both go through malloc, so libraries that
 * allocate on their own (curl, jansson, OpenSSL) follow the same allocator.
 *
 * Failure injection: alloc_fail_nth(n) makes the n-th mem_* allocation of
 * the calling thread fail, for unit tests that prove an -ENOMEM path undoes
 * its work (tests/unit/base/test_alloc.c). It is compiled in and off; an
 * unarmed check is one thread-local load.
 */
#ifndef LARDER_ALLOC_H
#define LARDER_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

void *mem_malloc(size_t size);
void *mem_calloc(size_t n, size_t size);
/* As realloc: on failure returns NULL and p is left as it was. */
void *mem_realloc(void *p, size_t size);
char *mem_strdup(const char *s);
char *mem_strndup(const char *s, size_t n);

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);

/* Arms a failure: the n-th mem_* call made by this thread from now on
 * (1 = the next) returns NULL, once. 0 disarms. For tests only. */
void alloc_fail_nth(unsigned long n);
/* True if the armed failure has happened since the last alloc_fail_nth. */
bool alloc_fail_fired(void);

#endif
