/* The stand-in HTTP servers of the tests read a request's head (up to the
 * blank line) before they answer. Header only, no dependencies (helper
 * programs built without the project libraries use it too). */
#pragma once

#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Read from fd into buf until the head's "\r\n\r\n", EOF, an error or
 * size - 1 bytes; buf is NUL-terminated. The bytes read. */
static inline size_t read_http_head(int fd, char *buf, size_t size)
{
	size_t len = 0;
	buf[0] = '\0';
	while (len < size - 1) {
		ssize_t n = read(fd, buf + len, size - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	return len;
}
