/*
 * sha256.c - OpenSSL's SHA-256 and HMAC-SHA256, looked up once (sha256.h).
 */
#include "base/sha256.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>

#include "base/alloc.h"

static EVP_MD *fetched;
static EVP_MAC_CTX *hmac_template; /* HMAC with its digest set; each thread copies it once */
static pthread_key_t thread_key;   /* the calling thread's struct thread_ctx */
static bool thread_key_ok;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

/* One thread's contexts, each made on first use and kept until the
 * thread ends. */
struct thread_ctx {
	EVP_MD_CTX *md;
	EVP_MAC_CTX *mac;
};

static void thread_ctx_free(void *p)
{
	struct thread_ctx *t = p;
	EVP_MD_CTX_free(t->md);
	EVP_MAC_CTX_free(t->mac);
	free(t);
}

static void fetch(void)
{
	fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	hmac_template = mac ? EVP_MAC_CTX_new(mac) : NULL;
	if (hmac_template && !EVP_MAC_CTX_set_params(hmac_template, params)) {
		EVP_MAC_CTX_free(hmac_template);
		hmac_template = NULL;
	}
	EVP_MAC_free(mac); /* the context keeps its own reference */
	thread_key_ok = pthread_key_create(&thread_key, thread_ctx_free) == 0;
}

const EVP_MD *sha256_md(void)
{
	pthread_once(&fetch_once, fetch);
	return fetched ? fetched : EVP_sha256();
}

/* This thread's contexts; NULL when they cannot be had (out of memory). */
static struct thread_ctx *thread_ctx(void)
{
	pthread_once(&fetch_once, fetch);
	if (!thread_key_ok)
		return NULL;
	struct thread_ctx *t = pthread_getspecific(thread_key);
	if (!t) {
		t = mem_calloc(1, sizeof *t);
		if (t && pthread_setspecific(thread_key, t) != 0) {
			free(t);
			t = NULL;
		}
	}
	return t;
}

EVP_MD_CTX *sha256_begin(void)
{
	struct thread_ctx *t = thread_ctx();
	if (t && !t->md)
		t->md = EVP_MD_CTX_new();
	if (!t || !t->md || EVP_DigestInit_ex2(t->md, sha256_md(), NULL) != 1)
		return NULL;
	return t->md;
}

void sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 32;
	EVP_MD_CTX *ctx = sha256_begin();
	if (ctx && EVP_DigestUpdate(ctx, p, n) == 1 && EVP_DigestFinal_ex(ctx, out, &len) == 1)
		return;
	EVP_Digest(p, n, out, &len, sha256_md(), NULL); /* no context: the one-shot call */
}

void sha256_hmac(const void *key, size_t klen, const void *p, size_t n, unsigned char out[32])
{
	struct thread_ctx *t = thread_ctx();
	if (t && !t->mac && hmac_template)
		t->mac = EVP_MAC_CTX_dup(hmac_template);
	size_t len = 0;
	bool ok = t && t->mac && EVP_MAC_init(t->mac, key, klen, NULL) &&
	          EVP_MAC_update(t->mac, p, n) && EVP_MAC_final(t->mac, out, &len, 32) && len == 32;
	if (!ok) { /* no context: the one-shot call */
		unsigned int olen = 32;
		HMAC(sha256_md(), key, (int)klen, p, n, out, &olen);
	}
}
