/* libFuzzer target: the frame decoder and the control-message decoder.
 * Byte 0 picks the read size (1..32 bytes a read) so partial reads and
 * frames spanning reads are exercised; the rest is the stream. Every
 * message that decodes must re-encode and decode again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/message.h"

static int on_frame(const uint8_t *p, size_t len, void *ud)
{
	struct ctl_msg m;
	int r = ctl_decode(p, len, &m);
	if (r < 0)
		return r;
	uint8_t *again;
	size_t n;
	if (ctl_encode(&m, &again, &n) == 0) {
		struct ctl_msg m2;
		if (ctl_decode(again + PROTO_FRAME_PREFIX, n - PROTO_FRAME_PREFIX, &m2) != 0 ||
		    m2.kind != m.kind)
			abort(); /* what we accept we must be able to say again */
		ctl_msg_clear(&m2);
		free(again);
	}
	ctl_msg_clear(&m);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = (size_t)(data[0] & 31) + 1;
	data++, size--;
	struct frame_decoder d;
	frame_decoder_init(&d, (data[-1] & 0x80) ? 4096 : 0);
	for (size_t off = 0; off < size; off += step) {
		size_t n = size - off < step ? size - off : step;
		if (frame_decoder_feed(&d, data + off, n, on_frame, NULL) < 0)
			break;
	}
	frame_decoder_free(&d);
	return 0;
}
