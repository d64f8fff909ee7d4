/*
 * sha256.c - OpenSSL's SHA-256, looked up once (sha256.h).
 */
#include "base/sha256.h"

#include <pthread.h>
#include <stdbool.h>

static EVP_MD *fetched;
static pthread_key_t ctx_key; /* the calling thread's context (sha256_begin) */
static bool ctx_key_ok;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *ctx)
{
	EVP_MD_CTX_free(ctx);
}

static void fetch(void)
{
	fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
	ctx_key_ok = pthread_key_create(&ctx_key, ctx_free) == 0;
}

const EVP_MD *sha256_md(void)
{
	pthread_once(&fetch_once, fetch);
	return fetched ? fetched : EVP_sha256();
}

EVP_MD_CTX *sha256_begin(void)
{
	const EVP_MD *md = sha256_md();
	EVP_MD_CTX *ctx = ctx_key_ok ? pthread_getspecific(ctx_key) : NULL;
	if (!ctx && ctx_key_ok) {
		ctx = EVP_MD_CTX_new();
		if (ctx && pthread_setspecific(ctx_key, ctx) != 0) {
			EVP_MD_CTX_free(ctx);
			ctx = NULL;
		}
	}
	if (ctx && EVP_DigestInit_ex2(ctx, md, NULL) != 1)
		ctx = NULL;
	return ctx;
}

void sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 32;
	EVP_MD_CTX *ctx = sha256_begin();
	if (ctx && EVP_DigestUpdate(ctx, p, n) == 1 && EVP_DigestFinal_ex(ctx, out, &len) == 1)
		return;
	EVP_Digest(p, n, out, &len, sha256_md(), NULL); /* no context: the one-shot call */
}
