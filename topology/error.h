/* A one-line, human error message that travels next to a -errno return.
 *
 * Topology setup is a straight sequence of small named steps (bubblewrap
 * style); when one fails, the caller wants both the errno (to decide) and a
 * sentence naming the step (to print): "cannot create veth tether0: File
 * exists". Functions take an optional struct topology_error *; NULL means
 * "I only want the code". */
#pragma once

#include <stddef.h>

struct topology_error {
	int code;       /* the -errno that was returned, 0 when none */
	char msg[512];  /* NUL-terminated, no trailing newline */
};

/* Record r and a printf-style message into err (if non-NULL); returns r so
 * callers can write `return topology_error_set(err, r, "...")`. When the
 * format ends in ": %m"-like text the caller supplies strerror itself. */
int topology_error_set(struct topology_error *err, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Same, appending ": <strerror(-r)>" to the message. */
int topology_error_errno(struct topology_error *err, int r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
