/*
 * server.c - workers, their loops, and the process's signals.
 *
 * Each worker: one libev loop, one libmicrohttpd daemon in external-epoll
 * mode bound with SO_REUSEPORT to the shared port (the kernel spreads
 * connections over the workers), one curl multi handle. SO_REUSEPORT would
 * as well let another process of the same user share the port and take part
 * of the traffic, so the port is first bound without it: a port anyone
 * holds stops the start. The loop watches
 * MHD's epoll fd and its timeout; before each sleep it hands the bytes
 * its fetches gathered to their readers (chunk_flush_pending), unpauses the
 * curl transfers that asked (curlev_run_pending) and re-arms MHD's timer.
 * The main thread only waits for signals.
 */
#include "gateway/server.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <time.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth/creds.h"
#include "base/clock.h"
#include "base/log.h"
#include "gateway/admin.h"
#include "gateway/fetch.h"
#include "gateway/limits.h"
#include "gateway/listcache.h"
#include "gateway/metrics.h"
#include "cluster/placement.h"
#include "gateway/pins.h"
#include "gateway/cluster_profiles.h"
#include "gateway/prefetch.h"
#include "gateway/lookahead.h"
#include "gateway/purge_msg.h"
#include "gateway/profiles.h"
#include "gateway/request.h"
#include "gateway/cache.h"
#include "gateway/req.h"
#include "net/transfer.h"
#include "cluster/cluster.h"
#include "cluster/directory.h"
#include "store/meta.h"
#include "store/store.h"

static void mhd_run(struct worker *w)
{
	MHD_run(w->mhd);
}

static void mhd_io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
	struct worker *w = io->data;
	assert(w->magic == WORKER_MAGIC);
	(void)loop;
	(void)revents;
	mhd_run(w);
}

static void mhd_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	assert(w->magic == WORKER_MAGIC);
	(void)loop;
	(void)revents;
	mhd_run(w);
}

/* Every upstream and peer exchange a worker runs ends here first: counted
 * once, whoever owns it (a retry is one that followed a failed try); a
 * chunk asked of another node is not a request to S3. */
static void count_transfer(const struct transfer *t, CURLcode result, void *arg)
{
	(void)arg;
	metrics_upstream_curl(t->easy, t->status, result, t->retries > 0, t->peer);
}

/* Before the loop sleeps: publish fetched bytes, unpause transfers, then
 * re-arm MHD's timeout. */
static void prepare_cb(struct ev_loop *loop, ev_prepare *p, int revents)
{
	struct worker *w = p->data;
	assert(w->magic == WORKER_MAGIC);
	(void)revents;
	chunk_flush_pending(); /* fetched bytes reach their readers */
	curlev_run_pending(w->curl);
	MHD_UNSIGNED_LONG_LONG ms;
	ev_timer_stop(loop, &w->mhd_timer);
	if (w->mhd_kick) {
		/* MHD_resume_connection() signals MHD's own event fd, but with an
		 * external epoll loop that wake-up was seen to go missing: a resumed
		 * connection then waited for the next timeout. Run MHD now. */
		w->mhd_kick = false;
		ev_timer_set(&w->mhd_timer, 0., 0.);
		ev_timer_start(loop, &w->mhd_timer);
	} else if (w->mhd && MHD_get_timeout(w->mhd, &ms) == MHD_YES) {
		ev_timer_set(&w->mhd_timer, (double)ms / 1000.0, 0.);
		ev_timer_start(loop, &w->mhd_timer);
	}
}

static void drain_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct worker *w = t->data;
	assert(w->magic == WORKER_MAGIC);
	(void)revents;
	unsigned running = request_count_started(w);
	if (running > 0 && clock_mono_s() < w->drain_deadline)
		return;
	if (running > 0)
		log_warn("server", "worker %u: %u requests still running after the grace period; "
		         "closing them", w->index, running);
	w->closing = true;
	if (w->n_live > 0) {
		request_abort_all(w);
		mhd_run(w);
	}
	fetch_abort_all(w);
	ev_timer_stop(loop, t);
	ev_break(loop, EVBREAK_ALL);
}

/* shaper_waker.wake: on whichever thread freed a place in a window. */
static void slot_wake(struct shaper_waker *wk)
{
	struct worker *w = list_item(wk, struct worker, slot_waker);
	ev_async_send(w->loop, &w->slot_async);
}

static void slot_async_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	assert(w->magic == WORKER_MAGIC);
	(void)loop;
	(void)revents;
	shaper_tell(w->gw->shaper, &w->slot_waker);
}

/* SIGTERM reached this worker: stop accepting, let requests finish. */
static void stop_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct worker *w = a->data;
	assert(w->magic == WORKER_MAGIC);
	(void)revents;
	MHD_socket ls = MHD_quiesce_daemon(w->mhd);
	if (ls != MHD_INVALID_SOCKET)
		close(ls);
	w->drain_deadline = clock_mono_s() + w->gw->cfg->shutdown_grace_s;
	ev_timer_init(&w->drain_timer, drain_cb, 0., 0.05);
	w->drain_timer.data = w;
	ev_timer_again(loop, &w->drain_timer);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	assert(w->magic == WORKER_MAGIC);
	/* Named for top -H and perf's per-thread views. */
	pthread_setname_np(pthread_self(), "larder-worker");
	ev_run(w->loop, 0);
	chunk_flush_pending(); /* the references it holds, of chunks that ended */
	return NULL;
}

/* MHD would percent-decode the path and arguments in place; larder reads
 * the raw URI instead (request_uri_cb), so leave them as they came. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

/* GnuTLS's defaults less what S3's own endpoints refuse: TLS 1.2 and 1.3
 * only, and no key exchange without forward secrecy. */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-RSA"
#define TLS_TRIAL_WHY 256 /* bytes of libmicrohttpd's reason kept */

static int worker_start(struct gw *gw, struct worker *w, unsigned index,
                        const struct addrinfo *ai)
{
	const struct cfg *cfg = gw->cfg;
	w->magic = WORKER_MAGIC;
	w->index = index;
	w->gw = gw;
	if (RAND_bytes((unsigned char *)&w->id_salt, sizeof w->id_salt) != 1)
		w->id_salt = (uint64_t)getpid() << 32 ^ (uint64_t)(clock_mono_s() * 1e9);
	w->loop = ev_loop_new(EVFLAG_AUTO);
	if (!w->loop)
		return -1;
	w->curl = curlev_create(w->loop, count_transfer, w);
	if (!w->curl)
		return -1;
	if (gw->cluster && !(w->placement = placement_create(w->loop, gw->cluster)))
		return -1;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_SUPPRESS_DATE_NO_CLOCK |
	                 MHD_USE_ERROR_LOG | (gw->tls_cert ? MHD_USE_TLS : 0);
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* The pool holds the request line and headers, so its size is the
	 * header limit (MHD answers 431 past it), plus room for buffers. */
	size_t pool = cfg->max_header_bytes + REQ_POOL_EXTRA;
	w->mhd = MHD_start_daemon(flags, 0, request_accept_cb, w, request_access_cb, w,
	                          MHD_OPTION_EXTERNAL_LOGGER, log_mhd, (void *)"http",
	                          MHD_OPTION_SOCK_ADDR, ai->ai_addr,
	                          MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
	                          /* SIGPIPE is ignored (gw_run): fd responses
	                           * (arena hits) then go out with sendfile */
	                          MHD_OPTION_SIGPIPE_HANDLED_BY_APP, (unsigned)1,
	                          MHD_OPTION_URI_LOG_CALLBACK, request_uri_cb, w,
	                          MHD_OPTION_NOTIFY_COMPLETED, request_completed_cb, w,
	                          MHD_OPTION_NOTIFY_CONNECTION, request_connection_cb, w,
	                          MHD_OPTION_UNESCAPE_CALLBACK, no_unescape, NULL,
	                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->client_timeout_s,
	                          MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
	                          MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections + CONN_SLACK,
	                          gw->tls_cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END,
	                          gw->tls_cert,
	                          MHD_OPTION_HTTPS_MEM_KEY, gw->tls_key,
	                          MHD_OPTION_HTTPS_PRIORITIES, TLS_PRIORITIES,
	                          MHD_OPTION_END);
	if (!w->mhd)
		return -1;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info)
		return -1;
	ev_io_init(&w->mhd_io, mhd_io_cb, info->epoll_fd, EV_READ);
	w->mhd_io.data = w;
	ev_io_start(w->loop, &w->mhd_io);
	ev_init(&w->mhd_timer, mhd_timer_cb);
	w->mhd_timer.data = w;
	ev_prepare_init(&w->prepare, prepare_cb);
	w->prepare.data = w;
	ev_prepare_start(w->loop, &w->prepare);
	request_header_deadline_start(w);
	ev_async_init(&w->stop_async, stop_cb);
	w->stop_async.data = w;
	ev_async_start(w->loop, &w->stop_async);
	pthread_mutex_init(&w->wake_lock, NULL);
	ev_async_init(&w->wake_async, cache_wake_cb);
	w->wake_async.data = w;
	ev_async_start(w->loop, &w->wake_async);
	ev_async_init(&w->key_async, request_key_wake_cb);
	w->key_async.data = w;
	ev_async_start(w->loop, &w->key_async);
	shaper_waker_init(&w->slot_waker, slot_wake);
	ev_async_init(&w->slot_async, slot_async_cb);
	w->slot_async.data = w;
	ev_async_start(w->loop, &w->slot_async);
	return 0;
}

static void worker_fini(struct worker *w)
{
	if (w->mhd)
		MHD_stop_daemon(w->mhd);
	if (w->curl)
		fetch_abort_all(w);
	placement_destroy(w->placement); /* after the fetches: no ask is left */
	w->placement = NULL;
	curlev_destroy(w->curl);
	if (w->loop)
		ev_loop_destroy(w->loop);
	w->magic = 0;
}

struct addrinfo *gw_resolve(const char *setting, const char *host, unsigned port)
{
	char serv[8];
	snprintf(serv, sizeof serv, "%u", port);
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
	struct addrinfo *ai = NULL;
	int gai = getaddrinfo(host, serv, &hints, &ai);
	if (gai != 0) {
		log_error("config", "%s: cannot resolve \"%s\": %s", setting, host, gai_strerror(gai));
		return NULL;
	}
	return ai;
}

/* 0 when nobody holds the address: it binds without SO_REUSEPORT (with
 * SO_REUSEADDR, so connections of a previous run in TIME_WAIT do not
 * count). Else -errno (EADDRINUSE: another socket, ours or not, has it). */
static int port_unheld(const struct addrinfo *ai)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	int rc = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

/* 0 when the admin port is off or free; else says why and -1. Checked
 * with the client port, before the cache is opened or the cluster joined,
 * so a node refused its admin port touches neither. */
static int admin_port_unheld(const struct cfg *cfg)
{
	if (!cfg->admin_host)
		return 0;
	struct addrinfo *ai = gw_resolve("LARDER_ADMIN_LISTEN", cfg->admin_host, cfg->admin_port);
	if (!ai)
		return -1;
	int held = port_unheld(ai);
	freeaddrinfo(ai);
	if (held != 0)
		log_error("admin", "LARDER_ADMIN_LISTEN: cannot listen on %s:%u (%s); set another "
		          "address, or \"off\"", cfg->admin_host, cfg->admin_port, strerror(-held));
	return held ? -1 : 0;
}

/*
 * Raises the soft open-file limit so LARDER_MAX_CONNECTIONS can be reached:
 * each client connection is a socket, most have an upstream one too, and
 * libmicrohttpd accepts more to answer them 503 SlowDown.
 * Past the hard limit, max_connections is lowered to what fits (and said),
 * so clients beyond it still get SlowDown rather than a failed accept.
 * Returns -1 when the limit leaves no room at all.
 */
static int fit_open_files(struct cfg *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	const rlim_t reserve = 1024; /* cache files, Redis, peers, the connections answered 503 */
	rlim_t want = 2 * (rlim_t)cfg->max_connections + reserve;
	if (rl.rlim_cur >= want)
		return 0;
	rlim_t was = rl.rlim_cur;
	struct rlimit up = { .rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
	                                 ? want : rl.rlim_max, .rlim_max = rl.rlim_max };
	/* The hard limit may be above what the kernel allows (nr_open). */
	while (setrlimit(RLIMIT_NOFILE, &up) != 0 && up.rlim_cur > was)
		up.rlim_cur = up.rlim_cur / 2 > was ? up.rlim_cur / 2 : was;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur >= want) {
		log_info("server", "open-file limit raised from %llu to %llu for %u connections",
		         (unsigned long long)was, (unsigned long long)rl.rlim_cur,
		         cfg->max_connections);
		return 0;
	}
	if (rl.rlim_cur < reserve + 32) {
		log_error("server", "the open-file limit (%llu, hard %llu) is too low to serve: "
		          "raise it (ulimit -n; LimitNOFILE= in systemd; --ulimit nofile= in docker)",
		          (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
		return -1;
	}
	unsigned fit = (unsigned)((rl.rlim_cur - reserve) / 2);
	log_warn("server", "the open-file limit (%llu, hard %llu) allows %u connections: "
	         "LARDER_MAX_CONNECTIONS lowered from %u (raise the hard limit to allow more)",
	         (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, fit,
	         cfg->max_connections);
	cfg->max_connections = fit;
	return 0;
}

/* Reads a PEM file for libmicrohttpd's TLS, which takes them in memory. */
static int load_pem(const char *path, const char *setting, char **out)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		log_error("config", "%s: cannot open \"%s\": %s", setting, path, strerror(errno));
		return -1;
	}
	char *buf = calloc(1, 1 << 20);
	size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	if (!buf || n == 0 || !strstr(buf, "-----BEGIN ")) {
		log_error("config", "%s: \"%s\" is not a PEM file", setting, path);
		free(buf);
		return -1;
	}
	*out = buf;
	return 0;
}

/* An expiry or start date for a log line: "2026-11-30 07:08 UTC". */
static void asn1_day(const ASN1_TIME *t, char *out, size_t n)
{
	struct tm tm;
	if (!ASN1_TIME_to_tm(t, &tm) || !strftime(out, n, "%Y-%m-%d %H:%M UTC", &tm))
		snprintf(out, n, "(unreadable)");
}

/* Whether the PEM texts are a certificate and the unencrypted private key
 * that goes with it, as libmicrohttpd will need them (it says only that
 * it cannot listen). A certificate out of its dates is a warning: clients
 * that verify it refuse every connection. */
static int tls_pair_check(const char *cert_pem, const char *key_pem, const struct cfg *cfg)
{
	BIO *cb = BIO_new_mem_buf(cert_pem, -1), *kb = BIO_new_mem_buf(key_pem, -1);
	X509 *cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
	/* A key with a passphrase is refused: nothing here could ask for it. */
	static char no_passphrase[] = "";
	EVP_PKEY *key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, no_passphrase) : NULL;
	int rc = -1;
	if (!cert)
		log_error("config", "LARDER_TLS_CERT: \"%s\" holds no certificate", cfg->tls_cert);
	else if (!key)
		log_error("config", "LARDER_TLS_KEY: \"%s\" holds no private key larder can use "
		          "(a key with a passphrase is not supported)", cfg->tls_key);
	else if (X509_check_private_key(cert, key) != 1)
		log_error("config", "LARDER_TLS_KEY: \"%s\" is not the key of the certificate in "
		          "LARDER_TLS_CERT (\"%s\")", cfg->tls_key, cfg->tls_cert);
	else
		rc = 0;
	char day[40];
	if (cert && X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
		asn1_day(X509_get0_notAfter(cert), day, sizeof day);
		log_warn("config", "LARDER_TLS_CERT: the certificate in \"%s\" expired on %s: clients "
		         "that verify it will refuse to connect", cfg->tls_cert, day);
	} else if (cert && X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
		asn1_day(X509_get0_notBefore(cert), day, sizeof day);
		log_warn("config", "LARDER_TLS_CERT: the certificate in \"%s\" is not valid before "
		         "%s: clients that verify it will refuse to connect", cfg->tls_cert, day);
	}
	ERR_clear_error();
	EVP_PKEY_free(key);
	X509_free(cert);
	BIO_free(kb);
	BIO_free(cb);
	return rc;
}

/* The first thing libmicrohttpd says while it tries a TLS pair. */
__attribute__((format(printf, 2, 0)))
static void tls_trial_log(void *cls, const char *fmt, va_list ap)
{
	char *why = cls;
	if (!*why)
		vsnprintf(why, TLS_TRIAL_WHY, fmt, ap);
}

static enum MHD_Result tls_trial_access(void *cls, struct MHD_Connection *c, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls)
{
	(void)cls;
	(void)c;
	(void)url;
	(void)method;
	(void)version;
	(void)upload_data;
	(void)upload_data_size;
	(void)con_cls;
	return MHD_NO;
}

/* Whether GnuTLS, which serves the port, takes the pair with the port's
 * priorities: OpenSSL reads some that it cannot (a secp256k1 key), and
 * the start then failed to listen with GnuTLS's reason at info only. A
 * daemon with no socket tries them as the workers will. */
static int tls_trial(const char *cert_pem, const char *key_pem, const struct cfg *cfg)
{
	char why[TLS_TRIAL_WHY] = "";
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_TLS | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		tls_trial_access, NULL, MHD_OPTION_EXTERNAL_LOGGER, tls_trial_log, why,
		MHD_OPTION_HTTPS_MEM_CERT, cert_pem, MHD_OPTION_HTTPS_MEM_KEY, key_pem,
		MHD_OPTION_HTTPS_PRIORITIES, TLS_PRIORITIES, MHD_OPTION_END);
	if (d) {
		MHD_stop_daemon(d);
		return 0;
	}
	why[strcspn(why, "\n")] = '\0';
	log_error("config", "LARDER_TLS_CERT, LARDER_TLS_KEY: GnuTLS, which serves the port, cannot "
	          "use \"%s\" with \"%s\": %s", cfg->tls_cert, cfg->tls_key,
	          *why ? why : "no reason given");
	return -1;
}

/* Reads LARDER_TLS_CERT and LARDER_TLS_KEY into *cert and *key (free
 * them; the key is wiped first) and checks them as a pair. */
static int load_tls(const struct cfg *cfg, char **cert, char **key)
{
	*cert = *key = NULL;
	if (load_pem(cfg->tls_cert, "LARDER_TLS_CERT", cert) != 0 ||
	    load_pem(cfg->tls_key, "LARDER_TLS_KEY", key) != 0)
		return -1;
	if (tls_pair_check(*cert, *key, cfg) != 0)
		return -1;
	return tls_trial(*cert, *key, cfg);
}

static void free_tls(char *cert, char *key)
{
	if (key)
		explicit_bzero(key, strlen(key));
	free(key);
	free(cert);
}

/* Whether a CA file (path NULL: none set) holds a certificate: curl takes
 * one that holds none, and every TLS exchange through it then fails. */
static int ca_file_check(const char *path, const char *setting)
{
	if (!path)
		return 0;
	BIO *b = BIO_new_file(path, "r");
	X509 *cert = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
	ERR_clear_error();
	BIO_free(b);
	if (cert) {
		X509_free(cert);
		return 0;
	}
	log_error("config", "%s: \"%s\" holds no certificate (PEM)", setting, path);
	return -1;
}

/* An https upstream (AWS S3 when unset) whose certificate is not checked:
 * whoever is on the path can read and change every object larder caches
 * and serves, so say so at every start rather than only in the file. */
static void upstream_verify_warn(const struct cfg *cfg)
{
	const char *url = cfg->upstream_url;
	if (cfg->upstream_tls_verify || (url && strncasecmp(url, "https://", 8) != 0))
		return;
	log_warn("config", "LARDER_UPSTREAM_TLS_VERIFY=false: the upstream's certificate is not "
	         "verified: anyone on the path to it can read and alter what larder serves%s",
	         cfg->upstream_ca_file ? " (LARDER_UPSTREAM_CA_FILE is not used)" : "");
}

/* The TLS files a start needs: a certificate and key that go together, and
 * CA files with a certificate in them. */
static int tls_files_check(const struct cfg *cfg, char **cert, char **key)
{
	upstream_verify_warn(cfg);
	int rc = cfg->tls_cert ? load_tls(cfg, cert, key) : 0;
	if (ca_file_check(cfg->upstream_ca_file, "LARDER_UPSTREAM_CA_FILE") != 0)
		rc = -1;
	if (cfg->redis_url && ca_file_check(cfg->cluster_ca_file, "LARDER_CLUSTER_CA_FILE") != 0)
		rc = -1;
	return rc;
}

/* Another node's purge (CLUSTER_PURGE): "k" or "p", "BUCKET/WHAT". */
static void purge_heard(struct gw *gw, const char *msg)
{
	struct purge_msg p;
	if (!purge_msg_parse(msg, &p)) {
		log_warn("cluster", "a purge message \"%.80s\" is not \"k|p BUCKET/WHAT\": ignored",
		         msg ? msg : "");
		return;
	}
	uint64_t n = 0;
	cache_purge(gw, p.bucket, p.what, p.key, true, &n);
	log_info("cluster", "purge of %s \"%s\" in bucket %s, from another node: %" PRIu64
	         " objects", p.key ? "key" : "prefix", p.what, p.bucket, n);
}

/* Another node wrote or saw a new version: forget what we know of it. */
static void cluster_invalidated(void *arg, const char *bucket, const char *key)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	if (strcmp(bucket, CLUSTER_UNPIN) == 0) {
		pins_end(gw->pins, key); /* a peer's pin we hold no chunks for: -ENOENT */
		return;
	}
	if (strcmp(bucket, CLUSTER_PROFILE) == 0) {
		cluster_profiles_message(gw, key);
		return;
	}
	if (strcmp(bucket, CLUSTER_PURGE) == 0) {
		purge_heard(gw, key);
		return;
	}
	if (strcmp(bucket, CLUSTER_RESYNC) == 0) {
		/* Invalidations may have been missed: every object is
		 * revalidated (a conditional request, to the owner or S3)
		 * before it is served again, and every listing asked again. */
		meta_expire_all(gw->meta);
		listcache_invalidate(gw->lists, NULL, NULL);
		fetch_resynced(clock_mono_s());
		return;
	}
	listcache_invalidate(gw->lists, bucket, key);
	/* Learnt again from S3, as after a write through this node: the
	 * owner may not have heard this yet, and would answer with what the
	 * write replaced. */
	fetch_written(bucket, key ? key : "", clock_mono_s());
	if (key && *key)
		meta_drop(gw->meta, bucket, key);
	else
		meta_drop_bucket(gw->meta, bucket);
	/* Durable too, like a write through this node, but not waited for:
	 * the writer's answer waits (a bounded while) for this node's
	 * acknowledgement, sent when this returns, and a disk slow to sync
	 * must not hold that, nor the messages after this one, while the
	 * memory serves the old version. A crash before the tombstone lands
	 * brings nothing back: a node restarting in a cluster revalidates
	 * what its disk kept (open_cache). */
	store_invalidate_queued(gw->store, bucket, key ? key : "", !(key && *key));
}

/* One of our pins ended early: the owners holding chunks for it, under
 * its NODE/JOB name, let them go too. */
static void pin_ended(void *arg, const char *id)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	char name[PIN_ID_MAX];
	snprintf(name, sizeof name, "%.120s/%s", gw->cfg->node_id ? gw->cfg->node_id : "", id);
	cluster_publish_invalidate(gw->cluster, CLUSTER_UNPIN, name);
}

/* A chunk-0 entry found on NVMe at start: its object's metadata again. */
static void recover_meta(void *arg, const struct chunk_origin *o)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	struct obj_meta *m = o->meta ? meta_decode(o->meta, o->meta_len, clock_mono_s()) : NULL;
	if (m && strcmp(m->etag, o->etag) == 0)
		meta_publish(gw->meta, o->bucket, o->key, m);
	meta_unref(m);
	/* Tracked again, by its object's key like a fetched chunk 0 (the
	 * other chunks: track_recovered). */
	if (gw->dir) {
		struct chunk_id id;
		chunk_id_make(o->bucket, o->key, o->etag, 0, &id);
		dir_recovered(gw->dir, chunk_id_hash(&id), fetch_object_key(o->bucket, o->key),
		              !o->copy);
	}
}

/* A chunk found on NVMe at start: the placement directory tracks it again,
 * so that the entries this node listed stay while it holds the chunks. */
static void track_recovered(void *arg, const struct chunk_id *id, bool chunk0, bool copy)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	if (!chunk0) /* chunk 0 goes by its object's key: recover_meta */
		dir_recovered(gw->dir, chunk_id_hash(id), 0, !copy);
}

/* The store's tiers changed for a chunk: the directory looks again. */
static void chunk_changed(void *arg, const struct chunk_id *id)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	dir_changed(gw->dir, id);
}

static bool chunk_held(void *arg, const struct chunk_id *id)
{
	struct gw *gw = arg;
	assert(gw->magic == GW_MAGIC);
	return store_holds(gw->store, id);
}

static int open_cache(struct gw *gw, const struct cfg *cfg, char *err, size_t errlen)
{
	if (cfg->redis_url) {
		struct dir_config dc = {
			.ttl_ms = cfg->directory_ttl_s * 1000u,
			.holds = chunk_held,
			.holds_arg = gw,
		};
		if (!(gw->dir = dir_create(&dc))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	struct store_config sc = {
		.changed = gw->dir ? chunk_changed : NULL,
		.changed_arg = gw,
		.ram_bytes = cfg->ram_cache_bytes,
		.disk_bytes = cfg->cache_dir ? cfg->disk_cache_bytes : 0,
		.dir = cfg->cache_dir,
		.chunk_bytes = cfg->chunk_bytes,
		.policy = (enum policy_kind)policy_kind_parse(cfg->cache_policy),
		.stale_after_s = (double)cfg->cache_stale_after_s,
		.pin_bytes = cfg->pin_max_bytes,
		.pin_nvme_bytes = cfg->pin_max_nvme_bytes,
	};
	gw->meta = meta_cache_create(1u << 20);
	if (cfg->n_list_caches && cfg->list_cache_bytes)
		gw->lists = listcache_create(cfg->list_cache_bytes);
	if (!gw->meta || (cfg->n_list_caches && cfg->list_cache_bytes && !gw->lists)) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	char serr[256];
	gw->store = store_open(&sc, recover_meta, gw, serr, sizeof serr);
	if (!gw->store) {
		snprintf(err, errlen, "LARDER_CACHE_DIR: %s", serr);
		return -1;
	}
	/* In a cluster, other nodes' writes while this one was down were
	 * published to nobody: what the disk kept is revalidated before it is
	 * served (as again when the subscription starts: CLUSTER_RESYNC). So
	 * it is when the disk lost some of its own invalidations. */
	if (cfg->redis_url || store_doubtful(gw->store))
		meta_expire_all(gw->meta);
	if (gw->dir)
		store_each_nvme(gw->store, track_recovered, gw);
	objects_init(&gw->objects, gw->store, gw->meta, cfg->chunk_bytes, cfg->metadata_ttl_s,
	             cfg->negative_ttl_s);
	limits_resident_apply(gw->store, cfg->keys, cfg->n_keys);
	struct store_stats st;
	store_get_stats(gw->store, &st);
	log_info("store", "RAM tier %zu MiB; %s; chunk %zu KiB; policy %s; %" PRIu64
	         " chunks recovered from NVMe", cfg->ram_cache_bytes >> 20,
	         !cfg->cache_dir ? "no NVMe tier (LARDER_CACHE_DIR unset)"
	         : !cfg->disk_cache_bytes ? "no NVMe tier (LARDER_DISK_CACHE_SIZE=0)"
	                                  : "NVMe tier in LARDER_CACHE_DIR",
	         cfg->chunk_bytes >> 10, cfg->cache_policy, st.disk_entries);
	return 0;
}

/* A certificate renewed in place (the same path, new content) on a SIGHUP:
 * the one read at start is still served, so say so, or the operator takes
 * the reload for one of it (a changed path is reported with the settings). */
static void tls_renewal_warn(const struct gw *gw, const struct cfg *fresh)
{
	const char *path = gw->cfg->tls_cert;
	char *cert = NULL;
	if (!gw->tls_cert || !fresh->tls_cert || strcmp(fresh->tls_cert, path) != 0 ||
	    load_pem(path, "LARDER_TLS_CERT", &cert) != 0)
		return;
	if (strcmp(cert, gw->tls_cert) != 0)
		log_warn("config", "reload: the certificate in LARDER_TLS_CERT (\"%s\") changed: the "
		         "one read at start is served until a restart", path);
	free(cert);
}

void gw_warn_no_keys(const struct cfg *cfg)
{
	if (cfg->n_keys == 0 && cfg->anonymous.n_grants == 0)
		log_warn("config", "no client keys configured (LARDER_CLIENT_KEY/LARDER_CLIENT_SECRET "
		         "or [key] sections): every request will be refused");
}

/* SIGHUP: new keys and policies from the same file and environment. */
static void reload_keys(struct gw *gw, struct cfg **owned)
{
	char err[512];
	int e = log_access_reopen(); /* logrotate renames it, then sends SIGHUP */
	if (e)
		log_error("config", "reload: reopening the access log \"%s\" failed, writing on to "
		          "the open one: %s", gw->cfg->access_log, strerror(-e));
	struct cfg *fresh = cfg_load(gw->config_path, err, sizeof err);
	if (!fresh) {
		log_error("config", "reload failed, keeping the current keys: %s", err);
		return;
	}
	pthread_rwlock_wrlock(&gw->keys_lock);
	struct cfg *old = gw->keys;
	gw->keys = fresh;
	pthread_rwlock_unlock(&gw->keys_lock);
	limits_resident_apply(gw->store, fresh->keys, fresh->n_keys);
	if (old == *owned)
		cfg_free(old);
	*owned = fresh;
	log_info("config", "reloaded: %zu client keys%s", fresh->n_keys,
	         fresh->anonymous.n_grants ? ", anonymous access on" : "");
	gw_warn_no_keys(fresh);
	/* Only keys and grants are swapped: say what else changed, or the
	 * operator takes it for applied. */
	struct cfg running = *gw->cfg; /* a shallow copy, only compared */
	running.max_connections = gw->max_connections_set;
	char what[160];
	for (size_t at = 0; cfg_restart_change(&running, fresh, &at, what, sizeof what);)
		log_warn("config", "reload: %s changed: not applied until a restart", what);
	tls_renewal_warn(gw, fresh);
}

/* This node's cluster settings (redis_url NULL: no cluster). */
static struct cluster_config cluster_config_of(const struct cfg *cfg, struct directory *dir)
{
	return (struct cluster_config){
		.redis_url = cfg->redis_url,
		.node_id = cfg->node_id,
		.secret = cfg->cluster_secret,
		.advertise = cfg->advertise,
		.capacity = (double)cfg->ram_cache_bytes +
		            (cfg->cache_dir ? (double)cfg->disk_cache_bytes : 0.0),
		.dir = dir,
	};
}

/* 0 when an access log at path could be opened for appending (checked
 * without creating it), else why not (an errno). */
static int access_log_check(const char *path)
{
	if (!path || strcmp(path, "-") == 0 || strcmp(path, "off") == 0)
		return 0;
	int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno != ENOENT)
		return errno;
	char *dir = strdup(path);
	if (!dir)
		return ENOMEM;
	char *slash = strrchr(dir, '/');
	const char *d = !slash ? "." : slash == dir ? "/" : (*slash = '\0', dir);
	int e = access(d, W_OK | X_OK) == 0 ? 0 : errno;
	free(dir);
	return e;
}

int gw_check(const struct cfg *cfg)
{
	char *cert = NULL, *key = NULL, err[512];
	int rc = 0;
	if (tls_files_check(cfg, &cert, &key) != 0)
		rc = -1;
	free_tls(cert, key);
	struct cluster_config cc = cluster_config_of(cfg, NULL);
	if (cluster_check(&cc, err, sizeof err) != 0) {
		log_error("config", "LARDER_REDIS_URL: %s", err);
		rc = -1;
	}
	if (creds_check(NULL, cfg->upstream_region, err, sizeof err) != 0) {
		log_error("creds", "no upstream credentials: %s", err);
		rc = -1;
	}
	int e = access_log_check(cfg->access_log);
	if (e) {
		log_error("config", "LARDER_ACCESS_LOG: cannot open \"%s\" for writing: %s",
		          cfg->access_log, strerror(e));
		rc = -1;
	}
	return rc;
}

void gw_block_signals(sigset_t *set)
{
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if (set)
		*set = sigs;
}

/* The process's life in three phases, each in the order of its steps:
 * gw_start (each start_* below, in turn), wait_for_signal, gw_stop; then
 * gw_free releases what was opened, whichever step the start got to. A
 * start step returns 0, or the exit code (1; 2: the configuration is wrong)
 * after logging why, having released what it alone opened. */

static void gw_stop(struct gw *gw, unsigned running);

/* Start 1: the upstream credentials (the larder-creds thread), the
 * upstream's description and the shaper. */
static int start_upstream(struct gw *gw)
{
	const struct cfg *cfg = gw->cfg;
	char err[512];
	/* A source set up wrong (a key id without its secret, a missing token
	 * file) is a configuration error, as --check says; a source that
	 * does not answer is not. */
	if (creds_check(NULL, cfg->upstream_region, err, sizeof err) != 0) {
		log_error("creds", "no upstream credentials: %s", err);
		return 2;
	}
	gw->creds = creds_provider_create(NULL, cfg->upstream_region, cfg->creds_refresh_margin_s,
	                                  err, sizeof err);
	if (!gw->creds) {
		log_error("creds", "no upstream credentials: %s", err);
		return 1;
	}
	log_info("creds", "upstream credentials from %s", creds_provider_source(gw->creds));
	gw->up = upstream_create(cfg, gw->creds, err, sizeof err);
	if (!gw->up) {
		log_error("config", "%s", err);
		return 1;
	}
	struct shaper_settings shs = { cfg->upstream_window_max, cfg->upstream_window_min,
		                       cfg->upstream_slot_wait_ms / 1000.0 };
	gw->shaper = shaper_create(&shs, err, sizeof err);
	if (!gw->shaper) {
		log_error("config", "%s", err);
		return 1;
	}
	return 0;
}

/* Start 2: the TLS files, then both ports checked free and the open-file
 * limit fitted (to cfg, gw's own), binding nothing yet. Sets *ai to the
 * listener's address (the caller frees it). */
static int check_listeners(struct gw *gw, struct cfg *cfg, struct addrinfo **ai)
{
	if (tls_files_check(cfg, &gw->tls_cert, &gw->tls_key) != 0)
		return 2;
	*ai = gw_resolve("LARDER_LISTEN", cfg->listen_host, cfg->listen_port);
	if (!*ai)
		return 1;
	gw->n_workers = cfg->workers ? cfg->workers : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (gw->n_workers == 0)
		gw->n_workers = 1;
	gw->max_connections_set = cfg->max_connections;
	int held = port_unheld(*ai);
	if (held != 0 || fit_open_files(cfg) != 0) {
		if (held == -EADDRINUSE)
			log_error("server", "cannot listen on %s:%u: the port is already in use by another "
			          "process (larder does not share its port); stop it or pick another "
			          "LARDER_LISTEN", cfg->listen_host, cfg->listen_port);
		else if (held)
			log_error("server", "cannot listen on %s:%u: %s", cfg->listen_host,
			          cfg->listen_port, strerror(-held));
		return 1;
	}
	return admin_port_unheld(cfg) != 0 ? 1 : 0;
}

/* Start 3, only once the ports are ours (a node refused its port never
 * touches these): the cache (open_cache), then pins (their saver thread)
 * and profiles, before the cluster, whose subscriber may end pins (they
 * are freed after it). */
static int open_state(struct gw *gw)
{
	const struct cfg *cfg = gw->cfg;
	char err[512];
	if (open_cache(gw, cfg, err, sizeof err) != 0) {
		log_error("config", "%s", err);
		return 2;
	}
	gw->pins = pins_create(gw->store, cfg->cache_dir, err, sizeof err);
	if (!gw->pins) {
		log_error("server", "pins: %s; they are kept in memory only", err);
		gw->pins = pins_create(gw->store, NULL, err, sizeof err);
	}
	gw->profiles = profiles_open(cfg->cache_dir, err, sizeof err);
	if (!gw->profiles) {
		log_error("server", "access profiles: %s; they are kept in memory only", err);
		gw->profiles = profiles_open(NULL, err, sizeof err);
	}
	return 0;
}

/* Start 4: the cluster (its two threads), when LARDER_REDIS_URL names one. */
static int join_cluster(struct gw *gw)
{
	const struct cfg *cfg = gw->cfg;
	char err[512];
	if (!cfg->redis_url)
		return 0;
	struct cluster_config cc = cluster_config_of(cfg, gw->dir);
	gw->cluster = cluster_start(&cc, cluster_invalidated, gw, err, sizeof err);
	if (!gw->cluster) {
		log_error("config", "LARDER_REDIS_URL: %s", err);
		return 2;
	}
	return 0;
}

/* Start 5: each worker's loop and daemon, listening on ai; no thread runs
 * them yet. */
static int start_daemons(struct gw *gw, const struct addrinfo *ai)
{
	const struct cfg *cfg = gw->cfg;
	gw->workers = calloc(gw->n_workers, sizeof *gw->workers);
	unsigned started = 0;
	for (; gw->workers && started < gw->n_workers; started++)
		if (worker_start(gw, &gw->workers[started], started, ai) != 0)
			break;
	if (gw->workers && started == gw->n_workers)
		return 0;
	if (gw->tls_cert) /* libmicrohttpd's reason is in the log above (info) */
		log_error("server", "cannot listen on %s:%u with TLS (LARDER_TLS_CERT, "
		          "LARDER_TLS_KEY)", cfg->listen_host, cfg->listen_port);
	else
		log_error("server", "cannot listen on %s:%u: %s", cfg->listen_host,
		          cfg->listen_port, strerror(errno));
	for (unsigned i = 0; gw->workers && i <= started && i < gw->n_workers; i++)
		worker_fini(&gw->workers[i]);
	return 1;
}

/* Start 6: warm jobs and lookaheads (on the first worker), the pins' and
 * profiles' cluster messages, and the admin listener. */
static int start_jobs_and_admin(struct gw *gw)
{
	if (gw->cluster) {
		pins_on_end(gw->pins, pin_ended, gw);
		profiles_on_relay(gw->profiles, cluster_profiles_relay, gw);
	}
	gw->prefetch = prefetch_create(gw, &gw->workers[0]);
	gw->lookahead = lookahead_create(gw, &gw->workers[0], gw->prefetch,
	                                 gw->cfg->lookahead_idle_s);
	if (admin_start(gw) != 0) {
		/* An operator who asked for the admin port expects it: say so and stop. */
		for (unsigned i = 0; i < gw->n_workers; i++)
			worker_fini(&gw->workers[i]);
		lookahead_destroy(gw->lookahead);
		gw->lookahead = NULL;
		prefetch_destroy(gw->prefetch);
		gw->prefetch = NULL;
		return 1;
	}
	return 0;
}

/* Start 7, last: the worker threads, which serve from now on. One the
 * system refuses (a thread limit, memory) would leave its listener to hold
 * a share of the connections with nobody to answer: the start stops, and
 * the workers already running drain and are joined (gw_stop). */
static int start_threads(struct gw *gw)
{
	const struct cfg *cfg = gw->cfg;
	for (unsigned i = 0; i < gw->n_workers; i++) {
		int e = pthread_create(&gw->workers[i].thread, NULL, worker_main, &gw->workers[i]);
		if (e) {
			log_error("server", "worker %u of %u: its thread could not be started: %s; "
			          "stopping", i, gw->n_workers, strerror(e));
			gw_stop(gw, i);
			return 1;
		}
	}
	log_info("server", "listening on %s://%s:%u with %u workers; upstream %s",
	         gw->tls_cert ? "https" : "http", cfg->listen_host, cfg->listen_port, gw->n_workers,
	         cfg->upstream_url ? cfg->upstream_url : "AWS S3");
	return 0;
}

/* Phase 1, the start: 0 when larder serves, else the exit code. */
static int gw_start(struct gw *gw, struct cfg *cfg)
{
	int rc = start_upstream(gw);
	if (rc)
		return rc;
	struct addrinfo *ai = NULL;
	rc = check_listeners(gw, cfg, &ai);
	if (!rc)
		rc = open_state(gw);
	if (!rc)
		rc = join_cluster(gw);
	if (!rc)
		rc = start_daemons(gw, ai);
	if (ai)
		freeaddrinfo(ai);
	if (!rc)
		rc = start_jobs_and_admin(gw);
	if (!rc)
		rc = start_threads(gw);
	return rc;
}

/* Phase 2: the main thread waits in sigwait. SIGHUP reloads the keys (and
 * reopens the access log); SIGTERM or SIGINT ends the wait. */
static void wait_for_signal(struct gw *gw, const sigset_t *sigs, struct cfg **owned_keys)
{
	for (;;) {
		int sig = 0;
		if (sigwait(sigs, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			reload_keys(gw, owned_keys);
			continue;
		}
		log_info("server", "%s: draining for up to %u s", sig == SIGTERM ? "SIGTERM" : "SIGINT",
		         gw->cfg->shutdown_grace_s);
		return;
	}
}

/* Phase 3, the stop: the node leaves the cluster, the workers drain and
 * are joined (the first running of them: those whose threads started),
 * then what their requests used goes, the admin listener first. */
static void gw_stop(struct gw *gw, unsigned running)
{
	atomic_store(&gw->draining, true);
	/* Leave the cluster first: peers stop sending chunk requests here.
	 * The workers still use gw->cluster (now just this node) as they drain. */
	cluster_leave(gw->cluster);
	for (unsigned i = 0; i < running; i++)
		ev_async_send(gw->workers[i].loop, &gw->workers[i].stop_async);
	for (unsigned i = 0; i < running; i++)
		pthread_join(gw->workers[i].thread, NULL);
	/* The admin listener lasts the drain: /readyz answers 503 (draining),
	 * /healthz and /metrics go on. Stopped before what its routes use, once
	 * a route waiting on S3 has given up (it would hold the exit for up to
	 * LARDER_UPSTREAM_TIMEOUT). */
	atomic_store(&gw->stopping, true);
	admin_stop(gw);
	lookahead_destroy(gw->lookahead);
	gw->lookahead = NULL;
	pins_shutdown(gw->pins); /* before the warm jobs are cancelled: their pins stay saved */
	prefetch_destroy(gw->prefetch); /* its chunks go before the workers' fetches */
	gw->prefetch = NULL;
	for (unsigned i = 0; i < gw->n_workers; i++)
		worker_fini(&gw->workers[i]);
}

/* Last, after a stop or a failed start: the cluster, the store, the
 * directory and the rest, in the reverse order of what uses what. */
static void gw_free(struct gw *gw, struct cfg *owned_keys)
{
	free(gw->workers);
	if (gw->cluster)
		cluster_stop(gw->cluster);
	pins_destroy(gw->pins);
	profiles_close(gw->profiles);
	if (gw->store)
		store_close(gw->store);
	dir_destroy(gw->dir); /* the store notes changes until it is closed */
	free_tls(gw->tls_cert, gw->tls_key);
	meta_cache_destroy(gw->meta);
	listcache_destroy(gw->lists);
	upstream_destroy(gw->up);
	shaper_destroy(gw->shaper);
	if (gw->creds)
		creds_provider_destroy(gw->creds);
	if (owned_keys)
		cfg_free(owned_keys);
	pthread_rwlock_destroy(&gw->keys_lock);
	gw->magic = 0;
}

int gw_run(struct cfg *cfg, const char *config_path)
{
	struct gw gw = { .magic = GW_MAGIC, .cfg = cfg, .keys = cfg, .config_path = config_path };
	struct cfg *owned_keys = NULL;
	pthread_rwlock_init(&gw.keys_lock, NULL);

	/* Signals go to the main thread only (sigwait). serve() blocked them
	 * already, before the access log's flusher thread started. */
	sigset_t sigs;
	gw_block_signals(&sigs);
	signal(SIGPIPE, SIG_IGN);

	int rc = gw_start(&gw, cfg);
	if (rc == 0) {
		wait_for_signal(&gw, &sigs, &owned_keys);
		gw_stop(&gw, gw.n_workers);
		log_info("server", "stopped");
	}
	gw_free(&gw, owned_keys);
	return rc;
}
