/*
 * sigv4_key.c - the SigV4 signing key (sv4_signing_key, see sigv4.h) and
 * the small cache that saves deriving it again for every request.
 *
 * Deriving a key costs four HMACs; a busy gateway sees the same few scopes
 * all day. A direct-mapped table of KEY_SLOTS entries bounds the memory; a
 * collision simply replaces the older entry. Entries carry the secret
 * (its SHA-256 when longer than SECRET_RAW_MAX bytes), so a secret changed
 * by a config reload never meets a stale key. Keeping a short secret
 * itself rather than its hash spares every lookup a SHA-256 (AWS's secrets
 * are 40 bytes): docs/benchmarks.md, "What a warm hit costs in
 * instructions".
 */
#include "auth/sigv4.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "base/fnv.h"
#include "base/sha256.h"

#define KEY_SLOTS 256
#define SECRET_RAW_MAX 128

/* What the cache compares of a secret: its bytes, or past SECRET_RAW_MAX
 * its SHA-256 (hashed set, len 32). */
struct secret_tag {
	bool hashed;
	unsigned char len;
	unsigned char b[SECRET_RAW_MAX];
};

struct key_entry {
	bool used;
	struct secret_tag secret;
	char access_key[129];
	char date[9];
	char region[64];
	char service[32];
	unsigned char key[32];
};

static struct key_entry key_cache[KEY_SLOTS];
static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;

/* kSecret = "AWS4" + secret; kDate, kRegion, kService, kSigning. HMAC
 * hashes a key longer than SHA-256's 64-byte block before it uses it
 * (RFC 2104), so a long kSecret is hashed here, in pieces, and nothing is
 * allocated: there is no out-of-memory fallback to get wrong (one once
 * derived the key from four zero bytes, a key anyone could sign with).
 * Returns 0, or -ENOMEM (key zeroed) when no digest context can be had. */
static int derive_key(const char *secret, const char *date, const char *region,
                      const char *service, unsigned char key[32])
{
	size_t slen = strlen(secret);
	unsigned char ks[64], k[32];
	size_t klen = slen + 4;
	bool ok = true;
	if (klen <= sizeof ks) {
		memcpy(ks, "AWS4", 4);
		memcpy(ks + 4, secret, slen);
	} else {
		EVP_MD_CTX *md = sha256_begin();
		unsigned int n = 0;
		ok = md && EVP_DigestUpdate(md, "AWS4", 4) && EVP_DigestUpdate(md, secret, slen) &&
		     EVP_DigestFinal_ex(md, ks, &n) && n == 32;
		klen = 32;
	}
	if (!ok) {
		OPENSSL_cleanse(ks, sizeof ks);
		memset(key, 0, 32);
		return -ENOMEM;
	}
	sha256_hmac(ks, klen, date, strlen(date), k);
	OPENSSL_cleanse(ks, sizeof ks);
	sha256_hmac(k, 32, region, strlen(region), k);
	sha256_hmac(k, 32, service, strlen(service), k);
	sha256_hmac(k, 32, "aws4_request", 12, key);
	OPENSSL_cleanse(k, sizeof k);
	return 0;
}

int sv4_signing_key(const char *access_key, const char *secret, const char *date,
                    const char *region, const char *service, unsigned char key[32])
{
	struct key_entry probe = { .used = true };
	bool cacheable = strlen(access_key) < sizeof probe.access_key &&
	                 strlen(date) < sizeof probe.date && strlen(region) < sizeof probe.region &&
	                 strlen(service) < sizeof probe.service;
	if (!cacheable)
		return derive_key(secret, date, region, service, key);
	size_t slen = strlen(secret);
	probe.secret.hashed = slen > SECRET_RAW_MAX;
	probe.secret.len = probe.secret.hashed ? 32 : (unsigned char)slen;
	if (probe.secret.hashed)
		sha256(secret, slen, probe.secret.b);
	else
		memcpy(probe.secret.b, secret, slen);
	/* Lengths checked above: each fits with its terminator. */
	memcpy(probe.access_key, access_key, strlen(access_key) + 1);
	memcpy(probe.date, date, strlen(date) + 1);
	memcpy(probe.region, region, strlen(region) + 1);
	memcpy(probe.service, service, strlen(service) + 1);
	uint64_t h = FNV1A64_OFFSET;
	h = fnv1a64_add(h, probe.access_key, strlen(access_key) + 1);
	h = fnv1a64_add(h, probe.date, strlen(date) + 1);
	h = fnv1a64_add(h, probe.region, strlen(region) + 1);
	h = fnv1a64_add(h, probe.service, strlen(service) + 1);
	h = fnv1a64_add(h, probe.secret.b, probe.secret.len);
	struct key_entry *e = &key_cache[h % KEY_SLOTS];

	pthread_mutex_lock(&key_lock);
	bool hit = e->used && e->secret.hashed == probe.secret.hashed &&
	           e->secret.len == probe.secret.len &&
	           memcmp(e->secret.b, probe.secret.b, probe.secret.len) == 0 &&
	           strcmp(e->access_key, probe.access_key) == 0 &&
	           strcmp(e->date, probe.date) == 0 && strcmp(e->region, probe.region) == 0 &&
	           strcmp(e->service, probe.service) == 0;
	if (hit)
		memcpy(key, e->key, 32);
	pthread_mutex_unlock(&key_lock);
	if (hit) {
		OPENSSL_cleanse(probe.secret.b, probe.secret.len);
		return 0;
	}

	int rc = derive_key(secret, date, region, service, key);
	if (rc < 0) {
		OPENSSL_cleanse(&probe, sizeof probe);
		return rc; /* not a key to keep */
	}
	memcpy(probe.key, key, 32);
	pthread_mutex_lock(&key_lock);
	*e = probe;
	pthread_mutex_unlock(&key_lock);
	OPENSSL_cleanse(&probe, sizeof probe);
	return 0;
}
