/* "ADDR:PORT" / "[v6]:PORT", as --listen and --admin take them. */
#pragma once

#include <sys/socket.h>

/* Parse s into a sockaddr (IP literals only, no names). -EINVAL. */
int netsup_parse_hostport(const char *s, struct sockaddr_storage *out);
