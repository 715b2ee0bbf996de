/*
 * The unit tests' assertion: CHECK(cond, fmt, ...) says where and why a
 * check failed, counts it in failures and returns -1 from the test
 * function, so main() runs the next one and exits 1 at the end.
 */
#ifndef KV_TEST_CHECK_H
#define KV_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);		\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		failures++;						\
		return -1;						\
	}								\
} while (0)

#endif
