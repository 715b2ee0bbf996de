#ifndef KV_ARCHIVE_H
#define KV_ARCHIVE_H

/*
 * Cache archives: blocks with their model config, rank, group, hash and
 * checksum in one stream that is also a valid zstd stream.  Each record
 * is a zstd skippable frame and each block's data a zstd frame of its
 * own, so a damaged entry is refused and the reader goes on with the
 * next.  bf16/fp16/fp32 data compresses better split into byte planes
 * (sign and exponent bytes together), so data may be stored shuffled.
 * The format, version KV_ARCHIVE_VERSION, is set out in kv(7).
 *
 * Writer and reader move bytes through a file descriptor (a file, a
 * pipe, a socket) in memory bounded by the largest block.
 */

#include <stddef.h>
#include <stdint.h>
#include <kv/layout.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KV_ARCHIVE_VERSION	1
#define KV_ARCHIVE_SUFFIX	".kva"

/* One block as archived.  The writer takes ref, config and size_bytes
 * and fills the rest; the reader fills every field. */
struct kv_archive_entry {
	struct kv_block_ref ref;	/* layout, model dir, rank, group, hash
					   (llmd-v0: dtype, group_dir) */
	const char *config;		/* config.json bytes (v1); NULL for llmd-v0 */
	size_t config_len;
	uint64_t size_bytes;		/* the block's bytes */
	uint64_t xxh3;			/* XXH3-64 of them, as in user.kv.xxh3 */
	unsigned shuffle_bytes;		/* element size of the byte planes; 1: none */
	uint64_t stored_bytes;		/* its zstd frame */
	uint64_t offset;		/* reader: where its record starts */
};

enum kv_archive_shuffle {
	KV_ARCHIVE_SHUFFLE_AUTO,	/* per model: whichever the first block
					   compresses smaller with */
	KV_ARCHIVE_SHUFFLE_ALWAYS,	/* by the dtype's size */
	KV_ARCHIVE_SHUFFLE_NEVER,
};

struct kv_archive_write_opts {
	int level;			/* zstd level; 0: 1 (bf16 in planes:
				   smaller and faster than 3) */
	enum kv_archive_shuffle shuffle;
};

struct kv_archive_writer;

/* Start an archive on fd (its header goes out now). */
int kv_archive_writer_open(int fd, const struct kv_archive_write_opts *opts,
			   struct kv_archive_writer **out);

/* Append one block: e->ref names it, e->config is its model's
 * config.json (checked once per model dir against the dir's name:
 * -KV_EFINGERPRINT, -KV_EBADCONFIG with the detail); fills e's xxh3,
 * shuffle_bytes and stored_bytes.  -errno from the write is the end of
 * the archive. */
int kv_archive_write(struct kv_archive_writer *w, struct kv_archive_entry *e,
		     const void *data, size_t len);

/* Write the end record (its entry count); the archive is complete. */
int kv_archive_writer_finish(struct kv_archive_writer *w);

/* Free the writer; an archive not finished stays incomplete. */
void kv_archive_writer_close(struct kv_archive_writer *w);

struct kv_archive_read_opts {
	uint64_t max_block_bytes;	/* a larger declared block is refused; 0: 1 GiB */
};

struct kv_archive_reader;

/* Read an archive from fd: its header is read and checked now.
 * -EPROTONOSUPPORT for another version, -KV_EPROTO for what is not an
 * archive, -KV_ESHORT for an empty or cut stream (detail says which). */
int kv_archive_reader_open(int fd, const struct kv_archive_read_opts *opts,
			   struct kv_archive_reader **out);

/*
 * The next entry's record, checked and bounded, into e (its strings live
 * until the next call): 1, its data next; 0 at the end.  A damaged or
 * out-of-bounds record is -KV_EPROTO or -EFBIG and the reader has moved
 * on to the next record that checks (call again); the end record's count
 * disagreeing with the entries found (read or refused) is -KV_EPROTO
 * once, then 0.  A cut stream (-KV_ESHORT) and a read error (-errno) are
 * the end.  The detail names the entry and its offset.
 */
int kv_archive_next(struct kv_archive_reader *r, struct kv_archive_entry *e);

/* The current entry's data into buf (cap >= e->size_bytes), unshuffled
 * and checked against its xxh3: 0; -KV_ECHECKSUM when it does not
 * decompress to what the record says (the reader moves on); -KV_ESHORT,
 * -errno as for kv_archive_next.  Not called, the data is skipped. */
int kv_archive_data(struct kv_archive_reader *r, void *buf, size_t cap);

void kv_archive_reader_close(struct kv_archive_reader *r);

/* Split n elements of width bytes into width planes (byte 0 of every
 * element, then byte 1, ...); the len % width bytes left over follow
 * as they are.  width 1 is a copy. */
void kv_archive_shuffle(void *dst, const void *src, size_t len, unsigned width);
void kv_archive_unshuffle(void *dst, const void *src, size_t len, unsigned width);

#ifdef __cplusplus
}
#endif

#endif
