/* The identity feed's line reader (identity/idfeed.h) on arbitrary bytes:
 * a line is decoded or refused, never a crash, a hang or a leak; a decoded
 * identity is whole (a binary path, NUL-terminated strings) and survives
 * being released. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "identity/idfeed.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct idfeed_msg m;
	if (idfeed_decode((const char *)data, size, &m) != 0)
		return 0;
	if (m.id) {
		if (!m.id->binary_path || strlen(m.id->sha256) > 64)
			abort();
		for (size_t i = 0; i < m.id->n_ancestors; i++)
			if (!m.id->ancestors[i].path)
				abort();
	}
	idfeed_msg_release(&m);
	return 0;
}
