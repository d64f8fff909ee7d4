/*
 * sha256.h - OpenSSL's SHA-256 and HMAC-SHA256, looked up once.
 *
 * EVP_sha256(), HMAC() and the one-shot calls made with them look the
 * algorithm up in OpenSSL's provider tables (locks, string compares) on
 * every use, which costs more than hashing a short input: 310 ns against
 * 140 ns for a chunk id (docs/benchmarks.md, "The floor of a warm hit").
 * The algorithms fetched here are shared by every thread and never freed.
 * Each thread also keeps one digest and one HMAC context, begun or keyed
 * afresh for every use, rather than allocating and freeing one per hash
 * ("Per-thread digest and HMAC contexts"). Thread-safe.
 */
#ifndef LARDER_SHA256_H
#define LARDER_SHA256_H

#include <stddef.h>

#include <openssl/evp.h>

/* SHA-256 for EVP_DigestInit_ex(), EVP_Digest() and HMAC(). */
const EVP_MD *sha256_md(void);

/* The calling thread's context, begun for SHA-256; NULL when none can be
 * had (out of memory). Valid until this thread's next sha256_begin() or
 * sha256(): hash with it, finish it, then let it be (never free it). */
EVP_MD_CTX *sha256_begin(void);

/* out = SHA-256(p[0..n)). */
void sha256(const void *p, size_t n, unsigned char out[32]);

/* out = HMAC-SHA256(key, p[0..n)). out may be key: the key is taken in
 * before anything is written. */
void sha256_hmac(const void *key, size_t klen, const void *p, size_t n, unsigned char out[32]);

#endif
