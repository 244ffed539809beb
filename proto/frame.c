#include "proto/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void frame_decoder_init(struct frame_decoder *d, size_t max_frame)
{
	memset(d, 0, sizeof(*d));
	d->max_frame = (max_frame == 0 || max_frame > PROTO_MAX_FRAME) ? PROTO_MAX_FRAME : max_frame;
}

void frame_decoder_free(struct frame_decoder *d)
{
	free(d->buf);
	d->buf = NULL;
	d->len = d->cap = 0;
}

bool frame_decoder_pending(const struct frame_decoder *d) { return d->len > 0; }

static uint32_t get_prefix(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int check_len(const struct frame_decoder *d, uint32_t len)
{
	if (len == 0)
		return -EBADMSG;
	if (len > d->max_frame)
		return -EMSGSIZE;
	return 0;
}

static int buffer_append(struct frame_decoder *d, const uint8_t *p, size_t n)
{
	if (d->len + n > d->cap) {
		size_t ncap = d->cap ? d->cap : 256;
		while (ncap < d->len + n)
			ncap *= 2;
		uint8_t *b = realloc(d->buf, ncap);
		if (!b)
			return -ENOMEM;
		d->buf = b;
		d->cap = ncap;
	}
	memcpy(d->buf + d->len, p, n);
	d->len += n;
	return 0;
}

int frame_decoder_feed(struct frame_decoder *d, const uint8_t *data, size_t n, frame_cb cb,
		       void *userdata)
{
	if (d->error)
		return d->error;
	int r;
	/* Finish a buffered partial frame first. */
	while (d->len > 0 && n > 0) {
		if (d->len < PROTO_FRAME_PREFIX) {
			size_t take = PROTO_FRAME_PREFIX - d->len;
			if (take > n)
				take = n;
			if ((r = buffer_append(d, data, take)) < 0)
				goto fail;
			data += take, n -= take;
			if (d->len < PROTO_FRAME_PREFIX)
				return 0;
			if ((r = check_len(d, get_prefix(d->buf))) < 0)
				goto fail;
		}
		size_t want = PROTO_FRAME_PREFIX + get_prefix(d->buf) - d->len;
		size_t take = want < n ? want : n;
		if ((r = buffer_append(d, data, take)) < 0)
			goto fail;
		data += take, n -= take;
		if (take < want)
			return 0;
		size_t plen = d->len - PROTO_FRAME_PREFIX;
		d->len = 0;
		if ((r = cb(d->buf + PROTO_FRAME_PREFIX, plen, userdata)) < 0)
			goto fail;
	}
	/* Whole frames straight from the input, no copy. */
	while (n >= PROTO_FRAME_PREFIX) {
		uint32_t len = get_prefix(data);
		if ((r = check_len(d, len)) < 0)
			goto fail;
		if (n - PROTO_FRAME_PREFIX < len)
			break;
		if ((r = cb(data + PROTO_FRAME_PREFIX, len, userdata)) < 0)
			goto fail;
		data += PROTO_FRAME_PREFIX + len;
		n -= PROTO_FRAME_PREFIX + len;
	}
	if (n > 0 && (r = buffer_append(d, data, n)) < 0)
		goto fail;
	return 0;
fail:
	d->error = r;
	return r;
}
