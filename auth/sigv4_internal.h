/*
 * sigv4_internal.h - what sigv4.c shares with sigv4_key.c. Private to
 * auth/; everything else uses sigv4.h.
 */
#ifndef LARDER_SIGV4_INTERNAL_H
#define LARDER_SIGV4_INTERNAL_H

#include <stddef.h>

/* out = HMAC-SHA256(key, p). */
void sv4_hmac256(const void *key, size_t klen, const void *p, size_t n, unsigned char out[32]);

#endif
