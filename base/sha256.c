/*
 * sha256.c - OpenSSL's SHA-256, looked up once (sha256.h).
 */
#include "base/sha256.h"

#include <pthread.h>

static EVP_MD *fetched;
static pthread_once_t fetch_once = PTHREAD_ONCE_INIT;

static void fetch(void)
{
	fetched = EVP_MD_fetch(NULL, "SHA256", NULL);
}

const EVP_MD *sha256_md(void)
{
	pthread_once(&fetch_once, fetch);
	return fetched ? fetched : EVP_sha256();
}

void sha256(const void *p, size_t n, unsigned char out[32])
{
	unsigned int len = 32;
	EVP_Digest(p, n, out, &len, sha256_md(), NULL);
}
