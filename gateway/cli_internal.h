/*
 * cli_internal.h - what cli.c and cli_jobs.c share: the parsed options,
 * option parsing, the requests to the admin endpoint and the printing
 * helpers. Private to those two files (scripts/check-source.py).
 */
#ifndef LARDER_GATEWAY_CLI_INTERNAL_H
#define LARDER_GATEWAY_CLI_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"

#define RESPONSE_MAX (16u << 20)

struct opts {
	const char *cmd;       /* "stats", "purge", "warm" or "jobs", for messages */
	const char *admin;
	bool json;
	bool key;
	const char *target;    /* purge, warm: s3://bucket/prefix */
	const char *manifest;  /* warm: a local file of keys, or s3://bucket/key */
	const char *cancel;    /* jobs: a job to cancel */
	long concurrency;      /* warm */
	long long bandwidth;   /* warm: bytes per second */
	bool no_wait;          /* warm: print the job id and return */
	long long pin_s;       /* warm: pin what it warms this many seconds */
	const char *profile;   /* warm: replay this access profile */
};

/* Parses the options every subcommand shares. Returns -1 to continue, else
 * the exit status (--help: 0; a usage error: 2, reported). */
int cli_parse(struct opts *o, int argc, char **argv, void (*usage)(FILE *));

/* One request to the admin endpoint (method NULL: GET, or POST with a
 * post_body). Returns 0 with *status and the body in resp, or 1 when it
 * could not be made (reported on stderr). */
int cli_call_method(const struct opts *o, const char *method, const char *path,
                    const char *post_body, long *status, struct buf *resp);
int cli_call(const struct opts *o, const char *path, const char *post_body, long *status,
             struct buf *resp);

/* A 2xx with a JSON object: returns it. Otherwise reports the server's
 * message (or what came instead) on stderr and returns NULL. */
json_t *cli_json_answer(const struct opts *o, long status, const struct buf *resp);

/* cli_call_method, then cli_json_answer: the answer's object, or NULL with
 * the failure reported on stderr. */
json_t *cli_ask(const struct opts *o, const char *method, const char *path, const char *body);

/* GET path and print the answer: as it is with --json, else with print. */
int cli_get_and_print(const struct opts *o, const char *path, void (*print)(json_t *doc));

/* The unsigned integer member k of row (0 when absent or negative). */
uint64_t cli_num(json_t *row, const char *k);
/* n bytes as "12.3 MiB". */
void cli_human_size(uint64_t n, char *out, size_t len);

#endif
