/* The checker the plain-C tests share: a failed condition is printed as
 * "FAIL file:line: condition: message" and counted, and the test goes on, so
 * one run reports every broken check. main() ends with `return failures ? 1
 * : 0`. Header only: each test program has its own counter. */
#pragma once

#include <stdio.h>

/* unused: a helper source may include this header without checking anything */
static int failures __attribute__((unused));

#define CHECK(cond, ...)                                                                \
	do {                                                                            \
		if (!(cond)) {                                                          \
			failures++;                                                     \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                   \
			fputc('\n', stderr);                                            \
		}                                                                       \
	} while (0)
