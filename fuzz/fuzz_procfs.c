/* Every procfs parser on the same arbitrary buffer: none may crash, read
 * out of bounds, or report success with out-of-range results. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "identity/procfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The parsers take (buf, len) and must not rely on a terminating NUL;
	 * copy into an exact-size heap buffer so ASan sees any overread. */
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);

	struct procfs_stat st;
	if (procfs_parse_stat(buf, size, &st) == 0 && strnlen(st.comm, sizeof(st.comm)) > PROCFS_COMM_MAX)
		abort();
	struct procfs_status status;
	if (procfs_parse_status(buf, size, &status) == 0 && status.n_nspid > PROCFS_NSPID_MAX)
		abort();
	struct procfs_cgroup cg;
	(void)procfs_parse_cgroup(buf, size, &cg);
	struct procfs_maps_entry me;
	(void)procfs_parse_maps_line(buf, size, &me);
	(void)procfs_maps_find(buf, size, 0x803, 12345, &me);
	pid_t pid;
	(void)procfs_parse_fdinfo_pid(buf, size, &pid);
	free(buf);
	return 0;
}
