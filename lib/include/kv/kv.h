/*
 * libkv: storage for LLM KV-cache offloading.
 *
 * Conventions: functions are kv_<object>_<verb>; they return 0 (or a
 * count) on success and -errno on failure, never set errno, never print
 * and never exit.  Objects come back through out-parameters.  The text
 * behind a failure, where there is more than kv_strerror() says, comes
 * through one channel: kv_error_detail().
 */
#ifndef KV_KV_H
#define KV_KV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library version as "MAJOR.MINOR.PATCH". */
const char *kv_version(void);

/* A static message for a libkv return code (a negative errno or KV_E*). */
const char *kv_strerror(int err);

/* The detail behind this thread's last failure that had more to say than
 * its code (the config field, the CUDA call and its message); "" when the
 * last call that could set it failed without detail or succeeded.  Read it
 * before the thread's next libkv call. */
const char *kv_error_detail(void);

/* Write all len bytes of buf to fd, through short writes and EINTR:
 * 0, or -errno. */
int kv_write_full(int fd, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#include <kv/errors.h>
#include <kv/units.h>
#include <kv/layout.h>
#include <kv/config.h>
#include <kv/walk.h>
#include <kv/lastuse.h>
#include <kv/evict.h>
#include <kv/events.h>
#include <kv/integrity.h>
#include <kv/io.h>
#include <kv/offd.h>
#include <kv/stats.h>
#include <kv/geometry.h>
#include <kv/dma.h>
#include <kv/numa.h>
#include <kv/lru.h>
#include <kv/file_index.h>
#include <kv/slots.h>
#include <kv/tier.h>
#include <kv/xfer.h>
#include <kv/gds.h>
#include <kv/archive.h>

#endif
