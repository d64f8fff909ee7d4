/*
 * chunked.c - push decoder for aws-chunked request bodies.
 *
 * Wire format and signatures: S3 API reference, "Signature Calculations
 * for the Authorization Header: Transferring Payload in Multiple Chunks"
 * (sigv4-streaming) and "... Including Trailing Headers"
 * (sigv4-streaming-trailers). A state machine consumes any split of the
 * input; memory is one header/trailer line plus the running hashes.
 */
#include "auth/chunked.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "auth/checksum.h"
#include "auth/sigv4.h"
#include "base/buf.h"
#include "base/sha256.h"

#define LINE_MAX_LEN 4096           /* a chunk header or trailer line */
#define MAX_CHUNK_SIZE (1ull << 40) /* larger sizes are garbage, not data */
#define MAX_TRAILERS 8              /* declared in x-amz-trailer */
#define MAX_TRAILER_LINES 16

enum state {
	ST_HEADER,     /* reading "hex-size[;chunk-signature=sig]\r\n" */
	ST_DATA,       /* passing chunk bytes to the sink */
	ST_DATA_CR,    /* the "\r" after chunk data */
	ST_DATA_LF,    /* the "\n" after chunk data */
	ST_TRAILER,    /* after the final chunk: trailer lines up to a blank one */
	ST_END,
};

#define TRAILER_NAME_MAX 64

struct trailer {
	char name[TRAILER_NAME_MAX]; /* lower case */
	enum cks_alg alg;      /* CKS_NONE for a trailer we only require */
	struct cks cks;
	bool seen;
};

struct ack_decoder {
	enum ack_mode mode;
	enum state state;
	enum ack_status status;      /* ACK_MORE until done or failed */
	unsigned char key[32];
	char prev_sig[65];           /* seed, then each chunk's signature */
	char chunk_sig[65];          /* the signature of the chunk being read */
	char *amz_date, *scope;
	int64_t decoded_length;
	uint64_t decoded;
	uint64_t remaining;          /* bytes left in the current chunk */
	EVP_MD_CTX *chunk_md;        /* SHA-256 of the current chunk (signed modes) */
	EVP_MD_CTX *trailer_md;      /* SHA-256 of the canonical trailers */
	struct trailer trailers[MAX_TRAILERS];
	size_t n_trailers;
	unsigned trailer_lines;
	bool trailer_sig_seen;
	char trailer_sig[65];
	/* "x-amz-checksum-crc32: <b64>" once verified: any name and value fit
	 * (a compiler that cannot tell which names verify warns otherwise). */
	char checksum[TRAILER_NAME_MAX + 2 + CKS_MAX_B64];
	char line[LINE_MAX_LEN + 1];
	size_t line_len;
	ack_sink_cb sink;
	void *sink_arg;
};

int ack_mode_from_payload_hash(const char *v)
{
	if (!v)
		return -1;
	if (strcmp(v, SV4_STREAMING_SIGNED) == 0)
		return ACK_SIGNED;
	if (strcmp(v, SV4_STREAMING_SIGNED_TRAILER) == 0)
		return ACK_SIGNED_TRAILER;
	if (strcmp(v, SV4_STREAMING_UNSIGNED_TRAILER) == 0)
		return ACK_UNSIGNED_TRAILER;
	return -1;
}

static bool signed_mode(const struct ack_decoder *d)
{
	return d->mode == ACK_SIGNED || d->mode == ACK_SIGNED_TRAILER;
}

static bool is_lower_hex64(const char *s, size_t n)
{
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Parses the comma-separated x-amz-trailer value; false if it names too
 * many trailers or one too long to be real. */
static bool declare_trailers(struct ack_decoder *d, const char *names)
{
	const char *p = names;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		const char *start = p;
		while (*p && *p != ',')
			p++;
		const char *end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		size_t n = (size_t)(end - start);
		if (n == 0)
			continue;
		if (d->n_trailers == MAX_TRAILERS || n >= sizeof d->trailers[0].name)
			return false;
		struct trailer *t = &d->trailers[d->n_trailers++];
		for (size_t i = 0; i < n; i++)
			t->name[i] = (char)((start[i] >= 'A' && start[i] <= 'Z') ? start[i] + 32 : start[i]);
		t->name[n] = '\0';
		if (strncmp(t->name, "x-amz-checksum-", 15) == 0) {
			t->alg = cks_alg_from_name(t->name, n);
			if (t->alg == CKS_NONE || cks_init(&t->cks, t->alg) != 0)
				return false;
		}
	}
	return true;
}

struct ack_decoder *ack_create(enum ack_mode mode, const unsigned char signing_key[32],
                               const char *seed_signature, const char *amz_date,
                               const char *scope, int64_t decoded_length,
                               const char *trailer_names, ack_sink_cb sink, void *sink_arg)
{
	struct ack_decoder *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	d->mode = mode;
	d->state = ST_HEADER;
	d->status = ACK_MORE;
	d->decoded_length = decoded_length;
	d->sink = sink;
	d->sink_arg = sink_arg;
	bool ok = mode == ACK_SIGNED || mode == ACK_SIGNED_TRAILER || mode == ACK_UNSIGNED_TRAILER;
	if (ok && signed_mode(d)) {
		ok = signing_key && seed_signature && amz_date && scope &&
		     is_lower_hex64(seed_signature, strlen(seed_signature));
		if (ok) {
			memcpy(d->key, signing_key, 32);
			memcpy(d->prev_sig, seed_signature, 65);
			d->amz_date = strdup(amz_date);
			d->scope = strdup(scope);
			d->chunk_md = EVP_MD_CTX_new();
			d->trailer_md = EVP_MD_CTX_new();
			ok = d->amz_date && d->scope && d->chunk_md && d->trailer_md &&
			     EVP_DigestInit_ex(d->trailer_md, sha256_md(), NULL);
		}
	}
	if (ok && trailer_names)
		ok = declare_trailers(d, trailer_names);
	if (!ok) {
		ack_destroy(d);
		return NULL;
	}
	return d;
}

void ack_destroy(struct ack_decoder *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n_trailers; i++)
		cks_fini(&d->trailers[i].cks);
	EVP_MD_CTX_free(d->chunk_md);
	EVP_MD_CTX_free(d->trailer_md);
	free(d->amz_date);
	free(d->scope);
	OPENSSL_cleanse(d->key, sizeof d->key);
	free(d);
}

uint64_t ack_decoded_bytes(const struct ack_decoder *d)
{
	return d->decoded;
}

const char *ack_trailer_checksum(const struct ack_decoder *d)
{
	return d->checksum[0] ? d->checksum : NULL;
}

/* HMAC(key, "<kind>\n<date>\n<scope>\n<prev>\n[<empty hash>\n]<hash>") */
static void stream_signature(const struct ack_decoder *d, const char *kind, bool empty_line,
                             const char *hash_hex, char out[65])
{
	char sts[512];
	int n = snprintf(sts, sizeof sts, "%s\n%s\n%s\n%s\n%s%s%s", kind, d->amz_date, d->scope,
	                 d->prev_sig, empty_line ? SV4_EMPTY_SHA256 : "", empty_line ? "\n" : "",
	                 hash_hex);
	unsigned char mac[32];
	unsigned int mlen = sizeof mac;
	if (n < 0 || (size_t)n >= sizeof sts) {
		/* Scope too long to be real: make the comparison fail. */
		memset(out, 'x', 64);
		out[64] = '\0';
		return;
	}
	HMAC(sha256_md(), d->key, 32, (const unsigned char *)sts, (size_t)n, mac, &mlen);
	hex_encode(mac, sizeof mac, out);
}

/* Finishes md (the chunk's or the trailer's running SHA-256) and checks
 * the signature sent for it, in constant time; the computed one goes to
 * sig (it chains into the next chunk's). */
static bool signature_matches(const struct ack_decoder *d, EVP_MD_CTX *md_ctx,
                              const char *kind, bool empty_line, const char *sent,
                              char sig[65])
{
	unsigned char md[32];
	unsigned int mlen = 0;
	char hash[65];
	EVP_DigestFinal_ex(md_ctx, md, &mlen);
	hex_encode(md, sizeof md, hash);
	stream_signature(d, kind, empty_line, hash, sig);
	return ct_equal(sig, 64, sent, 64);
}

/* The chunk just ended: check its signature (signed modes). */
static enum ack_status end_of_chunk(struct ack_decoder *d)
{
	if (!signed_mode(d))
		return ACK_MORE;
	char sig[65];
	if (!signature_matches(d, d->chunk_md, "AWS4-HMAC-SHA256-PAYLOAD", true, d->chunk_sig, sig))
		return ACK_ERR_SIGNATURE;
	memcpy(d->prev_sig, sig, sizeof sig);
	return ACK_MORE;
}

/* "hex-size" or "hex-size;chunk-signature=<64 hex>" (without CRLF). */
static enum ack_status chunk_header(struct ack_decoder *d, const char *l, size_t n)
{
	size_t i = 0;
	uint64_t size = 0;
	while (i < n && l[i] != ';') {
		char c = l[i];
		int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 :
		        (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
		if (v < 0 || i >= 16)
			return ACK_ERR_FRAMING;
		size = size << 4 | (uint64_t)v;
		i++;
	}
	if (i == 0 || size > MAX_CHUNK_SIZE)
		return ACK_ERR_FRAMING;
	static const char ext[] = ";chunk-signature=";
	if (signed_mode(d)) {
		if (n - i != sizeof ext - 1 + 64 || memcmp(l + i, ext, sizeof ext - 1) != 0 ||
		    !is_lower_hex64(l + i + sizeof ext - 1, 64))
			return ACK_ERR_FRAMING;
		memcpy(d->chunk_sig, l + i + sizeof ext - 1, 64);
		d->chunk_sig[64] = '\0';
		if (!EVP_DigestInit_ex(d->chunk_md, sha256_md(), NULL))
			return ACK_ERR_FRAMING;
	} else if (i != n) {
		return ACK_ERR_FRAMING; /* unsigned chunks carry no extensions */
	}
	if (d->decoded_length >= 0 && d->decoded + size > (uint64_t)d->decoded_length)
		return ACK_ERR_LENGTH;
	d->remaining = size;
	if (size > 0) {
		d->state = ST_DATA;
		return ACK_MORE;
	}
	/* The final, empty chunk. Its signature covers the empty string. */
	enum ack_status st = end_of_chunk(d);
	d->state = ST_TRAILER;
	return st;
}

static struct trailer *find_trailer(struct ack_decoder *d, const char *name, size_t n)
{
	for (size_t i = 0; i < d->n_trailers; i++)
		if (strlen(d->trailers[i].name) == n && strncasecmp(d->trailers[i].name, name, n) == 0)
			return &d->trailers[i];
	return NULL;
}

/* One "name:value" trailer line (without CRLF). */
static enum ack_status trailer_line(struct ack_decoder *d, const char *l, size_t n)
{
	const char *colon = memchr(l, ':', n);
	if (!colon || colon == l || d->trailer_sig_seen || ++d->trailer_lines > MAX_TRAILER_LINES)
		return ACK_ERR_FRAMING;
	size_t nl = (size_t)(colon - l);
	const char *v = colon + 1, *end = l + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	size_t vl = (size_t)(end - v);

	if (nl == 23 && strncasecmp(l, "x-amz-trailer-signature", 23) == 0) {
		if (d->mode != ACK_SIGNED_TRAILER || !is_lower_hex64(v, vl))
			return ACK_ERR_FRAMING;
		memcpy(d->trailer_sig, v, 64);
		d->trailer_sig[64] = '\0';
		d->trailer_sig_seen = true;
		return ACK_MORE;
	}
	struct trailer *t = find_trailer(d, l, nl);
	if (!t || t->seen)
		return ACK_ERR_FRAMING; /* undeclared or repeated trailer */
	t->seen = true;
	if (d->mode == ACK_SIGNED_TRAILER) {
		/* Canonical trailer for the trailer signature: "name:value\n"
		 * with the name in lower case (sigv4-streaming-trailers). */
		EVP_DigestUpdate(d->trailer_md, t->name, nl);
		EVP_DigestUpdate(d->trailer_md, ":", 1);
		EVP_DigestUpdate(d->trailer_md, v, vl);
		EVP_DigestUpdate(d->trailer_md, "\n", 1);
	}
	if (t->alg != CKS_NONE) {
		char want[CKS_MAX_B64];
		cks_final_base64(&t->cks, want);
		if (!ct_equal(want, strlen(want), v, vl))
			return ACK_ERR_CHECKSUM;
		if (!d->checksum[0])
			snprintf(d->checksum, sizeof d->checksum, "%s: %s", t->name, want);
	}
	return ACK_MORE;
}

/* The blank line after the trailers: everything must now add up. */
static enum ack_status end_of_body(struct ack_decoder *d)
{
	if (d->mode == ACK_SIGNED_TRAILER) {
		if (!d->trailer_sig_seen)
			return ACK_ERR_SIGNATURE;
		char sig[65];
		if (!signature_matches(d, d->trailer_md, "AWS4-HMAC-SHA256-TRAILER", false,
		                       d->trailer_sig, sig))
			return ACK_ERR_SIGNATURE;
	}
	for (size_t i = 0; i < d->n_trailers; i++)
		if (!d->trailers[i].seen)
			return ACK_ERR_FRAMING; /* a declared trailer never came */
	if (d->decoded_length >= 0 && d->decoded != (uint64_t)d->decoded_length)
		return ACK_ERR_LENGTH;
	d->state = ST_END;
	return ACK_DONE;
}

/* A complete line (CRLF stripped) in ST_HEADER or ST_TRAILER. */
static enum ack_status got_line(struct ack_decoder *d, const char *l, size_t n)
{
	if (d->state == ST_HEADER)
		return chunk_header(d, l, n);
	if (n == 0)
		return end_of_body(d);
	return trailer_line(d, l, n);
}

/* Feeds payload bytes of the current chunk to the hashes and the sink. */
static enum ack_status chunk_data(struct ack_decoder *d, const char *p, size_t n)
{
	if (signed_mode(d))
		EVP_DigestUpdate(d->chunk_md, p, n);
	for (size_t i = 0; i < d->n_trailers; i++)
		if (d->trailers[i].alg != CKS_NONE)
			cks_update(&d->trailers[i].cks, p, n);
	d->decoded += n;
	d->remaining -= n;
	if (d->sink && n && d->sink(d->sink_arg, p, n) != 0)
		return ACK_ERR_SINK;
	return ACK_MORE;
}

enum ack_status ack_feed(struct ack_decoder *d, const char *data, size_t len)
{
	if (d->status == ACK_DONE && len > 0)
		d->status = ACK_ERR_FRAMING; /* data after the end */
	if (d->status != ACK_MORE)
		return d->status;
	enum ack_status st = ACK_MORE;
	size_t i = 0;
	while (i < len && st == ACK_MORE) {
		switch (d->state) {
		case ST_HEADER:
		case ST_TRAILER: {
			const char *nl = memchr(data + i, '\n', len - i);
			size_t take = nl ? (size_t)(nl - (data + i)) : len - i;
			if (take > LINE_MAX_LEN - d->line_len) {
				st = ACK_ERR_FRAMING; /* line too long */
				break;
			}
			memcpy(d->line + d->line_len, data + i, take);
			d->line_len += take;
			i += take;
			if (!nl)
				break;
			i++; /* the '\n' */
			if (d->line_len == 0 || d->line[d->line_len - 1] != '\r') {
				st = ACK_ERR_FRAMING; /* bare LF */
				break;
			}
			size_t n = d->line_len - 1;
			d->line_len = 0;
			if (memchr(d->line, '\r', n)) {
				st = ACK_ERR_FRAMING;
				break;
			}
			st = got_line(d, d->line, n);
			if (st == ACK_DONE && i < len)
				st = ACK_ERR_FRAMING; /* data after the end */
			break;
		}
		case ST_DATA: {
			size_t take = len - i;
			if (take > d->remaining)
				take = (size_t)d->remaining;
			st = chunk_data(d, data + i, take);
			i += take;
			if (d->remaining == 0)
				d->state = ST_DATA_CR;
			break;
		}
		case ST_DATA_CR:
		case ST_DATA_LF:
			if (data[i] != (d->state == ST_DATA_CR ? '\r' : '\n')) {
				st = ACK_ERR_FRAMING;
				break;
			}
			i++;
			if (d->state == ST_DATA_CR) {
				d->state = ST_DATA_LF;
			} else {
				d->state = ST_HEADER;
				st = end_of_chunk(d);
			}
			break;
		case ST_END:
			st = ACK_ERR_FRAMING;
			break;
		}
	}
	d->status = st;
	return st;
}

enum ack_status ack_finish(struct ack_decoder *d)
{
	if (d->status == ACK_MORE)
		d->status = ACK_ERR_FRAMING; /* truncated */
	return d->status;
}
