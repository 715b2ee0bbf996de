#ifndef KV_INTEGRITY_H
#define KV_INTEGRITY_H

/*
 * Payload checksums kept beside the data, never in it, so block files stay
 * byte-identical to what vLLM reads: XXH3-64 of the whole file in the
 * xattr user.kv.xxh3 as 16 lowercase hex digits (kvtools writes it), and
 * CRC32C (Castagnoli) in user.vllm.kv_crc32c as four big-endian bytes
 * (vLLM's native tier writes it; kvtools verifies it where present).
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_XATTR_XXH3	"user.kv.xxh3"
#define KV_XATTR_VLLM_CRC32C	"user.vllm.kv_crc32c"

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

/* CRC32C of a buffer, as vLLM computes it. */
uint32_t kv_crc32c(const void *buf, size_t len);

/* Check buf, the whole data of the file open at fd, against every
 * checksum the file carries: 0 when each matches or none is stored (or
 * the filesystem has no xattrs), -KV_ECHECKSUM on a mismatch or a
 * malformed value (kv_error_detail() names the xattr), -errno. */
int kv_integrity_check(int fd, const void *buf, size_t len);

/* Read the whole file and check it as kv_integrity_check does: 0 match,
 * -KV_ECHECKSUM mismatch (the detail names the xattr), -ENODATA no
 * checksum stored, -ENOTSUP no user xattrs here, -errno on read failure.
 * Nothing is read when there is nothing to check against. */
int kv_integrity_verify_fd(int fd);

#ifdef __cplusplus
}
#endif

#endif
