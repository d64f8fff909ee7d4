/*
 * creds.h - upstream AWS credentials, found in the SDKs' usual order and
 * kept fresh in the background.
 *
 * Order (the first that yields credentials wins, as the AWS SDKs do):
 *  1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
 *  2. shared files: AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and
 *     AWS_CONFIG_FILE (~/.aws/config), profile AWS_PROFILE (default "default")
 *     A profile that uses role_arn, credential_process or SSO is not
 *     supported: it is logged and skipped.
 *  3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN
 *     (+ AWS_ROLE_SESSION_NAME) -> STS AssumeRoleWithWebIdentity
 *     (endpoint AWS_ENDPOINT_URL_STS, else AWS_STS_ENDPOINT_URL, else
 *     sts.<region>.amazonaws.com; region, else AWS_REGION, else
 *     AWS_DEFAULT_REGION, else the global sts.amazonaws.com)
 *  4. container: AWS_CONTAINER_CREDENTIALS_FULL_URI (+ AWS_CONTAINER_AUTHORIZATION_TOKEN
 *     or AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE), or
 *     AWS_CONTAINER_CREDENTIALS_RELATIVE_URI under http://169.254.170.2
 *     (RELATIVE_URI wins; the token file wins over the token and is re-read
 *     on every refresh; a FULL_URI must be https, or http to loopback or
 *     the ECS/EKS agent addresses)
 *  5. EC2 IMDSv2: PUT /latest/api/token, then GET
 *     /latest/meta-data/iam/security-credentials/[role]; endpoint
 *     AWS_EC2_METADATA_SERVICE_ENDPOINT (default http://169.254.169.254),
 *     skipped when AWS_EC2_METADATA_DISABLED=true
 *
 * A source that is configured but fails (only one of AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY set, AWS_PROFILE naming a missing profile, an STS
 * or container endpoint that refuses) stops the chain with an error rather
 * than falling through to a different identity, as botocore does. IMDS
 * failing only means nothing was found.
 *
 * Temporary credentials (those with an expiry) are refreshed by a
 * background thread refresh_margin seconds before they expire; until a new
 * set arrives the old one stays in use, and a failed refresh is retried
 * with backoff. Readers never block on the network.
 *
 * The environment is read through the envp array given at creation, so
 * tests can run each provider in isolation.
 */
#ifndef LARDER_CREDS_H
#define LARDER_CREDS_H

#include <stdbool.h>
#include <time.h>

struct creds {
	char access_key[128];
	char secret_key[128];
	char session_token[4096]; /* "" when none */
	time_t expiration;        /* 0 = does not expire */
};

struct creds_provider;

/*
 * Resolves the chain once (blocking network calls are allowed here: it
 * runs before the workers start) and, if the credentials expire, starts
 * the refresh thread. envp: NULL-terminated "NAME=value" array (NULL means
 * the process environment). region: for the STS endpoint.
 * Returns NULL with a message in err when no provider yields credentials.
 */
struct creds_provider *creds_provider_create(const char *const *envp, const char *region,
                                             unsigned refresh_margin_s,
                                             char *err, size_t errlen);

/*
 * What creds_provider_create would refuse without asking the network (for
 * larder serve --check, and the start before it): the chain run on the
 * environment and the shared files, with a source that would fetch (STS,
 * the container endpoint, IMDS) taken as working once its local settings
 * and token file check out. 0, or -1 with the same message in err.
 */
int creds_check(const char *const *envp, const char *region, char *err, size_t errlen);

/* Copies the current credentials. Thread-safe; never blocks on I/O. The
 * copy holds secrets: wipe it (explicit_bzero) when done. */
void creds_provider_get(struct creds_provider *p, struct creds *out);

/* Which provider supplied them: "env", "profile", "web-identity",
 * "container" or "imds". */
const char *creds_provider_source(const struct creds_provider *p);

/* Number of successful refreshes since creation (for tests and metrics). */
unsigned long creds_provider_refreshes(const struct creds_provider *p);

/* Stops the refresh thread (aborting a refresh in flight) and frees
 * everything. NULL is a no-op. */
void creds_provider_destroy(struct creds_provider *p);

#endif
