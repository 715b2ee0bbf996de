#ifndef KV_INTEGRITY_H
#define KV_INTEGRITY_H

/*
 * Payload checksums kept beside the data, never in it: XXH3-64 of the
 * whole file in the xattr user.kv.xxh3 as 16 lowercase hex digits, so
 * block files stay byte-identical to what vLLM reads.
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_XATTR_XXH3	"user.kv.xxh3"

/* XXH3-64 of a buffer. */
uint64_t kv_xxh3(const void *buf, size_t len);

/* Streaming form for payloads that arrive in pieces. */
struct kv_xxh3_state;
int kv_xxh3_new(struct kv_xxh3_state **out);
void kv_xxh3_update(struct kv_xxh3_state *st, const void *buf, size_t len);
uint64_t kv_xxh3_digest(const struct kv_xxh3_state *st);
void kv_xxh3_free(struct kv_xxh3_state *st);

/* Store / read the checksum xattr on an open file.  -ENOTSUP (or
 * -EOPNOTSUPP) where the filesystem has no user xattrs; kv_integrity_get
 * returns -ENODATA when the file carries none. */
int kv_integrity_set(int fd, uint64_t xxh3);
int kv_integrity_get(int fd, uint64_t *xxh3);

/* Hash the whole file and compare: 0 match, -KV_ECHECKSUM mismatch,
 * -ENODATA no checksum stored, -errno on read failure. */
int kv_integrity_verify_fd(int fd);

#ifdef __cplusplus
}
#endif

#endif
