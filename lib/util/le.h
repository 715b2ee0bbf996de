/*
 * Little-endian integer fields of the binary formats kvtools writes to
 * disk (archives, eviction shard state), whatever the host's byte order.
 */
#ifndef KV_UTIL_LE_H
#define KV_UTIL_LE_H

#include <stdint.h>

/* Store the low bytes of v at p; returns the byte after them. */
static inline unsigned char *kvi_put_le(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		*p++ = (unsigned char)(v >> (8 * i));
	return p;
}

static inline uint64_t kvi_get_le(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

#endif
