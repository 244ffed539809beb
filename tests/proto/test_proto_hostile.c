/* Hostile peers against the REAL daemons' control channel (the library
 * level is in test_proto_channel.c: garbage, a zero or over-limit prefix,
 * a request before Hello, a wrong kind, silence and a byte-a-second
 * slowloris against an in-process server with a 300 ms deadline; impostor
 * certificate, wrong tuple, silent server against the client).
 *
 *   test_proto_hostile procsup   a proc-supervisor with --control, attacked
 *                                by raw-frame clients: 64 connections
 *                                (silent / a slowloris / idle after Hello)
 *                                and the 65th well-behaved peer (served, in
 *                                the slot of the one silent longest), 64
 *                                idle after Hello and a 65th (served, in the
 *                                slot of the one idle longest), over-limit and
 *                                garbage frames, Hello twice, a tuple the
 *                                decoder refuses, tuples of no process, more
 *                                requests in flight than allowed, 500
 *                                connect/Hello/close cycles.
 *   test_proto_hostile netsup    a net-supervisor --identity delegated whose
 *                                proc side is a fake (this process, signing
 *                                with a `tether keygen` key) that answers
 *                                for an unknown request id, with a bad
 *                                signature, expired / future / too long-lived
 *                                contexts, another instance key, a replayed
 *                                context, an error that says "allowed", a
 *                                huge frame, or never; one CONNECT each.
 *
 * Each part asserts: no crash (the daemon is still running and serves a
 * well-behaved peer afterwards), no hang (every wait bounded), the precise
 * reason word, and the daemon's descriptor count (/proc/PID/fd) back to its
 * baseline once the hostile peers are gone. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "common/util.h"
#include "proto/conn.h"
#include "proto/endpoint.h"
#include "proto/frame.h"
#include "proto/message.h"
#include "control.pb-c.h"
#include "tests/proto/fixture.h"

static int failures;
static char dir[64];

#define CHECK(cond, ...)                                          \
	do {                                                      \
		bool ok_ = (cond);                                \
		printf("%s: ", ok_ ? "ok" : "FAIL");              \
		printf(__VA_ARGS__);                              \
		printf("\n");                                     \
		fflush(stdout);                                   \
		if (!ok_)                                         \
			failures++;                               \
	} while (0)

static uint64_t ms_now(void) { return now_mono_ns() / 1000000ull; }

static void msleep(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* ---------- processes ---------- */

static pid_t spawn(char *const argv[], const char *log)
{
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed test leaves no daemon */
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	return p;
}

/* The same, stdout and stderr on `out` (a pipe the test never reads). */
static pid_t spawn_fd(char *const argv[], int out)
{
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed test leaves no daemon */
		dup2(out, 1);
		dup2(out, 2);
		int nul = open("/dev/null", O_RDONLY);
		if (nul >= 0)
			dup2(nul, 0);
		execv(argv[0], argv);
		_exit(127);
	}
	return p;
}

static bool alive(pid_t p) { return waitpid(p, NULL, WNOHANG) == 0; }

/* SIGTERM, then SIGKILL after ms; the exit status (or -1). */
static int stop_child(pid_t p, unsigned ms)
{
	if (p <= 0)
		return -1;
	kill(p, SIGTERM);
	uint64_t end = ms_now() + ms;
	int st;
	while (ms_now() < end) {
		pid_t r = waitpid(p, &st, WNOHANG);
		if (r == p)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		msleep(20);
	}
	kill(p, SIGKILL);
	waitpid(p, &st, 0);
	return -1;
}

/* The proc-supervisor's identity workers (at most one per thread-pool
 * thread, made on demand and kept) each hold a /proc directory and
 * a netlink socket: how many exist depends on how many ran at once, not on
 * the peers. With skip_workers they are left out of the count (and
 * counted in workers_seen). */
static bool skip_workers;
static int workers_seen;

static bool netlink_inode(pid_t p, unsigned long ino)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/net/netlink", (int)p);
	FILE *f = fopen(path, "r");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f)) {
		unsigned long i;
		if (sscanf(line, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %lu", &i) == 1)
			found = i == ino;
	}
	if (f)
		fclose(f);
	return found;
}

static int fd_count(pid_t p)
{
	char path[64], link[320], target[256];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)p);
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0, w = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (skip_workers) {
			snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
			ssize_t k = readlink(link, target, sizeof(target) - 1);
			target[k > 0 ? k : 0] = 0;
			unsigned long ino;
			if (!strcmp(target, "/proc") ||
			    (sscanf(target, "socket:[%lu]", &ino) == 1 && netlink_inode(p, ino))) {
				w++;
				continue;
			}
		}
		n++;
	}
	closedir(d);
	workers_seen = w;
	return n;
}

/* What the descriptors are, for a failure report. */
static void fd_dump(pid_t p)
{
	char path[64], target[256], link[320];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)p);
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		target[n > 0 ? n : 0] = 0;
		printf("  fd %s -> %s\n", e->d_name, target);
	}
	if (d)
		closedir(d);
}

/* The count once it is `want` (within ms), else the last one seen. */
static int fd_count_settles(pid_t p, int want, unsigned ms)
{
	uint64_t end = ms_now() + ms;
	int n;
	while ((n = fd_count(p)) != want && ms_now() < end)
		msleep(20);
	return n;
}

static bool file_has(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char line[8192];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

static bool sanitizer_report(const char *log)
{
	return file_has(log, "AddressSanitizer") || file_has(log, "LeakSanitizer") ||
	       file_has(log, "runtime error:");
}

/* ---------- raw frames ---------- */

static int unix_connect(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un un = { .sun_family = AF_UNIX };
	strscpy(un.sun_path, path, sizeof(un.sun_path));
	if (connect(fd, (struct sockaddr *)&un, sizeof(un)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_msg(int fd, const struct ctl_msg *m)
{
	uint8_t *b;
	size_t n;
	if (ctl_encode(m, &b, &n) < 0)
		return false;
	bool ok = write_all(fd, b, n) == 0;
	free(b);
	return ok;
}

struct rx {
	uint8_t *buf;
	size_t len, cap;
	bool eof;
};

static void rx_free(struct rx *r) { free(r->buf); memset(r, 0, sizeof(*r)); }

/* 1: a message in *out (ctl_msg_clear it); 0: none within ms; -1: closed
 * by the peer (or an undecodable frame). */
static int recv_msg(int fd, struct rx *r, struct ctl_msg *out, int ms)
{
	uint64_t end = ms_now() + (uint64_t)ms;
	for (;;) {
		if (r->len >= 4) {
			uint32_t pl = (uint32_t)r->buf[0] << 24 | (uint32_t)r->buf[1] << 16 |
				      (uint32_t)r->buf[2] << 8 | r->buf[3];
			if (pl == 0 || pl > PROTO_MAX_FRAME)
				return -1;
			if (r->len >= 4 + (size_t)pl) {
				int d = ctl_decode(r->buf + 4, pl, out);
				memmove(r->buf, r->buf + 4 + pl, r->len - 4 - pl);
				r->len -= 4 + pl;
				return d == 0 ? 1 : -1;
			}
		}
		if (r->eof)
			return -1;
		uint64_t now = ms_now();
		if (now >= end)
			return 0;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, (int)(end - now)) <= 0)
			continue;
		if (r->cap - r->len < 65536) {
			r->cap = r->cap ? r->cap * 2 : 131072;
			r->buf = realloc(r->buf, r->cap);
		}
		ssize_t k = read(fd, r->buf + r->len, r->cap - r->len);
		if (k <= 0)
			r->eof = true;
		else
			r->len += (size_t)k;
	}
}

/* Closed by the peer within ms (what it sent first is read and dropped). */
static bool closed_within(int fd, int ms)
{
	uint64_t end = ms_now() + (uint64_t)ms;
	char buf[65536];
	while (ms_now() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k <= 0)
			return true;
	}
	return false;
}

static bool still_open(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
	return poll(&p, 1, 0) == 0;
}

static struct ctl_msg hello_msg(void)
{
	struct ctl_msg m = { .kind = CTL_HELLO };
	strcpy(m.u.hello.role, "hostile");
	strcpy(m.u.hello.software, "test_proto_hostile");
	return m;
}

/* Hello, then the HelloAck within ms. */
static bool handshake(int fd, struct rx *r, int ms)
{
	struct ctl_msg h = hello_msg(), m;
	if (!send_msg(fd, &h))
		return false;
	if (recv_msg(fd, r, &m, ms) != 1)
		return false;
	bool ok = m.kind == CTL_HELLO_ACK && m.u.hello_ack.cert.cert_len > 0;
	ctl_msg_clear(&m);
	return ok;
}

static struct ctl_msg request_msg(uint64_t id, const struct proto_tuple *t)
{
	struct ctl_msg q = { .kind = CTL_IDENTITY_REQUEST };
	q.u.identity_request.request_id = id;
	randombytes_buf(q.u.identity_request.nonce, PROTO_NONCE_LEN);
	q.u.identity_request.tuple = *t;
	return q;
}

static struct proto_tuple nobody_tuple(unsigned i)
{
	struct proto_tuple t;
	proto_tuple_from_strings(&t, IPPROTO_TCP, "192.0.2.1", (uint16_t)(1024 + i % 60000), "198.51.100.1", 80);
	return t;
}

/* One request, its answer: the reason word ("ok" for a context), or NULL
 * when the connection closed / nothing came. */
static const char *ask(int fd, struct rx *r, uint64_t id, const struct proto_tuple *t, int ms)
{
	struct ctl_msg q = request_msg(id, t), m;
	if (!send_msg(fd, &q))
		return NULL;
	if (recv_msg(fd, r, &m, ms) != 1)
		return NULL;
	const char *w = NULL;
	if (m.kind == CTL_IDENTITY_RESPONSE && m.u.identity_response.request_id == id)
		w = m.u.identity_response.ok ? "ok" : reason_word(m.u.identity_response.reason);
	ctl_msg_clear(&m);
	return w;
}

static bool keygen(const char *out)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "'%s/tether' keygen --out '%s' >/dev/null", getenv("TETHER_BIN"), out);
	return system(cmd) == 0;
}

/* ================= A: the real proc-supervisor ================= */

/* Case 3: 5000 requests written at once, nothing read: above the 4096 in
 * flight, the connection is closed; the answers still running in the
 * thread pool land on a closed connection. Then a new connection is
 * served. */
static void burst(const char *sock, const char *when)
{
	struct rx r = { 0 };
	int fd = unix_connect(sock);
	bool hs = handshake(fd, &r, 3000);
	int sz = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz));
	enum { BURST = 5000 };
	size_t cap = (size_t)BURST * 128, len = 0;
	uint8_t *all = malloc(cap);
	for (unsigned i = 0; i < BURST; i++) {
		struct proto_tuple tb = nobody_tuple(i);
		struct ctl_msg q = request_msg(10000 + i, &tb);
		uint8_t *b;
		size_t n;
		ctl_encode(&q, &b, &n);
		memcpy(all + len, b, n);
		len += n;
		free(b);
	}
	bool wrote = write_all(fd, all, len) == 0;
	free(all);
	unsigned answers = 0;
	int got;
	struct ctl_msg m;
	uint64_t tb = ms_now();
	while ((got = recv_msg(fd, &r, &m, 8000)) == 1) {
		answers++;
		ctl_msg_clear(&m);
	}
	CHECK(hs && got == -1 && answers < BURST,
	      "case 3 (%s): %d requests in flight (wrote all: %d): closed after %u answers, %llu ms", when,
	      BURST, wrote, answers, (unsigned long long)(ms_now() - tb));
	close(fd);
	rx_free(&r);
	fd = unix_connect(sock);
	struct proto_tuple tn = nobody_tuple(3);
	const char *w = fd >= 0 && handshake(fd, &r, 3000) ? ask(fd, &r, 3, &tn, 10000) : NULL;
	CHECK(w && strcmp(w, "identity_unavailable") == 0, "case 3 (%s): a new connection is served (%s)", when,
	      w ? w : "(none)");
	close(fd);
	rx_free(&r);
}

static int part_procsup(void)
{
	const char *bin = getenv("TETHER_BIN");
	char keys[128], key[160], sock[128], ep[140], audit[128], log[128], psbin[256];
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	snprintf(key, sizeof(key), "%s/provisioning.key", keys);
	snprintf(sock, sizeof(sock), "%s/ctl.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", sock);
	snprintf(audit, sizeof(audit), "%s/proc.jsonl", dir);
	snprintf(log, sizeof(log), "%s/proc.log", dir);
	snprintf(psbin, sizeof(psbin), "%s/proc-supervisor", bin);
	if (!keygen(keys)) {
		CHECK(false, "tether keygen");
		return 1;
	}
	char *argv[] = { psbin, "--cgroup", "none", "--grace", "1", "--audit", audit, "--control", ep,
			 "--provisioning-key", key, "--", "/bin/sleep", "120", NULL };
	pid_t ps = spawn(argv, log);
	int fd = -1;
	for (int i = 0; i < 200 && fd < 0 && alive(ps); i++) {
		fd = unix_connect(sock);
		if (fd < 0)
			msleep(50);
	}
	if (fd < 0) {
		CHECK(false, "proc-supervisor serves %s (see %s)", ep, log);
		stop_child(ps, 3000);
		return 1;
	}
	struct rx r = { 0 };
	CHECK(handshake(fd, &r, 3000), "a well-behaved peer gets its HelloAck");
	close(fd);
	rx_free(&r);
	/* First a burst: 4096 requests in the thread pool at once, so every
	 * worker has its attribution context (and descriptors) before the
	 * baseline is taken. */
	burst(sock, "first");
	fd = unix_connect(sock);
	CHECK(fd >= 0 && handshake(fd, &r, 3000), "a well-behaved peer after the burst");

	/* Case 4: 2000 requests in flight for tuples no process owns: every
	 * answer must be a typed error for its own id. */
	enum { WARM = 2000 };
	for (unsigned i = 0; i < WARM; i++) {
		struct proto_tuple t = nobody_tuple(i);
		struct ctl_msg q = request_msg(1000 + i, &t);
		if (!send_msg(fd, &q))
			break;
	}
	unsigned answered = 0, typed = 0;
	char word[64] = "";
	static uint8_t seen[WARM];
	memset(seen, 0, sizeof(seen));
	for (;;) {
		struct ctl_msg m;
		if (recv_msg(fd, &r, &m, 10000) != 1)
			break;
		if (m.kind == CTL_IDENTITY_RESPONSE) {
			uint64_t id = m.u.identity_response.request_id;
			answered++;
			if (id >= 1000 && id < 1000 + WARM && !seen[id - 1000] && !m.u.identity_response.ok &&
			    m.u.identity_response.reason != REASON_OK && m.u.identity_response.reason != REASON_ALLOWED) {
				seen[id - 1000] = 1;
				typed++;
				strscpy(word, reason_word(m.u.identity_response.reason), sizeof(word));
			}
		}
		ctl_msg_clear(&m);
		if (answered == WARM)
			break;
	}
	CHECK(typed == WARM, "case 4: %u tuples of no process: %u typed errors, one per id (%s)", WARM, typed,
	      word);
	CHECK(file_has(audit, "\"event\":\"identity_issued\"") && file_has(audit, "\"reason\":\"identity_unavailable\""),
	      "case 4: identity_issued audited with the reason");
	/* Other tuples no process can own. */
	struct { const char *what; int proto; const char *s, *d; uint16_t sp, dp; } odd[] = {
		{ "ipv6", IPPROTO_TCP, "2001:db8::1", "2001:db8::2", 1, 2 },
		{ "udp", IPPROTO_UDP, "192.0.2.9", "198.51.100.9", 53, 53 },
		{ "proto 255", 255, "192.0.2.9", "198.51.100.9", 1, 1 },
		{ "ports 0", IPPROTO_TCP, "0.0.0.0", "0.0.0.0", 0, 0 },
		{ "loopback", IPPROTO_TCP, "127.0.0.1", "127.0.0.1", 1, 1 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(odd); i++) {
		struct proto_tuple t;
		proto_tuple_from_strings(&t, odd[i].proto, odd[i].s, odd[i].sp, odd[i].d, odd[i].dp);
		const char *w = ask(fd, &r, 50 + i, &t, 5000);
		CHECK(w && strcmp(w, "ok") != 0 && strcmp(w, "allowed") != 0, "case 4: %s tuple: typed error %s",
		      odd[i].what, w ? w : "(none)");
	}
	close(fd);
	rx_free(&r);
	msleep(300); /* let the closes land */
	skip_workers = true;
	int base = fd_count(ps);
	printf("proc-supervisor pid %d: %d descriptors at baseline (and %d of identity workers)\n", (int)ps, base,
	       workers_seen);
	if (getenv("HOSTILE_FD_DUMP"))
		fd_dump(ps);

	/* Case 1 (+2, slowloris): 64 connections at once: 31 that never say
	 * Hello, 1 that trickles a Hello a byte per 400 ms, 32 that say Hello
	 * and then idle. */
	enum { SILENT = 31, IDLE = 32 };
	int silent[SILENT], idle[IDLE], slow;
	uint64_t t0 = ms_now();
	for (int i = 0; i < SILENT; i++)
		silent[i] = unix_connect(sock);
	slow = unix_connect(sock);
	bool idle_ok = true;
	for (int i = 0; i < IDLE; i++) {
		struct rx ir = { 0 };
		idle[i] = unix_connect(sock);
		idle_ok &= idle[i] >= 0 && handshake(idle[i], &ir, 3000);
		rx_free(&ir);
	}
	CHECK(idle_ok, "case 1: 32 peers completed Hello next to 32 pending ones");
	msleep(100);
	CHECK(fd_count(ps) >= base + 64, "case 1: the daemon holds the 64 (%d descriptors)", fd_count(ps));
	/* the 65th, well-behaved: served at once, in the slot of the peer
	 * silent longest (silent[0]); everyone else stays */
	int extra = unix_connect(sock);
	struct rx er = { 0 };
	uint64_t te = ms_now();
	struct proto_tuple et = nobody_tuple(65);
	bool extra_ok = extra >= 0 && handshake(extra, &er, 2000) && ask(extra, &er, 65, &et, 3000);
	CHECK(extra_ok && ms_now() - te < 2000, "case 1: the 65th well-behaved peer is served (max_conns 64), %llu ms",
	      (unsigned long long)(ms_now() - te));
	CHECK(closed_within(silent[0], 1000), "case 1: ... in the slot of the peer silent longest, closed for it");
	int others_open = still_open(slow);
	for (int i = 1; i < SILENT; i++)
		others_open += still_open(silent[i]);
	for (int i = 0; i < IDLE; i++)
		others_open += still_open(idle[i]);
	CHECK(others_open == 63, "case 1: the other 63 peers are still open (%d)", others_open);
	rx_free(&er);
	if (extra >= 0)
		close(extra);
	/* The slowloris' Hello, a byte per 400 ms, while the silent ones wait. */
	uint8_t *hb;
	size_t hn, sent = 0;
	struct ctl_msg h = hello_msg();
	ctl_encode(&h, &hb, &hn);
	bool silent_closed[SILENT] = { [0] = true }, slow_closed = false; /* [0]: gone for the 65th */
	uint64_t slow_at = 0, first_close = 0, last_close = 0, next_byte = 0;
	while (ms_now() - t0 < 9000) {
		uint64_t now = ms_now();
		if (!slow_closed && sent < hn && now >= next_byte) {
			if (write(slow, hb + sent, 1) == 1)
				sent++;
			next_byte = now + 400;
		}
		if (!slow_closed && !still_open(slow) && closed_within(slow, 10)) {
			slow_closed = true;
			slow_at = now - t0;
		}
		int n_open = 0;
		for (int i = 0; i < SILENT; i++) {
			if (silent_closed[i])
				continue;
			if (!still_open(silent[i]) && closed_within(silent[i], 10)) {
				silent_closed[i] = true;
				if (!first_close)
					first_close = now - t0;
				last_close = now - t0;
			} else {
				n_open++;
			}
		}
		if (!n_open && slow_closed)
			break;
		msleep(20);
	}
	free(hb);
	int n_silent_closed = 0;
	for (int i = 0; i < SILENT; i++)
		n_silent_closed += silent_closed[i];
	CHECK(n_silent_closed == SILENT && first_close >= 4000 && last_close <= 7500,
	      "case 1: the other %d silent peers closed at the handshake deadline (%llu..%llu ms after connect)",
	      n_silent_closed - 1, (unsigned long long)first_close, (unsigned long long)last_close);
	CHECK(slow_closed && sent < hn && slow_at >= 4000 && slow_at <= 7500,
	      "case 2: the slowloris is dropped after %llu ms with %zu of %zu bytes of its Hello sent",
	      (unsigned long long)slow_at, sent, hn);
	int idle_open = 0;
	for (int i = 0; i < IDLE; i++)
		idle_open += still_open(idle[i]);
	/* No idle deadline after Hello (the net-supervisor's channel idles
	 * between flows): they stay while there is room. */
	CHECK(idle_open == IDLE, "case 1: the %d peers idle after Hello are still open after %llu ms", idle_open,
	      (unsigned long long)(ms_now() - t0));
	/* Case 1b: 64 peers that said Hello and idle hold every slot: a 65th
	 * is served in the slot of the one idle longest (idle[0]). */
	int idle2[64 - IDLE];
	bool idle2_ok = true;
	for (int i = 0; i < 64 - IDLE; i++) {
		struct rx ir = { 0 };
		idle2[i] = unix_connect(sock);
		idle2_ok &= idle2[i] >= 0 && handshake(idle2[i], &ir, 3000);
		rx_free(&ir);
	}
	CHECK(idle2_ok, "case 1b: 64 peers said Hello and idle");
	extra = unix_connect(sock);
	te = ms_now();
	extra_ok = extra >= 0 && handshake(extra, &er, 2000) && ask(extra, &er, 66, &et, 3000);
	CHECK(extra_ok, "case 1b: a 65th peer is served (%llu ms)", (unsigned long long)(ms_now() - te));
	CHECK(closed_within(idle[0], 1000), "case 1b: ... in the slot of the peer idle longest");
	others_open = 0;
	for (int i = 1; i < IDLE; i++)
		others_open += still_open(idle[i]);
	for (int i = 0; i < 64 - IDLE; i++)
		others_open += still_open(idle2[i]);
	CHECK(others_open == 63, "case 1b: the other 63 are still open (%d)", others_open);
	rx_free(&er);
	close(extra);
	for (int i = 0; i < 64 - IDLE; i++)
		close(idle2[i]);
	/* Room again: a well-behaved peer is served while the idle ones stay. */
	fd = unix_connect(sock);
	struct proto_tuple t = nobody_tuple(7);
	CHECK(fd >= 0 && handshake(fd, &r, 3000) && ask(fd, &r, 7, &t, 5000),
	      "case 1: after the deadline a well-behaved peer is served again");
	close(fd);
	rx_free(&r);
	for (int i = 0; i < SILENT; i++)
		close(silent[i]);
	close(slow);
	for (int i = 0; i < IDLE; i++)
		close(idle[i]);

	/* Case 2: oversized / garbage frames and protocol violations after
	 * Hello, against the real daemon: each closed at once. */
	struct { const char *what; const uint8_t *b; size_t n; } bad[] = {
		{ "a length prefix of 4 GiB", (const uint8_t *)"\xff\xff\xff\xff", 4 },
		{ "a length prefix of 16 MiB", (const uint8_t *)"\x01\x00\x00\x00xxxxxxxx", 12 },
		{ "garbage in a valid frame", (const uint8_t *)"\x00\x00\x00\x08\xde\xad\xbe\xef\xde\xad\xbe\xef", 12 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		fd = unix_connect(sock);
		bool hs = handshake(fd, &r, 3000);
		uint64_t tb = ms_now();
		write_all(fd, bad[i].b, bad[i].n);
		bool cl = closed_within(fd, 2000);
		CHECK(hs && cl && ms_now() - tb < 1000, "case 2: %s after Hello: closed in %llu ms", bad[i].what,
		      (unsigned long long)(ms_now() - tb));
		close(fd);
		rx_free(&r);
	}
	{
		/* a frame of the maximum size, all garbage */
		fd = unix_connect(sock);
		bool hs = handshake(fd, &r, 3000);
		size_t n = 4 + PROTO_MAX_FRAME;
		uint8_t *b = calloc(1, n);
		frame_put_prefix(b, PROTO_MAX_FRAME);
		memset(b + 4, 0xff, PROTO_MAX_FRAME);
		write_all(fd, b, n);
		free(b);
		CHECK(hs && closed_within(fd, 2000), "case 2: a 64 KiB garbage frame: closed");
		close(fd);
		rx_free(&r);
	}
	{
		/* Hello twice */
		fd = unix_connect(sock);
		bool hs = handshake(fd, &r, 3000);
		struct ctl_msg h2 = hello_msg();
		send_msg(fd, &h2);
		CHECK(hs && closed_within(fd, 2000), "case 2: a second Hello: closed");
		close(fd);
		rx_free(&r);
	}
	{
		/* a tuple the decoder refuses (protocol 0): closed, not answered */
		fd = unix_connect(sock);
		bool hs = handshake(fd, &r, 3000);
		struct proto_tuple t0p = nobody_tuple(1);
		t0p.proto = 0;
		struct ctl_msg q = request_msg(9, &t0p), m;
		send_msg(fd, &q);
		int got = recv_msg(fd, &r, &m, 2000);
		if (got == 1)
			ctl_msg_clear(&m);
		CHECK(hs && got == -1, "case 2: an IdentityRequest with protocol 0: closed without an answer");
		close(fd);
		rx_free(&r);
	}

	/* Case 3 again: a burst must not leave anything behind either. */
	burst(sock, "again");

	/* Case 5: 500 connect/Hello/close cycles, 200 connect/close. */
	{
		int ok = 0;
		for (int i = 0; i < 500; i++) {
			fd = unix_connect(sock);
			ok += fd >= 0 && handshake(fd, &r, 3000);
			if (fd >= 0)
				close(fd);
			rx_free(&r);
		}
		for (int i = 0; i < 200; i++) {
			fd = unix_connect(sock);
			if (fd >= 0)
				close(fd);
		}
		CHECK(ok == 500, "case 5: 500 connect/Hello/close cycles completed (%d)", ok);
	}
	int after = fd_count_settles(ps, base, 5000);
	CHECK(after == base, "descriptors back to the baseline: %d (baseline %d)", after, base);
	/* workers: at most 4 threads (the default pool) x (the worker's, the
	 * attribution's and the holder search's /proc + a sock_diag socket) */
	CHECK(workers_seen <= 16, "identity workers' descriptors bounded: %d", workers_seen);
	if (after != base)
		fd_dump(ps);
	CHECK(alive(ps), "the proc-supervisor is still running");
	fd = unix_connect(sock);
	struct proto_tuple tl = nobody_tuple(11);
	const char *w = fd >= 0 && handshake(fd, &r, 3000) ? ask(fd, &r, 11, &tl, 5000) : NULL;
	CHECK(w != NULL, "a well-behaved peer is still served at the end (%s)", w ? w : "(none)");
	close(fd);
	rx_free(&r);
	int rc = stop_child(ps, 5000);
	CHECK(rc >= 0, "the proc-supervisor stops on SIGTERM (status %d)", rc);
	CHECK(!sanitizer_report(log), "no sanitizer report in %s", log);

	/* Case 6: stderr a pipe whose reader has stalled (a log collector
	 * that fell behind). Every refused or dropped connection used to be
	 * a line or two on stderr: a few dozen hostile connects filled the
	 * pipe, the next line blocked the loop, and the identity service
	 * stopped answering everyone. */
	int pp[2];
	if (pipe2(pp, O_CLOEXEC) < 0)
		return 1;
	fcntl(pp[1], F_SETPIPE_SZ, 4096);
	snprintf(sock, sizeof(sock), "%s/ctl2.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", sock);
	snprintf(audit, sizeof(audit), "%s/proc2.jsonl", dir);
	ps = spawn_fd(argv, pp[1]);
	close(pp[1]);
	fd = -1;
	for (int i = 0; i < 200 && fd < 0 && alive(ps); i++) {
		fd = unix_connect(sock);
		if (fd < 0)
			msleep(50);
	}
	CHECK(fd >= 0 && handshake(fd, &r, 3000), "case 6: a second proc-supervisor, stderr a pipe nobody reads");
	if (fd >= 0)
		close(fd);
	rx_free(&r);
	for (int i = 0; i < 300; i++) {
		int hc = unix_connect(sock);
		if (hc < 0)
			continue;
		write_all(hc, "\x00\x00\x00\x04junk", 8);
		bool cl = closed_within(hc, 1000);
		close(hc);
		if (!cl) {
			printf("case 6: hostile connection %d not closed within 1 s: the daemon is stuck\n", i);
			break;
		}
	}
	fd = unix_connect(sock);
	struct proto_tuple t6 = nobody_tuple(6);
	w = fd >= 0 && handshake(fd, &r, 3000) ? ask(fd, &r, 6, &t6, 5000) : NULL;
	CHECK(w != NULL, "case 6: after 300 dropped hostile connections it still serves (%s)", w ? w : "(none)");
	if (fd >= 0)
		close(fd);
	rx_free(&r);
	/* drain the pipe so that it can stop; keep what it wrote */
	fcntl(pp[0], F_SETFL, O_NONBLOCK);
	kill(ps, SIGTERM);
	char lbuf[65536];
	size_t ll = 0;
	uint64_t end6 = ms_now() + 5000;
	while (alive(ps) && ms_now() < end6) {
		ssize_t k = read(pp[0], lbuf + ll, sizeof(lbuf) - 1 - ll);
		if (k > 0 && ll + (size_t)k < sizeof(lbuf) - 1)
			ll += (size_t)k;
		else
			msleep(20);
	}
	lbuf[ll] = 0;
	rc = stop_child(ps, 2000);
	close(pp[0]);
	CHECK(!strstr(lbuf, "AddressSanitizer") && !strstr(lbuf, "runtime error:"),
	      "case 6: no sanitizer report (%zu bytes of log)", ll);
	return 0;
}

/* ================= B: the real net-supervisor, a fake proc side ================= */

enum fake_mode {
	F_GOOD, F_SILENT, F_UNKNOWN_ID, F_BAD_SIG, F_EXPIRED, F_FUTURE, F_LONG, F_OTHER_INSTANCE,
	F_REPLAY, F_ERR_ALLOWED, F_ERR_OK_WORD, F_EMPTY_RESULT, F_HUGE,
};

struct fake {
	pthread_t th;
	uv_loop_t loop;
	uv_pipe_t listener;
	uv_async_t stop;
	int lfd;
	struct fixture f;
	struct sign_key *other;
	struct signed_cert cert;
	struct signed_context last_good;
	bool have_last;
	_Atomic int mode;
	_Atomic int requests;
	_Atomic int conns;
	struct proto_conn *cs[64];
};

static void fake_answer(struct fake *fk, struct proto_conn *c, const struct ctl_msg *m)
{
	const struct proto_tuple *t = &m->u.identity_request.tuple;
	int mode = atomic_load(&fk->mode);
	if (mode == F_SILENT)
		return;
	struct ctl_msg a = { .kind = CTL_IDENTITY_RESPONSE };
	a.u.identity_response.request_id = m->u.identity_request.request_id;
	if (mode == F_ERR_ALLOWED) {
		/* An error answer cannot allow: "allowed" must read as
		 * protocol_error. */
		a.u.identity_response.reason = REASON_ALLOWED;
		strcpy(a.u.identity_response.message, "hostile");
		proto_conn_send(c, &a);
		return;
	}
	if (mode == F_ERR_OK_WORD || mode == F_EMPTY_RESULT) {
		/* What our encoder refuses to write: an Error whose reason is
		 * "ok", or a response with neither context nor error. */
		Tether__Error err = TETHER__ERROR__INIT;
		err.reason = (char *)"ok";
		err.message = (char *)"hostile";
		Tether__IdentityResponse ir = TETHER__IDENTITY_RESPONSE__INIT;
		ir.request_id = m->u.identity_request.request_id;
		if (mode == F_ERR_OK_WORD) {
			ir.result_case = TETHER__IDENTITY_RESPONSE__RESULT_ERROR;
			ir.error = &err;
		}
		Tether__Frame fr = TETHER__FRAME__INIT;
		fr.version_major = PROTO_VERSION_MAJOR;
		fr.msg_case = TETHER__FRAME__MSG_IDENTITY_RESPONSE;
		fr.identity_response = &ir;
		uint8_t b[512];
		size_t n = tether__frame__get_packed_size(&fr);
		frame_put_prefix(b, (uint32_t)n);
		tether__frame__pack(&fr, b + 4);
		(void)!write(proto_conn_fd(c), b, n + 4);
		return;
	}
	if (mode == F_HUGE) {
		/* 16 MiB announced, a little sent: the client must refuse it
		 * from the prefix. */
		(void)!write(proto_conn_fd(c), "\x01\x00\x00\x00garbagegarbage", 18);
		return;
	}
	if (mode == F_REPLAY && fk->have_last) {
		a.u.identity_response.ok = true;
		a.u.identity_response.context = fk->last_good;
		proto_conn_send(c, &a);
		return;
	}
	uint64_t now = now_real_ns();
	struct context_input in = {
		.topology = PROTO_TOPOLOGY_SPLIT, .source = IDENTITY_SOURCE_DELEGATED,
		.subject = &fk->f.subject, .ancestors = &fk->f.parent, .n_ancestors = 1,
		.anchor = &fk->f.anchor, .tuple = t, .socket_cookie = 0,
		.nonce = m->u.identity_request.nonce, .request_id = m->u.identity_request.request_id,
	};
	if (mode == F_EXPIRED)
		in.issued_at_ns = now - 60ull * 1000000000ull;
	if (mode == F_FUTURE)
		in.issued_at_ns = now + 60ull * 1000000000ull;
	if (mode == F_LONG)
		in.lifetime_ns = 120ull * 1000000000ull;
	struct signed_context sc;
	if (context_sign(mode == F_OTHER_INSTANCE ? fk->other : fk->f.inst, &in, &sc) < 0)
		return;
	if (mode == F_BAD_SIG)
		sc.signature[7] ^= 0x40;
	if (mode == F_UNKNOWN_ID)
		a.u.identity_response.request_id += 1000;
	a.u.identity_response.ok = true;
	a.u.identity_response.context = sc;
	proto_conn_send(c, &a);
	if (mode == F_GOOD) {
		if (fk->have_last)
			signed_context_clear(&fk->last_good);
		fk->last_good = sc;
		fk->have_last = true;
	} else {
		signed_context_clear(&sc);
	}
}

static void fake_msg(struct proto_conn *c, struct ctl_msg *m, void *ud)
{
	struct fake *fk = ud;
	if (m->kind == CTL_HELLO) {
		struct ctl_msg ack = { .kind = CTL_HELLO_ACK };
		ack.u.hello_ack.cert = fk->cert;
		proto_conn_send(c, &ack);
		return;
	}
	if (m->kind == CTL_IDENTITY_REQUEST) {
		atomic_fetch_add(&fk->requests, 1);
		fake_answer(fk, c, m);
	}
}

static void fake_closed(struct proto_conn *c, int err, void *ud)
{
	struct fake *fk = ud;
	for (size_t i = 0; i < ARRAY_SIZE(fk->cs); i++)
		if (fk->cs[i] == c)
			fk->cs[i] = NULL;
}

static void fake_conn(uv_stream_t *l, int status)
{
	struct fake *fk = l->data;
	if (status < 0)
		return;
	struct proto_conn_cbs cbs = { .on_msg = fake_msg, .on_close = fake_closed };
	struct proto_conn *c;
	if (proto_conn_accept(l, NULL, &cbs, fk, &c) < 0)
		return;
	atomic_fetch_add(&fk->conns, 1);
	for (size_t i = 0; i < ARRAY_SIZE(fk->cs); i++)
		if (!fk->cs[i]) {
			fk->cs[i] = c;
			return;
		}
	proto_conn_close(c, 0);
}

static void fake_stop_cb(uv_async_t *a)
{
	struct fake *fk = a->data;
	for (size_t i = 0; i < ARRAY_SIZE(fk->cs); i++)
		if (fk->cs[i])
			proto_conn_close(fk->cs[i], 0);
	uv_close((uv_handle_t *)&fk->listener, NULL);
	uv_close((uv_handle_t *)&fk->stop, NULL);
}

static void *fake_main(void *arg)
{
	struct fake *fk = arg;
	uv_run(&fk->loop, UV_RUN_DEFAULT);
	uv_loop_close(&fk->loop);
	return NULL;
}

static int fake_start(struct fake *fk, const char *sock, const char *keyfile)
{
	if (fix_init(&fk->f) < 0 || fix_seeded_key(0x5a, &fk->other) < 0)
		return -1;
	/* The certificate by the `tether keygen` key the net side pins. */
	struct sign_key *prov;
	if (provkey_load_secret(keyfile, &prov) < 0)
		return -1;
	int r = fix_cert(&fk->f, prov, fk->f.inst, now_real_ns() - 1000000000ull, 0x7e57, &fk->cert);
	sign_key_free(prov);
	if (r < 0)
		return -1;
	char ep[160];
	snprintf(ep, sizeof(ep), "unix:%s", sock);
	struct endpoint e;
	if (endpoint_parse(ep, &e) < 0 || (fk->lfd = endpoint_listen(&e, 16, 0600)) < 0)
		return -1;
	uv_loop_init(&fk->loop);
	uv_pipe_init(&fk->loop, &fk->listener, 0);
	uv_pipe_open(&fk->listener, fk->lfd);
	fk->listener.data = fk;
	uv_async_init(&fk->loop, &fk->stop, fake_stop_cb);
	fk->stop.data = fk;
	if (uv_listen((uv_stream_t *)&fk->listener, 16, fake_conn) < 0)
		return -1;
	return pthread_create(&fk->th, NULL, fake_main, fk) == 0 ? 0 : -1;
}

static void fake_stop(struct fake *fk)
{
	uv_async_send(&fk->stop);
	pthread_join(fk->th, NULL);
	if (fk->have_last)
		signed_context_clear(&fk->last_good);
	signed_cert_clear(&fk->cert);
	sign_key_free(fk->other);
	fix_free(&fk->f);
}

static int free_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	bind(s, (struct sockaddr *)&a, sizeof(a));
	getsockname(s, (struct sockaddr *)&a, &l);
	close(s);
	return ntohs(a.sin_port);
}

static int tcp_connect(int port, int *local_port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(s);
		return -1;
	}
	if (local_port) {
		socklen_t l = sizeof(a);
		getsockname(s, (struct sockaddr *)&a, &l);
		*local_port = ntohs(a.sin_port);
	}
	return s;
}

/* Send req, read the response head (and a little body) within ms. */
static int http_exchange(int s, const char *req, char *resp, size_t cap, int ms)
{
	if (write_all(s, req, strlen(req)) < 0)
		return -1;
	size_t len = 0;
	uint64_t end = ms_now() + (uint64_t)ms;
	while (len + 1 < cap && ms_now() < end) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		ssize_t k = read(s, resp + len, cap - 1 - len);
		if (k <= 0)
			break;
		len += (size_t)k;
		resp[len] = 0;
		char *hend = strstr(resp, "\r\n\r\n");
		if (hend && (strncmp(resp, "HTTP/1.1 200", 12) == 0 || strchr(hend + 4, '\n')))
			break;
	}
	resp[len] = 0;
	int status = 0;
	if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
		return -1;
	return status;
}

static int readyz(int admin)
{
	int s = tcp_connect(admin, NULL);
	if (s < 0)
		return -1;
	char resp[2048];
	int st = http_exchange(s, "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", resp,
			       sizeof(resp), 2000);
	close(s);
	return st;
}

static bool wait_ready(int admin, unsigned ms)
{
	uint64_t end = ms_now() + ms;
	while (ms_now() < end) {
		if (readyz(admin) == 200)
			return true;
		msleep(50);
	}
	return false;
}

/* The egress_decision audited for the flow from client port `cport`. */
static json_t *decision_for(const char *audit, int cport, unsigned ms)
{
	uint64_t end = ms_now() + ms;
	do {
		FILE *f = fopen(audit, "r");
		char line[65536];
		json_t *found = NULL;
		while (f && fgets(line, sizeof(line), f)) {
			json_t *j = json_loads(line, 0, NULL);
			if (!j)
				continue;
			json_t *cl = json_object_get(j, "client");
			if (!found && !strcmp(json_string_value(json_object_get(j, "event")) ?: "", "egress_decision") &&
			    json_integer_value(json_object_get(cl, "port")) == cport) {
				found = j;
				continue;
			}
			json_decref(j);
		}
		if (f)
			fclose(f);
		if (found)
			return found;
		msleep(30);
	} while (ms_now() < end);
	return NULL;
}

struct flow_result {
	int status;
	char header_reason[64];
	char body_reason[64];
	char audit_decision[16];
	char audit_reason[64];
	char audit_source[32];
	uint64_t ms;
};

static void header_value(const char *resp, const char *name, char *out, size_t cap)
{
	out[0] = 0;
	const char *p = strcasestr(resp, name);
	if (!p)
		return;
	p += strlen(name);
	while (*p == ' ')
		p++;
	size_t n = strcspn(p, "\r\n");
	if (n >= cap)
		n = cap - 1;
	memcpy(out, p, n);
	out[n] = 0;
}

/* The upstream listener: tunnels the proxy opened to it are accepted and
 * closed after each flow, so the proxy's tunnel ends (and its descriptors
 * with it) instead of idling half-closed. */
static int up_listen = -1;

static void upstream_drain(void)
{
	int a;
	while ((a = accept4(up_listen, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
		close(a);
}

static void one_flow(int proxy, int up, const char *audit, struct flow_result *fr)
{
	memset(fr, 0, sizeof(*fr));
	int cport = 0;
	int s = tcp_connect(proxy, &cport);
	if (s < 0) {
		fr->status = -1;
		return;
	}
	char req[256], resp[8192];
	snprintf(req, sizeof(req), "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", up, up);
	uint64_t t0 = ms_now();
	fr->status = http_exchange(s, req, resp, sizeof(resp), 8000);
	fr->ms = ms_now() - t0;
	close(s);
	upstream_drain();
	header_value(resp, "X-Tether-Reason:", fr->header_reason, sizeof(fr->header_reason));
	const char *body = strstr(resp, "\r\n\r\n");
	if (body) {
		json_t *j = json_loads(body + 4, JSON_DISABLE_EOF_CHECK, NULL);
		if (j) {
			strscpy(fr->body_reason, json_string_value(json_object_get(j, "reason")) ?: "",
				sizeof(fr->body_reason));
			json_decref(j);
		}
	}
	json_t *d = decision_for(audit, cport, 3000);
	if (d) {
		strscpy(fr->audit_decision, json_string_value(json_object_get(d, "decision")) ?: "",
			sizeof(fr->audit_decision));
		strscpy(fr->audit_reason, json_string_value(json_object_get(d, "reason")) ?: "",
			sizeof(fr->audit_reason));
		strscpy(fr->audit_source, json_string_value(json_object_get(d, "identity_source")) ?: "",
			sizeof(fr->audit_source));
		json_decref(d);
	}
}

static int part_netsup(void)
{
	const char *bin = getenv("TETHER_BIN");
	char keys[128], key[160], pub[160], sock[128], ep[140], audit[128], log[128], pol[128], nsbin[256];
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	snprintf(key, sizeof(key), "%s/provisioning.key", keys);
	snprintf(pub, sizeof(pub), "%s/provisioning.pub", keys);
	snprintf(sock, sizeof(sock), "%s/fake.sock", dir);
	snprintf(ep, sizeof(ep), "unix:%s", sock);
	snprintf(audit, sizeof(audit), "%s/net.jsonl", dir);
	snprintf(log, sizeof(log), "%s/net.log", dir);
	snprintf(pol, sizeof(pol), "%s/p.yaml", dir);
	snprintf(nsbin, sizeof(nsbin), "%s/net-supervisor", bin);
	if (!keygen(keys)) {
		CHECK(false, "tether keygen");
		return 1;
	}
	/* The upstream: the kernel completes connects to it; upstream_drain()
	 * closes them. */
	int up_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	up_listen = up_fd;
	struct sockaddr_in ua = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t ul = sizeof(ua);
	bind(up_fd, (struct sockaddr *)&ua, sizeof(ua));
	listen(up_fd, 64);
	getsockname(up_fd, (struct sockaddr *)&ua, &ul);
	int up = ntohs(ua.sin_port);
	FILE *pf = fopen(pol, "w");
	fprintf(pf, "version: 1\nnetwork:\n  mode: enforce\n  policies:\n    - name: t\n      binaries:\n"
		    "        - path: /usr/bin/curl\n      endpoints:\n        - cidr: 127.0.0.1/32\n"
		    "          ports: [%d]\n", up);
	fclose(pf);
	static struct fake fk;
	if (fake_start(&fk, sock, key) < 0) {
		CHECK(false, "the fake proc side listens on %s", ep);
		return 1;
	}
	int proxy = free_port(), admin = free_port();
	char listen_a[64], admin_a[64];
	snprintf(listen_a, sizeof(listen_a), "127.0.0.1:%d", proxy);
	snprintf(admin_a, sizeof(admin_a), "127.0.0.1:%d", admin);
	char *argv[] = { nsbin, "--listen", listen_a, "--admin", admin_a, "--policy", pol, "--audit", audit,
			 "--identity", "delegated", "--control", ep, "--provisioning-pubkey", pub,
			 "--identity-timeout-ms", "600", NULL };
	pid_t ns = spawn(argv, log);
	if (!wait_ready(admin, 10000)) {
		CHECK(false, "the net-supervisor becomes ready with the fake proc side (see %s)", log);
		stop_child(ns, 3000);
		fake_stop(&fk);
		return 1;
	}
	struct flow_result fr;
	atomic_store(&fk.mode, F_GOOD);
	one_flow(proxy, up, audit, &fr);
	CHECK(fr.status == 200 && !strcmp(fr.audit_decision, "allow") && !strcmp(fr.audit_reason, "allowed") &&
	      !strcmp(fr.audit_source, "delegated"),
	      "a well-signed context: %d, audit %s %s (%s)", fr.status, fr.audit_decision, fr.audit_reason,
	      fr.audit_source);
	msleep(200);
	int base = fd_count(ns);
	printf("net-supervisor pid %d: %d descriptors at baseline\n", (int)ns, base);
	if (getenv("HOSTILE_FD_DUMP"))
		fd_dump(ns);

	struct { enum fake_mode mode; const char *what, *reason; bool timed; } cases[] = {
		{ F_SILENT, "never answers", "identity_timeout", true },
		{ F_UNKNOWN_ID, "answers for an unknown request id", "identity_timeout", true },
		{ F_BAD_SIG, "a context with a bad signature", "context_signature_invalid", false },
		{ F_EXPIRED, "an expired context", "context_expired", false },
		{ F_FUTURE, "a context issued 60 s in the future", "context_expired", false },
		{ F_LONG, "a context valid for 120 s", "context_expired", false },
		{ F_OTHER_INSTANCE, "a context by another instance key", "anchor_unknown", false },
		{ F_REPLAY, "an earlier context replayed", "context_replayed", false },
		{ F_ERR_ALLOWED, "an error answer saying allowed", "protocol_error", false },
		{ F_ERR_OK_WORD, "an error answer saying ok", "protocol_error", false },
		{ F_EMPTY_RESULT, "a response with neither context nor error", "control_channel_lost", false },
		{ F_HUGE, "a 16 MiB frame", "control_channel_lost", false },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		atomic_store(&fk.mode, cases[i].mode);
		int before = atomic_load(&fk.requests);
		one_flow(proxy, up, audit, &fr);
		bool asked = atomic_load(&fk.requests) > before;
		bool words = !strcmp(fr.header_reason, cases[i].reason) && !strcmp(fr.body_reason, cases[i].reason) &&
			     !strcmp(fr.audit_reason, cases[i].reason) && !strcmp(fr.audit_decision, "deny");
		bool timing = !cases[i].timed || (fr.ms >= 500 && fr.ms < 2000);
		CHECK(asked && (fr.status == 403 || fr.status == 503) && words && timing,
		      "fake proc side: %s -> %d, X-Tether-Reason %s, body %s, audit %s %s, %llu ms", cases[i].what,
		      fr.status, fr.header_reason, fr.body_reason, fr.audit_decision, fr.audit_reason,
		      (unsigned long long)fr.ms);
		CHECK(alive(ns), "the net-supervisor is still running");
		atomic_store(&fk.mode, F_GOOD);
		if (cases[i].mode == F_HUGE || cases[i].mode == F_EMPTY_RESULT)
			CHECK(wait_ready(admin, 5000), "ready again after the channel was dropped");
	}
	/* A well-behaved proc side again: allowed. */
	atomic_store(&fk.mode, F_GOOD);
	one_flow(proxy, up, audit, &fr);
	CHECK(fr.status == 200 && !strcmp(fr.audit_reason, "allowed"), "well-signed again: %d %s", fr.status,
	      fr.audit_reason);
	int after = fd_count_settles(ns, base, 3000);
	CHECK(after == base, "net-supervisor descriptors back to the baseline: %d (baseline %d)", after, base);
	if (after != base)
		fd_dump(ns);
	CHECK(alive(ns), "the net-supervisor is still running");
	int rc = stop_child(ns, 5000);
	CHECK(rc == 0, "the net-supervisor stops on SIGTERM (status %d)", rc);
	CHECK(!sanitizer_report(log), "no sanitizer report in %s", log);
	fake_stop(&fk);
	close(up_fd);
	return 0;
}

static void rm_tree(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2 || (strcmp(argv[1], "procsup") && strcmp(argv[1], "netsup"))) {
		fprintf(stderr, "usage: test_proto_hostile procsup|netsup\n");
		return 2;
	}
	if (!getenv("TETHER_BIN")) {
		fprintf(stderr, "TETHER_BIN not set\n");
		return 2;
	}
	if (proto_crypto_init() < 0)
		return 1;
	strcpy(dir, "/tmp/tether-hostile-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	int r = !strcmp(argv[1], "procsup") ? part_procsup() : part_netsup();
	if (r || failures)
		fprintf(stderr, "%d check(s) failed; files kept in %s\n", failures, dir);
	else
		if (!getenv("HOSTILE_KEEP")) rm_tree();
	return r || failures ? 1 : 0;
}
