/* gw_idclient: the net side for the identity-service tests.
 *
 *   gw_idclient connect HOST PORT [SECONDS]
 *       connect, print "<pid> <local port>", keep the socket SECONDS (20).
 *   gw_idclient query --control EP --pub FILE --port-file F [--wait-file W]
 *       listen on 127.0.0.1:0 (port into F), accept one flow, ask the
 *       proc side who owns it through proto_client (verifier pinned to
 *       FILE), print one JSON line. With --wait-file: then wait until W
 *       exists (the test restarts the supervisor meanwhile), accept a second
 *       flow, ask again (a second line), and check the FIRST context again
 *       against the same verifier (a third line: {"old_reason": ...}).
 * Every wait is bounded. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "proto/client.h"
#include "proto/keys.h"
#include "proto/verifier.h"

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int do_connect(const char *host, int port, int secs)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		return 1;
	}
	struct sockaddr_in l;
	socklen_t ll = sizeof(l);
	getsockname(fd, (struct sockaddr *)&l, &ll);
	printf("%d %d\n", (int)getpid(), ntohs(l.sin_port));
	fflush(stdout);
	sleep((unsigned)secs);
	return 0;
}

struct st {
	bool have;
	enum reason reason;
	enum reason state_why;
	json_t *line;
	struct signed_context sc;
	bool have_sc;
	uint8_t nonce[PROTO_NONCE_LEN];
	struct proto_tuple tuple;
};

static void on_state(struct proto_client *c, bool ready, enum reason why, void *ud)
{
	struct st *s = ud;
	if (!ready)
		s->state_why = why;
}

static void on_result(const struct proto_identity_result *res, void *ud)
{
	struct st *s = ud;
	s->have = true;
	s->reason = res->reason;
	json_t *j = json_pack("{s:s, s:s}", "reason", reason_word(res->reason), "message", res->message);
	if (res->reason == REASON_OK && res->ctx) {
		json_object_set_new(j, "subject_pid", json_integer(res->ctx->subject.pid));
		json_object_set_new(j, "subject_key", json_string(res->ctx->subject.key));
		json_object_set_new(j, "subject_exe", json_string(res->ctx->subject.exe.path));
		json_object_set_new(j, "subject_hashed", json_boolean(res->ctx->subject.exe.hashed));
		json_object_set_new(j, "anchor_pid", json_integer(res->ctx->anchor.pid));
		json_t *anc = json_array();
		for (size_t i = 0; i < res->ctx->n_ancestors; i++)
			json_array_append_new(anc, json_integer(res->ctx->ancestors[i].pid));
		json_object_set_new(j, "ancestor_pids", anc);
		memcpy(s->nonce, res->ctx->nonce, sizeof(s->nonce));
		s->tuple = res->ctx->tuple;
		if (res->signed_context && signed_context_copy(&s->sc, res->signed_context) == 0)
			s->have_sc = true;
	}
	s->line = j;
}

static int accept_flow(int lfd, struct proto_tuple *t, int *cfd)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	if (poll(&p, 1, 8000) <= 0)
		return -ETIMEDOUT;
	struct sockaddr_in peer, local;
	socklen_t pl = sizeof(peer), ll = sizeof(local);
	*cfd = accept(lfd, (struct sockaddr *)&peer, &pl);
	if (*cfd < 0)
		return -errno;
	getsockname(*cfd, (struct sockaddr *)&local, &ll);
	char ps[32], ls[32];
	inet_ntop(AF_INET, &peer.sin_addr, ps, sizeof(ps));
	inet_ntop(AF_INET, &local.sin_addr, ls, sizeof(ls));
	/* As the net side sees it: the workload's socket is src. */
	return proto_tuple_from_strings(t, IPPROTO_TCP, ps, ntohs(peer.sin_port), ls, ntohs(local.sin_port));
}

static int ask(uv_loop_t *loop, struct proto_client *cl, const struct proto_tuple *t, struct st *s)
{
	s->have = false;
	if (proto_client_request(cl, t, 0, on_result, s, NULL) < 0)
		return -EINVAL;
	uint64_t end = now_ms() + 10000;
	while (!s->have && now_ms() < end)
		uv_run(loop, UV_RUN_ONCE);
	if (!s->have)
		return -ETIMEDOUT;
	json_object_set_new(s->line, "state_reason", json_string(reason_word(s->state_why)));
	char *txt = json_dumps(s->line, JSON_COMPACT);
	printf("%s\n", txt);
	fflush(stdout);
	free(txt);
	json_decref(s->line);
	return 0;
}

static void on_tick(uv_timer_t *t)
{
}

static int do_query(int argc, char **argv)
{
	const char *control = NULL, *pub = NULL, *port_file = NULL, *wait_file = NULL;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--control"))
			control = argv[i + 1];
		else if (!strcmp(argv[i], "--pub"))
			pub = argv[i + 1];
		else if (!strcmp(argv[i], "--port-file"))
			port_file = argv[i + 1];
		else if (!strcmp(argv[i], "--wait-file"))
			wait_file = argv[i + 1];
	}
	if (!control || !pub || !port_file)
		return 2;
	struct pub_key pk;
	if (provkey_load_public(pub, &pk) < 0)
		return 2;
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 8) < 0)
		return 1;
	getsockname(lfd, (struct sockaddr *)&a, &al);
	FILE *f = fopen(port_file, "w");
	fprintf(f, "%d\n", ntohs(a.sin_port));
	fclose(f);

	uv_loop_t loop;
	uv_loop_init(&loop);
	uv_timer_t tick; /* keeps UV_RUN_ONCE from blocking forever */
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 50, 50);
	struct verifier *v;
	if (verifier_new(&pk, 1, NULL, &v) < 0)
		return 1;
	struct st s = { 0 };
	/* Signed answers (no MAC key offered): what this tool checks is the
	 * offline verification of a context after the instance that signed it
	 * is gone. The MAC path (protocol 1.2) and the signature that follows
	 * it are checked by test_proto_channel and e2e delegated_mac_audit. */
	struct proto_client_opts co = { .endpoint = control, .verifier = v, .on_state = on_state, .userdata = &s,
					.backoff_min_ms = 50, .backoff_max_ms = 200, .no_mac = true };
	struct proto_client *cl;
	if (proto_client_start(&loop, &co, &cl) < 0)
		return 1;
	struct proto_tuple t;
	int cfd = -1, cfd2 = -1;
	if (accept_flow(lfd, &t, &cfd) < 0) {
		fprintf(stderr, "no flow\n");
		return 1;
	}
	if (ask(&loop, cl, &t, &s) < 0) {
		fprintf(stderr, "no answer\n");
		return 1;
	}
	struct st first = s;
	memset(&s.sc, 0, sizeof(s.sc));
	s.have_sc = false;
	int rc = 0;
	if (wait_file) {
		uint64_t end = now_ms() + 20000;
		struct stat stt;
		while (stat(wait_file, &stt) < 0 && now_ms() < end)
			uv_run(&loop, UV_RUN_ONCE);
		/* Let the client reconnect to the new instance. */
		end = now_ms() + 5000;
		while (!proto_client_ready(cl) && now_ms() < end)
			uv_run(&loop, UV_RUN_ONCE);
		struct proto_tuple t2;
		if (accept_flow(lfd, &t2, &cfd2) < 0 || ask(&loop, cl, &t2, &s) < 0) {
			fprintf(stderr, "second flow failed\n");
			rc = 1;
		} else if (first.have_sc) {
			struct identity_context *ctx = NULL;
			struct verify_expect ex = { .nonce = NULL, .tuple = &first.tuple };
			enum reason r = verifier_check_context(v, &first.sc, &ex, &ctx);
			if (ctx)
				context_free(ctx);
			printf("{\"old_reason\":\"%s\"}\n", reason_word(r));
			fflush(stdout);
		}
	}
	if (first.have_sc)
		signed_context_clear(&first.sc);
	if (s.have_sc)
		signed_context_clear(&s.sc);
	bool stopped = false;
	proto_client_stop(cl, NULL, NULL);
	(void)stopped;
	uv_close((uv_handle_t *)&tick, NULL);
	uint64_t end = now_ms() + 2000;
	while (uv_run(&loop, UV_RUN_NOWAIT) && now_ms() < end)
		;
	(void)uv_loop_close(&loop);
	verifier_free(v);
	if (cfd >= 0)
		close(cfd);
	if (cfd2 >= 0)
		close(cfd2);
	close(lfd);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "connect"))
		return do_connect(argv[2], atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 20);
	if (argc >= 2 && !strcmp(argv[1], "query"))
		return do_query(argc, argv);
	fprintf(stderr, "usage: gw_idclient connect HOST PORT [S] | query --control EP --pub F --port-file F\n");
	return 2;
}
