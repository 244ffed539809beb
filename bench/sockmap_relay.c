/* sockmap_relay: is an in-kernel relay (a sockmap sk_skb verdict program
 * redirecting each socket's bytes to its peer's egress) a way to bring the
 * proxy's bulk throughput up to a direct connection's? Side by side in one
 * run, rounds interleaved, on 127.0.0.1:
 *
 *   direct   client -> sink
 *   user     client -> relay process (read/write, 1 MiB buffer) -> sink
 *   sockmap  client -> relay process that only sets up the redirect -> sink
 *
 * Each row moves BYTES from the client to the sink, and the client waits
 * for the sink's close to come back through the relay. Printed per row:
 * MiB/s, the ratio over direct in the same round, and the CPU the whole
 * machine spent per GiB (from /proc/stat, so the kernel work a redirect
 * does in softirq and in the workqueue is counted too).
 *
 * The sockmap relay is a measurement, not a product path: the proxy does not
 * use it (docs/performance.md, "Considered and not built"). Its end of
 * stream is handled as a relay must: a side's EOF is passed on only once
 * everything that side received is in the other side's send queue
 * (tcpi_bytes_received against tcpi_bytes_acked + SIOCOUTQ, from baselines
 * taken when the sockets joined the map), and bytes queued before the
 * sockets joined are pushed through the verdict by SO_RCVLOWAT.
 *
 *   sockmap_relay [--bytes N] [--rounds R]      (root or CAP_BPF+CAP_NET_ADMIN for the sockmap row) */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/bpf.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

enum mode { DIRECT, USER, SOCKMAP, N_MODES };
static const char *const mode_name[N_MODES] = { "direct", "user", "sockmap" };

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* busy CPU-seconds of the whole machine so far (all but idle and iowait) */
static double machine_busy_s(void)
{
	FILE *f = fopen("/proc/stat", "r");
	unsigned long long v[8] = { 0 };
	if (!f)
		return 0;
	int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
		       &v[6], &v[7]);
	fclose(f);
	if (n != 8)
		return 0;
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)sysconf(_SC_CLK_TCK);
}

/* ---------- the BPF side: two maps and one verdict program ---------- */

struct kernel_relay {
	int peers;   /* hash: socket cookie -> its peer's cookie */
	int sockets; /* sockhash: cookie -> socket */
	int prog;
};

static long sys_bpf(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }

#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })

static int map_create(enum bpf_map_type type, unsigned key, unsigned value, unsigned n)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_type = type;
	a.key_size = key;
	a.value_size = value;
	a.max_entries = n;
	return (int)sys_bpf(BPF_MAP_CREATE, &a);
}

static int map_set(int map, const void *key, const void *value)
{
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)map;
	a.key = (uintptr_t)key;
	a.value = (uintptr_t)value;
	a.flags = BPF_ANY;
	return (int)sys_bpf(BPF_MAP_UPDATE_ELEM, &a);
}

/* verdict(skb): peer = peers[cookie(skb->sk)]; no peer -> SK_PASS (the
 * bytes stay on the socket for user space: nothing is dropped); else
 * redirect to the egress of sockets[peer]. */
static int kernel_relay_open(struct kernel_relay *k, char *why, size_t why_len)
{
	k->peers = map_create(BPF_MAP_TYPE_HASH, 8, 8, 256);
	k->sockets = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 4, 256);
	if (k->peers < 0 || k->sockets < 0) {
		snprintf(why, why_len, "map create: %s", strerror(errno));
		return -1;
	}
	const struct bpf_insn prog[] = {
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0),
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_get_socket_cookie),
		INSN(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_0, -8, 0),
		INSN(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_1, BPF_PSEUDO_MAP_FD, 0, k->peers),
		INSN(0, 0, 0, 0, 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_2, BPF_REG_10, 0, 0),
		INSN(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_2, 0, 0, -8),
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem),
		INSN(BPF_JMP | BPF_JEQ | BPF_K, BPF_REG_0, 0, 10, 0), /* no peer: to the SK_PASS below */
		INSN(BPF_LDX | BPF_MEM | BPF_DW, BPF_REG_3, BPF_REG_0, 0, 0),
		INSN(BPF_STX | BPF_MEM | BPF_DW, BPF_REG_10, BPF_REG_3, -16, 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0),
		INSN(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_2, BPF_PSEUDO_MAP_FD, 0, k->sockets),
		INSN(0, 0, 0, 0, 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_3, BPF_REG_10, 0, 0),
		INSN(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_3, 0, 0, -16),
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_4, 0, 0, 0), /* egress */
		INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_redirect_hash),
		INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
		INSN(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, SK_PASS),
		INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
	};
	static char log[16384];
	union bpf_attr a;
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SK_SKB;
	a.insns = (uintptr_t)prog;
	a.insn_cnt = sizeof(prog) / sizeof(prog[0]);
	a.license = (uintptr_t) "GPL";
	a.log_buf = (uintptr_t)log;
	a.log_size = sizeof(log);
	a.log_level = 1;
	k->prog = (int)sys_bpf(BPF_PROG_LOAD, &a);
	if (k->prog < 0) {
		snprintf(why, why_len, "program load: %s", strerror(errno));
		return -1;
	}
	memset(&a, 0, sizeof(a));
	a.target_fd = (uint32_t)k->sockets;
	a.attach_bpf_fd = (uint32_t)k->prog;
	a.attach_type = BPF_SK_SKB_VERDICT;
	if (sys_bpf(BPF_PROG_ATTACH, &a) < 0) {
		snprintf(why, why_len, "attach: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* ---------- sockets ---------- */

static int listen_lo(int *port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 4) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &l) < 0) {
		perror("listen");
		exit(1);
	}
	*port = ntohs(a.sin_port);
	return s;
}

static int dial_lo(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		exit(1);
	}
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return s;
}

static uint64_t cookie_of(int fd)
{
	uint64_t c = 0;
	socklen_t l = sizeof(c);
	return getsockopt(fd, SOL_SOCKET, SO_COOKIE, &c, &l) == 0 ? c : 0;
}

static void tcp_counters(int fd, uint64_t *received, uint64_t *into_sendq)
{
	struct tcp_info ti;
	socklen_t l = sizeof(ti);
	memset(&ti, 0, sizeof(ti));
	getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l);
	int q = 0;
	ioctl(fd, SIOCOUTQ, &q);
	*received = ti.tcpi_bytes_received;
	*into_sendq = ti.tcpi_bytes_acked + (uint64_t)q;
}

/* the sink reads to EOF, then closes (which travels back to the client) */
static void run_sink(int ls, uint64_t want)
{
	int s = accept(ls, NULL, NULL);
	static char buf[1 << 18];
	uint64_t got = 0;
	ssize_t n;
	while ((n = read(s, buf, sizeof(buf))) > 0)
		got += (uint64_t)n;
	_exit(got == want ? 0 : 3);
}

static void run_user_relay(int ls, int up)
{
	int fd[2] = { accept(ls, NULL, NULL), dial_lo(up) };
	static char buf[1 << 20];
	struct pollfd p[2] = { { .fd = fd[0], .events = POLLIN }, { .fd = fd[1], .events = POLLIN } };
	for (int open = 2; open > 0;) {
		if (poll(p, 2, -1) < 0)
			_exit(2);
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			ssize_t n = read(fd[i], buf, sizeof(buf));
			if (n <= 0) {
				shutdown(fd[1 - i], SHUT_WR);
				p[i].fd = -1;
				open--;
				continue;
			}
			for (ssize_t off = 0; off < n;) {
				ssize_t w = write(fd[1 - i], buf + off, (size_t)(n - off));
				if (w < 0)
					_exit(2);
				off += w;
			}
		}
	}
	_exit(0);
}

static void run_sockmap_relay(const struct kernel_relay *k, int ls, int up)
{
	int fd[2] = { accept(ls, NULL, NULL), dial_lo(up) };
	uint64_t ck[2] = { cookie_of(fd[0]), cookie_of(fd[1]) };
	uint64_t base_rx[2], base_in[2];
	for (int i = 0; i < 2; i++)
		tcp_counters(fd[i], &base_rx[i], &base_in[i]);
	if (map_set(k->peers, &ck[0], &ck[1]) < 0 || map_set(k->peers, &ck[1], &ck[0]) < 0)
		_exit(4);
	for (int i = 0; i < 2; i++) {
		uint32_t v = (uint32_t)fd[i];
		if (map_set(k->sockets, &ck[i], &v) < 0)
			_exit(4);
	}
	/* what arrived before the sockets joined the map is not seen by the
	 * verdict until the next data_ready: SO_RCVLOWAT raises one now */
	int one = 1;
	for (int i = 0; i < 2; i++)
		setsockopt(fd[i], SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
	struct pollfd p[2] = { { .fd = fd[0], .events = POLLIN | POLLRDHUP },
			       { .fd = fd[1], .events = POLLIN | POLLRDHUP } };
	for (int open = 2; open > 0;) {
		if (poll(p, 2, -1) < 0)
			_exit(2);
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char c;
			ssize_t n = recv(fd[i], &c, 1, MSG_DONTWAIT | MSG_PEEK);
			if (n > 0 || (n < 0 && errno == EAGAIN))
				continue; /* nothing reaches user space while a peer is mapped */
			/* EOF on i: hand it on once all i received (less its FIN) is
			 * in the other side's send queue */
			double deadline = now_s() + 30;
			for (;;) {
				uint64_t rx, in, orx, oin;
				tcp_counters(fd[i], &rx, &in);
				tcp_counters(fd[1 - i], &orx, &oin);
				/* the FIN counts in tcpi_bytes_received once it is
				 * processed, which may be after recv() sees it */
				if (rx - base_rx[i] >= 1 && oin - base_in[1 - i] >= rx - base_rx[i] - 1)
					break;
				if (now_s() > deadline)
					_exit(5); /* a relay that would truncate */
				usleep(100);
			}
			shutdown(fd[1 - i], SHUT_WR);
			p[i].fd = -1;
			open--;
		}
	}
	_exit(0);
}

/* one transfer through the mode's path: MiB/s and machine CPU s/GiB */
static int one_run(enum mode m, const struct kernel_relay *k, uint64_t bytes, double *mibs, double *cpu_gib)
{
	int sink_port, relay_port = 0;
	int sl = listen_lo(&sink_port);
	pid_t sink = fork();
	if (sink == 0)
		run_sink(sl, bytes);
	close(sl);
	pid_t relay = 0;
	if (m != DIRECT) {
		int rl = listen_lo(&relay_port);
		relay = fork();
		if (relay == 0) {
			if (m == USER)
				run_user_relay(rl, sink_port);
			run_sockmap_relay(k, rl, sink_port);
		}
		close(rl);
	}
	int c = dial_lo(m == DIRECT ? sink_port : relay_port);
	static char buf[1 << 20];
	memset(buf, 'x', sizeof(buf));
	double cpu0 = machine_busy_s(), t0 = now_s();
	for (uint64_t sent = 0; sent < bytes;) {
		size_t n = bytes - sent < sizeof(buf) ? (size_t)(bytes - sent) : sizeof(buf);
		ssize_t w = write(c, buf, n);
		if (w <= 0) {
			perror("write");
			return -1;
		}
		sent += (uint64_t)w;
	}
	shutdown(c, SHUT_WR);
	while (read(c, buf, sizeof(buf)) > 0)
		;
	double dt = now_s() - t0, cpu = machine_busy_s() - cpu0;
	close(c);
	int st, ok = 1;
	waitpid(sink, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		ok = 0;
	if (relay) {
		waitpid(relay, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			ok = 0;
	}
	*mibs = (double)bytes / dt / 1048576.0;
	*cpu_gib = cpu / ((double)bytes / 1073741824.0);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	uint64_t bytes = 1ull << 30;
	int rounds = 3;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
			bytes = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			bytes = 256ull << 20, rounds = 1;
		else {
			fprintf(stderr, "usage: sockmap_relay [--bytes N] [--rounds R] [--quick]\n");
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	struct kernel_relay k;
	char why[128] = "";
	bool have_sockmap = kernel_relay_open(&k, why, sizeof(why)) == 0;
	if (!have_sockmap)
		printf("sockmap_relay: sockmap row unavailable (%s)\n", why);
	for (int r = 1; r <= rounds; r++) {
		double direct = 0;
		for (int m = DIRECT; m < N_MODES; m++) {
			if (m == SOCKMAP && !have_sockmap)
				continue;
			double mibs, cpu;
			if (one_run((enum mode)m, &k, bytes, &mibs, &cpu) < 0) {
				printf("sockmap_relay round=%d path=%s FAILED (bytes lost or a relay error)\n", r,
				       mode_name[m]);
				continue;
			}
			if (m == DIRECT)
				direct = mibs;
			printf("sockmap_relay round=%d path=%s bytes=%llu mib_s=%.0f ratio_over_direct=%.2f "
			       "machine_cpu_s_per_gib=%.2f\n",
			       r, mode_name[m], (unsigned long long)bytes, mibs, direct > 0 ? mibs / direct : 0, cpu);
			fflush(stdout);
		}
	}
	return 0;
}
