/*
 * floor.c - the least a server can do to answer larder's warm-hit benchmark.
 *
 * Answers every HTTP/1.1 request on a keep-alive connection with the same
 * 200 and a body of --size bytes, without parsing or checking anything but
 * the blank line that ends a request. What it costs per GB is the floor of
 * any server on this machine: the kernel's receive, its copy or page
 * references into the socket, and the TCP stack's work for both ends of a
 * loopback connection (the receiver's softirq runs on the sender's CPU).
 * docs/benchmarks.md "The floor of a warm hit" compares it with larder and
 * with nginx.
 *
 *   floor --listen PORT --size BYTES [--objects N] [--workers N]
 *         [--sendfile FILE | --zerocopy | --uring]
 *
 * Modes: the body from memory with one sendmsg (header + body, as larder's
 * hits), or with --sendfile from FILE (header with MSG_MORE, then sendfile;
 * FILE on tmpfs is what the nginx peer serves hits from), or --zerocopy
 * (the same sendmsg with MSG_ZEROCOPY, its completions read back from the
 * socket's error queue), or --uring (recv and sendmsg as io_uring requests,
 * one io_uring_enter for every batch of completions, no epoll; only when
 * built with liburing). Issue 15 asked whether these make hits cheaper:
 * docs/benchmarks.md "The floor of a warm hit". --workers forks N
 * processes sharing the listening socket, each single-threaded.
 * --objects N answers from N bodies in turn (N x BYTES of memory, or of FILE),
 * so that the bytes sent come from memory as a cache's do, not from a
 * buffer that stays in the CPU's caches.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef FLOOR_URING
#include <liburing.h>
#endif

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define MAX_EVENTS 64
#define INBUF 8192

struct conn {
	int fd;
	int pending;     /* requests read, not yet answered */
	size_t sent;     /* of the answer being sent: header then body */
	size_t object;   /* which body it is */
	size_t tail;     /* bytes of inbuf kept: a request's start */
	char inbuf[INBUF];
	/* --uring: the send in flight (its iovec and msghdr live until it
	 * completes) and whether the connection is gone */
	bool sending, dead;
	struct iovec iov[2];
	struct msghdr msg;
};

static char *body;
static size_t body_len;
static size_t objects = 1, next_object;
static int body_fd = -1;
static char header[160];
static size_t header_len;
static int send_flags = MSG_NOSIGNAL; /* | MSG_ZEROCOPY with --zerocopy */

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Count the requests in what was read; keep the start of an unfinished one. */
static void take_requests(struct conn *c, size_t len)
{
	char *p = c->inbuf, *end = c->inbuf + len, *e;
	while ((e = memmem(p, (size_t)(end - p), "\r\n\r\n", 4)) != NULL) {
		c->pending++;
		p = e + 4;
	}
	c->tail = (size_t)(end - p);
	if (c->tail == INBUF)
		c->tail = 0; /* a header this long is not a benchmark's: drop it */
	memmove(c->inbuf, p, c->tail);
}

/* The rest of c's answer from memory as c->msg over c->iov. */
static void answer_msg(struct conn *c)
{
	if (c->sent == 0)
		c->object = next_object++ % objects;
	size_t at = c->object * body_len;
	int cnt = 0;
	if (c->sent < header_len)
		c->iov[cnt++] = (struct iovec){ header + c->sent, header_len - c->sent };
	size_t boff = c->sent > header_len ? c->sent - header_len : 0;
	c->iov[cnt++] = (struct iovec){ body + at + boff, body_len - boff };
	c->msg = (struct msghdr){ .msg_iov = c->iov, .msg_iovlen = (size_t)cnt };
}

/* Counts n more bytes of c's answer sent. */
static void answer_sent(struct conn *c, size_t n)
{
	c->sent += n;
	if (c->sent == header_len + body_len) {
		c->sent = 0;
		c->pending--;
	}
}

/* --zerocopy: reads the completions the kernel queued; their buffers (the
 * bodies) never change, so there is nothing to do but take them off. */
static void drain_errqueue(int fd)
{
	char control[128];
	for (;;) {
		struct msghdr m = { .msg_control = control, .msg_controllen = sizeof control };
		if (recvmsg(fd, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
	}
}

/* Send what is due; false when the connection is gone. */
static bool answer(struct conn *c)
{
	while (c->pending > 0) {
		ssize_t n;
		if (body_fd < 0) {
			answer_msg(c);
			n = sendmsg(c->fd, &c->msg, send_flags);
			if (n < 0 && errno == ENOBUFS) { /* completions not yet read */
				drain_errqueue(c->fd);
				n = sendmsg(c->fd, &c->msg, send_flags);
			}
		} else if (c->sent < header_len) {
			if (c->sent == 0)
				c->object = next_object++ % objects;
			n = send(c->fd, header + c->sent, header_len - c->sent, MSG_NOSIGNAL | MSG_MORE);
		} else {
			size_t boff = c->sent - header_len;
			off_t off = (off_t)(c->object * body_len + boff);
			n = sendfile(c->fd, body_fd, &off, body_len - boff);
		}
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		answer_sent(c, (size_t)n);
	}
	return true;
}

static void serve(int lfd)
{
	int ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[MAX_EVENTS];
	for (;;) {
		int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
		for (int i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;
			if (c == NULL) {
				int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (fd < 0)
					continue;
				int one = 1;
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				if ((send_flags & MSG_ZEROCOPY) &&
				    setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) < 0)
					die("setsockopt(SO_ZEROCOPY)");
				c = calloc(1, sizeof *c);
				if (c == NULL)
					die("calloc");
				c->fd = fd;
				ev = (struct epoll_event){ .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c };
				if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
					die("epoll_ctl");
				continue;
			}
			bool alive = true;
			if (evs[i].events & EPOLLERR)
				drain_errqueue(c->fd);
			if (evs[i].events & EPOLLIN) {
				for (;;) {
					size_t room = INBUF - c->tail;
					ssize_t r = recv(c->fd, c->inbuf + c->tail, room, 0);
					if (r > 0) {
						take_requests(c, c->tail + (size_t)r);
						if ((size_t)r < room)
							break; /* drained: edge-triggered */
						continue;
					}
					alive = r < 0 && (errno == EAGAIN || errno == EINTR);
					break;
				}
			}
			if (alive)
				alive = answer(c);
			if (!alive) {
				close(c->fd);
				free(c);
			}
		}
	}
}

#ifdef FLOOR_URING
/* --uring: each connection has a recv in flight, and a sendmsg while an
 * answer is due; user_data is the connection with the low bit set for a
 * send (NULL: the listening socket's accept). */
#define URING_DEPTH 512
#define SEND_BIT ((uintptr_t)1)

/* A free submission entry, submitting what is queued when there is none. */
static struct io_uring_sqe *uring_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (sqe == NULL) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static void uring_recv(struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = uring_sqe(ring);
	io_uring_prep_recv(sqe, c->fd, c->inbuf + c->tail, INBUF - c->tail, 0);
	io_uring_sqe_set_data(sqe, c);
}

static void uring_send(struct io_uring *ring, struct conn *c)
{
	if (c->sending || c->pending == 0)
		return;
	struct io_uring_sqe *sqe = uring_sqe(ring);
	answer_msg(c);
	io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, (void *)((uintptr_t)c | SEND_BIT));
	c->sending = true;
}

static void uring_accept(struct io_uring *ring, int lfd)
{
	struct io_uring_sqe *sqe = uring_sqe(ring);
	io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data(sqe, NULL);
}

/* A connection's recv or send ended in error or EOF: closed once nothing
 * of it is in flight. */
static void uring_gone(struct conn *c)
{
	c->dead = true;
	if (!c->sending && c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
	}
}

static void serve_uring(int lfd)
{
	struct io_uring ring;
	int r = io_uring_queue_init(URING_DEPTH, &ring, 0);
	if (r < 0) {
		errno = -r;
		die("io_uring_queue_init");
	}
	uring_accept(&ring, lfd);
	for (;;) {
		r = io_uring_submit_and_wait(&ring, 1);
		if (r < 0 && r != -EINTR) {
			errno = -r;
			die("io_uring_submit_and_wait");
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			seen++;
			uintptr_t ud = (uintptr_t)io_uring_cqe_get_data(cqe);
			struct conn *c = (struct conn *)(ud & ~SEND_BIT);
			if (c == NULL) {
				if (!(cqe->flags & IORING_CQE_F_MORE))
					uring_accept(&ring, lfd); /* the multishot accept ended */
				if (cqe->res < 0)
					continue;
				int one = 1;
				setsockopt(cqe->res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				c = calloc(1, sizeof *c);
				if (c == NULL)
					die("calloc");
				c->fd = cqe->res;
				uring_recv(&ring, c);
			} else if (ud & SEND_BIT) {
				c->sending = false;
				if (cqe->res <= 0 || c->dead) {
					uring_gone(c);
				} else {
					answer_sent(c, (size_t)cqe->res);
					uring_send(&ring, c);
				}
			} else if (cqe->res <= 0 || c->dead) {
				uring_gone(c);
			} else {
				take_requests(c, c->tail + (size_t)cqe->res);
				uring_send(&ring, c);
				uring_recv(&ring, c);
			}
			/* A closed connection's memory is kept: a benchmark opens
			 * few, and a completion might still name it. */
		}
		io_uring_cq_advance(&ring, seen);
	}
}
#endif

/* A whole number from 1 to max, or 0 for anything else. */
static size_t number(const char *s, size_t max)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return 0;
	return (size_t)v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "size", required_argument, NULL, 's' },
		{ "sendfile", required_argument, NULL, 'f' },
		{ "workers", required_argument, NULL, 'w' },
		{ "objects", required_argument, NULL, 'n' },
		{ "zerocopy", no_argument, NULL, 'z' },
		{ "uring", no_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	size_t port = 0, workers = 1;
	bool uring = false;
	int o;
	const char *file = NULL;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'l': port = number(optarg, 65535); break;
		case 's': body_len = number(optarg, (size_t)1 << 30); break;
		case 'f': file = optarg; break;
		case 'w': workers = number(optarg, 256); break;
		case 'n': objects = number(optarg, 1000000); break;
		case 'z': send_flags |= MSG_ZEROCOPY; break;
		case 'u': uring = true; break;
		default:
			fprintf(stderr, "usage: floor --listen PORT --size BYTES [--objects N] [--workers N] "
			                "[--sendfile FILE | --zerocopy | --uring]\n");
			return 2;
		}
	}
	if ((file != NULL) + !!(send_flags & MSG_ZEROCOPY) + uring > 1) {
		fprintf(stderr, "floor: --sendfile, --zerocopy and --uring are separate modes\n");
		return 2;
	}
#ifndef FLOOR_URING
	if (uring) {
		fprintf(stderr, "floor: built without liburing: no --uring\n");
		return 2;
	}
#endif
	if (port == 0 || body_len == 0 || workers == 0 || objects == 0) {
		fprintf(stderr, "floor: --listen PORT (1-65535) and --size BYTES (up to 1 GiB) are needed; "
		                "--workers 1-256, --objects 1-1000000\n");
		return 2;
	}
	header_len = (size_t)snprintf(header, sizeof header,
	                              "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
	                              "Content-Type: application/octet-stream\r\n\r\n",
	                              body_len);
	if (file != NULL) {
		body_fd = open(file, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (body_fd < 0 || ftruncate(body_fd, (off_t)(objects * body_len)) < 0)
			die(file);
	}
	/* The bodies in memory, or one body written objects times to FILE. */
	size_t mem = body_fd >= 0 ? body_len : objects * body_len;
	body = malloc(mem);
	if (body == NULL)
		die("malloc");
	memset(body, 'x', mem);
	if (body_fd >= 0) {
		for (size_t i = 0; i < objects; i++)
			if (pwrite(body_fd, body, body_len, (off_t)(i * body_len)) != (ssize_t)body_len)
				die("pwrite");
		free(body);
		body = NULL;
	}

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
		                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 4096) < 0)
		die("listen");
	if (uring && fcntl(lfd, F_SETFL, 0) < 0) /* io_uring waits for a connection itself */
		die("fcntl");
	for (size_t w = 1; w < workers; w++) {
		pid_t p = fork();
		if (p < 0)
			die("fork");
		if (p == 0)
			break;
	}
#ifdef FLOOR_URING
	if (uring) {
		serve_uring(lfd);
		return 0;
	}
#endif
	serve(lfd);
	return 0;
}
