/*
 * cli.h - the larder subcommands that talk to a running larder's admin
 * endpoint (gateway/admin.h) over HTTP.
 *
 * Each takes the arguments after its name and returns the exit status:
 * 0 done, 1 the server could not be reached or refused (its message on
 * stderr), 2 bad usage.
 */
#ifndef LARDER_CLI_H
#define LARDER_CLI_H

/* larder stats [--admin URL] [--json] */
int cli_stats(int argc, char **argv);

/* larder purge [--admin URL] [--key] s3://BUCKET[/PREFIX] */
int cli_purge(int argc, char **argv);

/* larder warm [--admin URL] [--concurrency N] [--bandwidth B] [--pin D] [--no-wait]
 *             [--manifest FILE|s3://BUCKET/KEY] s3://BUCKET[/PREFIX] */
int cli_warm(int argc, char **argv);

/* larder unpin [--admin URL] JOB_ID | s3://BUCKET[/PREFIX] */
int cli_unpin(int argc, char **argv);

/* larder profile start NAME --key ID | --tag TAG; stop NAME; list [--json] */
int cli_profile(int argc, char **argv);

/* larder jobs [--admin URL] [--json] [--cancel JOB_ID] */
int cli_jobs(int argc, char **argv);

/* larder lookahead [--admin URL] [--window N] [--window-bytes SIZE] (one or both)
 *                  (--keys-file F | --manifest s3://B/KEY) [--concurrency N] [--idle S]
 *                  s3://BUCKET
 * larder lookahead [--admin URL] [--json] [--end ID] */
int cli_lookahead(int argc, char **argv);

/* larder cluster [--admin URL] [--json] */
int cli_cluster(int argc, char **argv);

#endif
