/* Stream framing: each frame is a 4-byte big-endian length followed by that
 * many bytes (one serialized Frame message). A zero length, or a length
 * above the decoder's limit (PROTO_MAX_FRAME, configurable lower), is a
 * protocol error; the limit is checked from the prefix alone, before any
 * payload is buffered.
 *
 * The decoder is pure (no I/O): feed it whatever a read returned — a part
 * of a frame, several frames — and it calls back once per complete
 * payload. After an error it stays failed. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_MAX_FRAME (64 * 1024)
#define PROTO_FRAME_PREFIX 4

/* Return 0 to continue, negative to stop feeding (returned by feed). */
typedef int (*frame_cb)(const uint8_t *payload, size_t len, void *userdata);

struct frame_decoder {
	uint8_t *buf; /* partial frame (prefix included) */
	size_t len, cap;
	size_t max_frame;
	int error;
};

/* max_frame 0 or above PROTO_MAX_FRAME: PROTO_MAX_FRAME. */
void frame_decoder_init(struct frame_decoder *d, size_t max_frame);
void frame_decoder_free(struct frame_decoder *d);
/* 0; -EMSGSIZE (length above the limit), -EBADMSG (zero length), -ENOMEM,
 * or the callback's negative value. */
int frame_decoder_feed(struct frame_decoder *d, const uint8_t *data, size_t n, frame_cb cb,
		       void *userdata);
/* Are bytes of an incomplete frame buffered? (the read deadline runs) */
bool frame_decoder_pending(const struct frame_decoder *d);

static inline void frame_put_prefix(uint8_t *p, uint32_t len)
{
	p[0] = (uint8_t)(len >> 24);
	p[1] = (uint8_t)(len >> 16);
	p[2] = (uint8_t)(len >> 8);
	p[3] = (uint8_t)len;
}
