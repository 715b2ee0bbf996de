/*
 * The one channel for the text behind a libkv failure: every module that
 * has more to say than its return code (which field of a config, which
 * CUDA call) writes it here, and kv_error_detail() reads it back.
 */
#ifndef KV_UTIL_ERROR_H
#define KV_UTIL_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* Set this thread's detail text and return err, so a failure reads
 * "return kvi_fail(-KV_EBADCONFIG, "missing field '%s'", key);". */
int kvi_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Forget the detail of an earlier failure (at the start of a call that
 * may set one, so a stale text never explains a new error). */
void kvi_error_clear(void);

#ifdef __cplusplus
}
#endif

#endif
