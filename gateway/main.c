/*
 * main.c - the larder command.
 *
 *   larder serve [--config FILE] [--check]
 *   larder stats [--admin URL] [--json]
 *   larder purge [--admin URL] [--key] s3://BUCKET[/PREFIX]
 *   larder warm [--admin URL] [options] s3://BUCKET[/PREFIX]
 *   larder jobs [--admin URL] [--json] [--cancel JOB_ID]
 *   larder unpin [--admin URL] JOB_ID | s3://BUCKET[/PREFIX]
 *   larder profile start|stop|list ...
 *   larder --version | --help
 *
 * Configuration comes from the file (optional) and LARDER_* environment
 * variables; see config/larder.conf.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "base/log.h"
#include "gateway/cli.h"
#include "gateway/server.h"

#ifndef LARDER_VERSION
#define LARDER_VERSION "dev"
#endif

static void usage(FILE *f)
{
	fputs("usage: larder serve [--config FILE] [--check]\n"
	      "       larder stats [--admin URL] [--json]\n"
	      "       larder purge [--admin URL] [--key] s3://BUCKET[/PREFIX]\n"
	      "       larder warm [--admin URL] [options] s3://BUCKET[/PREFIX]\n"
	      "       larder jobs [--admin URL] [--json] [--cancel JOB_ID]\n"
	      "       larder lookahead [--admin URL] --window N --keys-file F s3://BUCKET\n"
	      "       larder unpin [--admin URL] JOB_ID | s3://BUCKET[/PREFIX]\n"
	      "       larder profile start NAME --key ID | --tag TAG; stop NAME; list\n"
	      "       larder cluster [--admin URL] [--json]\n"
	      "       larder --version\n"
	      "\n"
	      "larder is a caching S3 gateway for training data. It verifies each request's\n"
	      "SigV4 signature against its own client keys and forwards it to the upstream S3,\n"
	      "re-signed with the upstream credentials.\n"
	      "\n"
	      "serve     run the gateway until SIGTERM (SIGHUP reloads keys and policies)\n"
	      "  --config FILE  INI settings (default: $LARDER_CONFIG, or none); every\n"
	      "                 setting can also come from a LARDER_* environment variable\n"
	      "  --check        validate the configuration, print a summary and exit\n"
	      "\n"
	      "stats     what a running larder served, in total, per bucket and per client\n"
	      "purge     make a running larder forget cached objects (a prefix, or --key one)\n"
	      "warm      read objects into a running larder's cache ahead of a job, with progress\n"
	      "jobs      list (or --cancel) warming jobs\n"
	      "lookahead keep objects warm ahead of a job that reads a known list in order\n"
	      "unpin     end a pin (larder warm --pin) early\n"
	      "profile   record what a job reads, to warm it again (larder warm --profile)\n"
	      "cluster   a running larder's view of its cluster: members, Redis, directory\n"
	      "          all but serve talk to the admin endpoint (--admin URL, else\n"
	      "          $LARDER_ADMIN_URL) with the token in $LARDER_ADMIN_TOKEN;\n"
	      "          \"larder COMMAND --help\" tells more\n"
	      "\n"
	      "Exit status: 0 on a clean stop or a valid --check, 1 on a runtime failure,\n"
	      "2 on bad usage or configuration.\n", f);
}

static int serve(int argc, char **argv)
{
	const char *path = NULL;
	int check = 0;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 || strncmp(argv[i], "--config=", 9) == 0) {
			path = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : "";
			if (!*path) {
				fprintf(stderr, "larder serve: --config needs a FILE\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--check") == 0) {
			check = 1;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "larder serve: unknown argument \"%s\"\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	/* Before any thread starts (the access log's flusher, below): a thread
	 * that does not block them would take a SIGHUP or a SIGTERM whenever the
	 * main thread is not waiting for one (starting, reloading, draining),
	 * and its default action ends the process. */
	if (!check)
		gw_block_signals(NULL);
	if (!path) {
		path = getenv("LARDER_CONFIG");
		if (path && !*path)
			path = NULL; /* empty counts as unset, as for every LARDER_* variable */
	}
	char err[512];
	struct cfg *cfg = cfg_load(path, err, sizeof err);
	if (!cfg) {
		fprintf(stderr, "larder: invalid configuration: %s\n", err);
		return 2;
	}
	int level = log_level_parse(cfg->log_level ? cfg->log_level : "info");
	log_set_level(level < 0 ? LOG_INFO : (enum log_level)level);
	/* A misspelt variable would be ignored silently. */
	const char *var;
	for (size_t at = 0; (var = cfg_env_unknown((const char *const *)environ, &at)) != NULL;)
		log_warn("config", "%.*s is not a variable larder reads: ignored",
		         (int)strcspn(var, "="), var);
	for (const char *o = cfg->overridden; o && *o;) {
		size_t n = strcspn(o, "\n");
		log_warn("config", "%.*s", (int)n, o);
		o += n + (o[n] == '\n');
	}
	if (check && gw_check(cfg) != 0) {
		cfg_free(cfg);
		return 2;
	}
	if (check) {
		printf("configuration ok: listen %s:%u, upstream %s (%s), %zu client keys%s\n",
		       cfg->listen_host, cfg->listen_port,
		       cfg->upstream_url ? cfg->upstream_url : "AWS S3", cfg->upstream_region,
		       cfg->n_keys, cfg->anonymous.n_grants ? ", anonymous access on" : "");
		cfg_free(cfg);
		return 0;
	}
	if (log_access_open(cfg->access_log, cfg->access_log_buffer, cfg->access_log_flush_ms) != 0) {
		fprintf(stderr, "larder: LARDER_ACCESS_LOG: cannot open \"%s\"\n", cfg->access_log);
		cfg_free(cfg);
		return 2;
	}
	gw_warn_no_keys(cfg);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = gw_run(cfg, path);
	curl_global_cleanup();
	log_access_close();
	cfg_free(cfg);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "serve") == 0)
		return serve(argc - 2, argv + 2);
	if (strcmp(argv[1], "stats") == 0)
		return cli_stats(argc - 2, argv + 2);
	if (strcmp(argv[1], "purge") == 0)
		return cli_purge(argc - 2, argv + 2);
	if (strcmp(argv[1], "warm") == 0)
		return cli_warm(argc - 2, argv + 2);
	if (strcmp(argv[1], "jobs") == 0)
		return cli_jobs(argc - 2, argv + 2);
	if (strcmp(argv[1], "lookahead") == 0)
		return cli_lookahead(argc - 2, argv + 2);
	if (strcmp(argv[1], "unpin") == 0)
		return cli_unpin(argc - 2, argv + 2);
	if (strcmp(argv[1], "profile") == 0)
		return cli_profile(argc - 2, argv + 2);
	if (strcmp(argv[1], "cluster") == 0)
		return cli_cluster(argc - 2, argv + 2);
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		printf("larder %s\n", LARDER_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "larder: unknown command \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
