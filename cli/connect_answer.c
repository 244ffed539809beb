#include "cli/connect_answer.h"

#include <string.h>
#include <strings.h>

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct connect_answer *a = p->data;
	/* a field name may arrive in pieces; only a whole one can match */
	a->in_reason_field = len == strlen("X-Tether-Reason") && !strncasecmp(at, "X-Tether-Reason", len);
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct connect_answer *a = p->data;
	if (!a->in_reason_field)
		return 0;
	size_t have = strlen(a->reason);
	for (size_t i = 0; i < len && have + 1 < sizeof(a->reason); i++) {
		char c = at[i]; /* a reason word: nothing to escape when printed */
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
			a->reason[have++] = c;
	}
	a->reason[have] = '\0';
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	((struct connect_answer *)p->data)->headers_done = true;
	return 2; /* no body here: what follows a 2xx is the tunnel */
}

static const http_parser_settings settings = {
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
};

void connect_answer_init(struct connect_answer *a)
{
	memset(a, 0, sizeof(*a));
	http_parser_init(&a->parser, HTTP_RESPONSE);
	a->parser.data = a;
}

ssize_t connect_answer_feed(struct connect_answer *a, const char *buf, size_t len)
{
	if (a->headers_done)
		return 0;
	size_t used = http_parser_execute(&a->parser, &settings, buf, len);
	if (!a->headers_done && (a->parser.http_errno != HPE_OK || used != len))
		return -1;
	/* http-parser takes one to three digits: "HTTP/1.1 2 x" is no answer */
	if (a->headers_done && (a->parser.status_code < 100 || a->parser.status_code > 599))
		return -1;
	return (ssize_t)used;
}
