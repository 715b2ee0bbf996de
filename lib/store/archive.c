/*
 * Cache archives (kv(7) "Archives"): records in zstd skippable frames,
 * each block's data a zstd frame of its own.  Every record ends in the
 * XXH3-64 of its content; every length a record declares is bounded
 * before anything is allocated or read for it, because the reader takes
 * input from anywhere (a file, ssh).  A record that fails a check is
 * reported and the reader scans for the next one that passes, so one
 * damaged entry costs that entry only.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <kv/archive.h>
#include <kv/kv.h>
#include <kv/config.h>
#include <kv/errors.h>
#include <kv/geometry.h>
#include <kv/integrity.h>
#include <kv/layout.h>
#include <kv/units.h>
#include "util/error.h"
#include "util/le.h"

/* zstd's skippable frames are 0x184D2A50..5F; this nibble is ours. */
#define SKIP_MAGIC		0x184D2A5Bu
#define FRAME_HEAD_BYTES	8		/* magic + content size */
#define TAG_BYTES		4
#define SUM_BYTES		8
#define TAG_HEADER		"KVAH"
#define TAG_ENTRY		"KVAE"
#define TAG_END			"KVAZ"
#define HEADER_BYTES		(TAG_BYTES + 4 + 4 + SUM_BYTES)
#define END_BYTES		(TAG_BYTES + 8 + SUM_BYTES)
/* Entry record: tag, flags, rank, group, shuffle, size, stored, xxh3,
 * then hash, model dir, dtype (u16 length each), config (u32 length). */
#define ENTRY_FIXED_BYTES	(TAG_BYTES + 4 * 4 + 3 * 8 + 3 * 2 + 4 + SUM_BYTES)
#define CONFIG_MAX_BYTES	(1u << 20)	/* kv_config_load's bound too */
#define RECORD_MAX_BYTES	(ENTRY_FIXED_BYTES + KV_HASH_MAX_LEN + KV_NAME_MAX + \
				 KV_DTYPE_DIR_MAX + CONFIG_MAX_BYTES)
#define ENTRY_LLMD_V0		(1u << 0)
#define ENTRY_GROUP_DIR		(1u << 1)	/* llmd-v0: bucket <hh>_g<G> */
#define ENTRY_FLAGS_KNOWN	(ENTRY_LLMD_V0 | ENTRY_GROUP_DIR)
#define SHUFFLE_MAX		16
#define DEFAULT_LEVEL		1	/* KV data: level 1 in planes beats 3 (kvbench probe) */
#define DEFAULT_MAX_BLOCK	(1ull << 30)
#define READ_CHUNK_BYTES	(128u * 1024)

/* --- byte planes ------------------------------------------------------ */

/* bf16 and fp16, by far the common case, 32 bytes at a time: the low
 * and high bytes of 16-bit lanes, packed apart and interleaved back.
 * Both return how many bytes they did; the rest go the plain way. */
#ifdef __SSE2__
static size_t planes2_sse2(unsigned char *d, const unsigned char *s, size_t n)
{
	const __m128i low = _mm_set1_epi16(0x00ff);
	size_t i;

	for (i = 0; i + 16 <= n; i += 16) {
		__m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));

		_mm_storeu_si128((__m128i *)(d + i),
				 _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
		_mm_storeu_si128((__m128i *)(d + n + i),
				 _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
	}
	return i;
}

static size_t unplanes2_sse2(unsigned char *d, const unsigned char *s, size_t n)
{
	size_t i;

	for (i = 0; i + 16 <= n; i += 16) {
		__m128i lo = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i hi = _mm_loadu_si128((const __m128i *)(s + n + i));

		_mm_storeu_si128((__m128i *)(d + 2 * i), _mm_unpacklo_epi8(lo, hi));
		_mm_storeu_si128((__m128i *)(d + 2 * i + 16), _mm_unpackhi_epi8(lo, hi));
	}
	return i;
}
#else
static size_t planes2_sse2(unsigned char *d, const unsigned char *s, size_t n)
{
	(void)d, (void)s, (void)n;
	return 0;
}

static size_t unplanes2_sse2(unsigned char *d, const unsigned char *s, size_t n)
{
	(void)d, (void)s, (void)n;
	return 0;
}
#endif

void kv_archive_shuffle(void *dst, const void *src, size_t len, unsigned width)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t n = width > 1 ? len / width : 0;

	if (width == 2) {
		for (size_t i = planes2_sse2(d, s, n); i < n; i++) {
			d[i] = s[2 * i];
			d[n + i] = s[2 * i + 1];
		}
	} else {
		for (unsigned b = 0; b < width && n; b++)
			for (size_t i = 0; i < n; i++)
				d[b * n + i] = s[i * width + b];
	}
	memcpy(d + n * width, s + n * width, len - n * width);
}

void kv_archive_unshuffle(void *dst, const void *src, size_t len, unsigned width)
{
	const unsigned char *s = src;
	unsigned char *d = dst;
	size_t n = width > 1 ? len / width : 0;

	if (width == 2) {
		for (size_t i = unplanes2_sse2(d, s, n); i < n; i++) {
			d[2 * i] = s[i];
			d[2 * i + 1] = s[n + i];
		}
	} else {
		for (unsigned b = 0; b < width && n; b++)
			for (size_t i = 0; i < n; i++)
				d[i * width + b] = s[b * n + i];
	}
	memcpy(d + n * width, s + n * width, len - n * width);
}

/* A record's content ends in the XXH3-64 of what precedes it. */
static int sum_ok(const unsigned char *c, size_t len)
{
	return kvi_get_le(c + len - SUM_BYTES, SUM_BYTES) == kv_xxh3(c, len - SUM_BYTES);
}

/* ref names a block path that parses back to ref itself, so an archive
 * never names a place outside the layout (no "..", no stray '/'). */
static int ref_ok(const struct kv_block_ref *ref)
{
	char path[PATH_MAX];
	struct kv_block_ref back;

	if (kv_layout_block_path_ref(ref, path, sizeof(path)) < 0 ||
	    kv_layout_block_parse(path, &back) < 0)
		return 0;
	return back.layout == ref->layout && back.rank == ref->rank &&
	       back.group == ref->group && !strcmp(back.hash, ref->hash) &&
	       !strcmp(back.model_dir, ref->model_dir) &&
	       (ref->layout != KV_LAYOUT_LLMD_V0 ||
		(!strcmp(back.dtype, ref->dtype) && back.group_dir == ref->group_dir));
}

/* Room for len bytes in a buffer that only grows. */
static int grow(void **buf, size_t *cap, size_t len)
{
	void *nb;

	if (*cap >= len && *buf)
		return 0;
	nb = realloc(*buf, len ? len : 1);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = len;
	return 0;
}

/* --- writer ------------------------------------------------------------ */

/* What the writer settled once per model dir (and llmd-v0 dtype). */
struct model {
	struct model *next;
	char model_dir[KV_NAME_MAX + 1];
	char dtype[KV_DTYPE_DIR_MAX + 1];
	unsigned width;		/* the dtype's bytes; 1 when unknown */
	int shuffle;		/* -1: not decided yet */
};

struct kv_archive_writer {
	int fd;
	int err;		/* a failed write ends the archive */
	enum kv_archive_shuffle shuffle;
	ZSTD_CStream *cs;
	uint64_t entries;
	struct model *models;
	void *planes, *out, *trial, *rec;
	size_t planes_cap, out_cap, trial_cap, rec_cap;
};

/* One record frame: magic, size, content (its checksum appended here). */
static int write_record(struct kv_archive_writer *w, unsigned char *content, size_t len)
{
	unsigned char head[FRAME_HEAD_BYTES];

	kvi_put_le(content + len - SUM_BYTES, kv_xxh3(content, len - SUM_BYTES), SUM_BYTES);
	kvi_put_le(kvi_put_le(head, SKIP_MAGIC, 4), len, 4);
	if (!w->err)
		w->err = kv_write_full(w->fd, head, sizeof(head));
	if (!w->err)
		w->err = kv_write_full(w->fd, content, len);
	return w->err;
}

int kv_archive_writer_open(int fd, const struct kv_archive_write_opts *opts,
			   struct kv_archive_writer **out)
{
	unsigned char head[HEADER_BYTES], *p;
	struct kv_archive_writer *w;
	int level = opts && opts->level ? opts->level : DEFAULT_LEVEL, ret;

	if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
		return kvi_fail(-EINVAL, "zstd level %d is outside %d..%d", level,
				ZSTD_minCLevel(), ZSTD_maxCLevel());
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->shuffle = opts ? opts->shuffle : KV_ARCHIVE_SHUFFLE_AUTO;
	w->cs = ZSTD_createCStream();
	if (!w->cs || ZSTD_isError(ZSTD_CCtx_setParameter(w->cs, ZSTD_c_compressionLevel,
							  level))) {
		kv_archive_writer_close(w);
		return -ENOMEM;
	}
	p = (unsigned char *)memcpy(head, TAG_HEADER, TAG_BYTES) + TAG_BYTES;
	p = kvi_put_le(p, KV_ARCHIVE_VERSION, 4);
	kvi_put_le(p, 0, 4);	/* flags: none defined in version 1 */
	ret = write_record(w, head, sizeof(head));
	if (ret < 0) {
		kv_archive_writer_close(w);
		return ret;
	}
	*out = w;
	return 0;
}

/* The model's width and shuffle memo; checks the config on first sight. */
static int model_of(struct kv_archive_writer *w, const struct kv_archive_entry *e,
		    struct model **out)
{
	const char *dtype = e->ref.dtype;
	char canon[KV_DTYPE_NAME_MAX], dir[KV_NAME_MAX + 1];
	struct kv_config *cfg = NULL;
	struct model *m;
	int ret = 0;

	for (m = w->models; m; m = m->next)
		if (!strcmp(m->model_dir, e->ref.model_dir) && !strcmp(m->dtype, e->ref.dtype)) {
			*out = m;
			return 0;
		}
	if (e->ref.layout == KV_LAYOUT_V1) {
		if (!e->config || e->config_len > CONFIG_MAX_BYTES)
			return kvi_fail(-KV_EBADCONFIG, "%s: %s", e->ref.model_dir,
					e->config ? "config.json larger than 1 MiB" :
						    "no config.json");
		ret = kv_config_parse(e->config, e->config_len, &cfg);
		if (ret < 0)
			return ret;
		ret = kv_config_model_dir(cfg, dir, sizeof(dir));
		if (ret == 0 && strcmp(dir, e->ref.model_dir))
			ret = kvi_fail(-KV_EFINGERPRINT, "config.json names '%s', not '%s'",
				       dir, e->ref.model_dir);
		dtype = ret == 0 ? kv_config_string(cfg, "dtype") : NULL;
	} else if (e->config) {
		return kvi_fail(-KV_EBADCONFIG, "an llmd-v0 block has no config.json");
	}
	m = dtype ? calloc(1, sizeof(*m)) : NULL;
	if (dtype && !m)
		ret = -ENOMEM;
	if (m) {
		strcpy(m->model_dir, e->ref.model_dir);
		strcpy(m->dtype, e->ref.dtype);
		m->width = 1;
		/* An unknown dtype is stored as it is. */
		kv_dtype_parse(dtype, canon, &m->width);
		m->shuffle = w->shuffle == KV_ARCHIVE_SHUFFLE_AUTO ? -1 :
			     w->shuffle == KV_ARCHIVE_SHUFFLE_ALWAYS;
		m->next = w->models;
		w->models = m;
		*out = m;
	}
	kv_config_free(cfg);
	return ret;
}

/* One zstd frame of src into *dst (grown): its size, or -errno. */
static int64_t compress(struct kv_archive_writer *w, const void *src, size_t len,
			void **dst, size_t *cap)
{
	ZSTD_outBuffer out;
	ZSTD_inBuffer in = { src, len, 0 };
	size_t r, bound = ZSTD_compressBound(len);

	if (grow(dst, cap, bound) < 0)
		return -ENOMEM;
	out = (ZSTD_outBuffer){ *dst, bound, 0 };
	ZSTD_CCtx_reset(w->cs, ZSTD_reset_session_only);
	ZSTD_CCtx_setPledgedSrcSize(w->cs, len);
	/* The bound is room for all of it: one call ends the frame. */
	r = ZSTD_compressStream2(w->cs, &out, &in, ZSTD_e_end);
	if (ZSTD_isError(r) || r != 0)
		return kvi_fail(-EIO, "zstd: %s", ZSTD_isError(r) ? ZSTD_getErrorName(r) :
			      "frame not ended");
	return (int64_t)out.pos;
}

/* The block's frame in w->out, shuffled as the model wants (deciding
 * that on its first block where it is ours to decide). */
static int64_t encode(struct kv_archive_writer *w, struct model *m, const void *data,
		      size_t len, unsigned *width)
{
	int64_t plain = 0, planes;

	*width = 1;
	if (m->width < 2 || m->shuffle == 0)
		return compress(w, data, len, &w->out, &w->out_cap);
	if (m->shuffle < 0 &&
	    (plain = compress(w, data, len, &w->trial, &w->trial_cap)) < 0)
		return plain;
	if (grow(&w->planes, &w->planes_cap, len) < 0)
		return -ENOMEM;
	kv_archive_shuffle(w->planes, data, len, m->width);
	planes = compress(w, w->planes, len, &w->out, &w->out_cap);
	if (planes < 0 || m->shuffle > 0) {
		*width = m->width;
		return planes;
	}
	m->shuffle = planes < plain;
	if (m->shuffle) {
		*width = m->width;
		return planes;
	}
	/* Plain won: it is in trial; swap it into out. */
	void *t = w->out;
	size_t c = w->out_cap;

	w->out = w->trial;
	w->out_cap = w->trial_cap;
	w->trial = t;
	w->trial_cap = c;
	return plain;
}

int kv_archive_write(struct kv_archive_writer *w, struct kv_archive_entry *e,
		     const void *data, size_t len)
{
	size_t hl = strlen(e->ref.hash), ml = strlen(e->ref.model_dir), dl = 0, rl;
	int v0 = e->ref.layout == KV_LAYOUT_LLMD_V0;
	unsigned char *p;
	struct model *m;
	int64_t stored;
	int ret;

	kvi_error_clear();
	if (w->err)
		return w->err;
	if (!ref_ok(&e->ref))
		return kvi_fail(-KV_EBADPATH, "not a block of the cache layout: '%s' '%s'",
				e->ref.model_dir, e->ref.hash);
	if (v0)
		dl = strlen(e->ref.dtype);
	ret = model_of(w, e, &m);
	if (ret < 0)
		return ret;
	stored = encode(w, m, data, len, &e->shuffle_bytes);
	if (stored < 0)
		return (int)stored;
	e->size_bytes = len;
	e->xxh3 = kv_xxh3(data, len);
	e->stored_bytes = (uint64_t)stored;
	rl = ENTRY_FIXED_BYTES + hl + ml + dl + (v0 ? 0 : e->config_len);
	if (grow(&w->rec, &w->rec_cap, rl) < 0)
		return -ENOMEM;
	p = (unsigned char *)memcpy(w->rec, TAG_ENTRY, TAG_BYTES) + TAG_BYTES;
	p = kvi_put_le(p, (v0 ? ENTRY_LLMD_V0 : 0) |
		   (v0 && e->ref.group_dir ? ENTRY_GROUP_DIR : 0), 4);
	p = kvi_put_le(p, e->ref.rank, 4);
	p = kvi_put_le(p, e->ref.group, 4);
	p = kvi_put_le(p, e->shuffle_bytes, 4);
	p = kvi_put_le(p, e->size_bytes, 8);
	p = kvi_put_le(p, e->stored_bytes, 8);
	p = kvi_put_le(p, e->xxh3, 8);
	p = (unsigned char *)memcpy(kvi_put_le(p, hl, 2), e->ref.hash, hl) + hl;
	p = (unsigned char *)memcpy(kvi_put_le(p, ml, 2), e->ref.model_dir, ml) + ml;
	p = (unsigned char *)memcpy(kvi_put_le(p, dl, 2), e->ref.dtype, dl) + dl;
	p = kvi_put_le(p, v0 ? 0 : e->config_len, 4);
	if (!v0)
		memcpy(p, e->config, e->config_len);
	ret = write_record(w, w->rec, rl);
	if (ret == 0)
		ret = w->err = kv_write_full(w->fd, w->out, (size_t)stored);
	if (ret == 0)
		w->entries++;
	return ret;
}

int kv_archive_writer_finish(struct kv_archive_writer *w)
{
	unsigned char end[END_BYTES];

	kvi_put_le((unsigned char *)memcpy(end, TAG_END, TAG_BYTES) + TAG_BYTES, w->entries, 8);
	return write_record(w, end, sizeof(end));
}

void kv_archive_writer_close(struct kv_archive_writer *w)
{
	struct model *m;

	if (!w)
		return;
	while ((m = w->models)) {
		w->models = m->next;
		free(m);
	}
	ZSTD_freeCStream(w->cs);
	free(w->planes);
	free(w->out);
	free(w->trial);
	free(w->rec);
	free(w);
}

/* --- reader ------------------------------------------------------------ */

struct kv_archive_reader {
	int fd;
	uint64_t max_block;
	unsigned char *buf;	/* input read ahead: [start, end) */
	size_t cap, start, end;
	int eof;
	uint64_t pos;		/* archive offset of buf[start] */
	ZSTD_DStream *ds;
	void *scratch;		/* shuffled data on its way to the caller */
	size_t scratch_cap;
	unsigned char *rec;	/* the current entry's record; e's strings */
	size_t rec_cap;
	struct kv_archive_entry cur;
	int have_data;		/* the current entry's data is next */
	int rescan;		/* the last record failed: scan for the next */
	int fatal;		/* a cut stream or read error, said again */
	int ended;
	uint64_t entries;	/* entry records read */
	uint64_t refused;	/* records that failed their checks */
};

/* At least n bytes at buf[start]: 0, -KV_ESHORT at the end of input. */
static int need(struct kv_archive_reader *r, size_t n)
{
	while (r->end - r->start < n) {
		ssize_t got;

		if (r->eof)
			return -KV_ESHORT;
		if (r->start && r->cap - r->start < n + READ_CHUNK_BYTES) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->start = 0;
		}
		if (r->cap - r->end < READ_CHUNK_BYTES) {
			size_t ncap = r->cap ? r->cap * 2 : 2 * READ_CHUNK_BYTES;

			while (ncap - r->end < READ_CHUNK_BYTES)
				ncap *= 2;
			if (grow((void **)&r->buf, &r->cap, ncap) < 0)
				return -ENOMEM;
		}
		got = read(r->fd, r->buf + r->end, r->cap - r->end);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		r->eof = got == 0;
		r->end += (size_t)got;
	}
	return 0;
}

static void consume(struct kv_archive_reader *r, size_t n)
{
	r->start += n;
	r->pos += n;
}

/* Skip n bytes of input: 0, or -KV_ESHORT / -errno. */
static int skip(struct kv_archive_reader *r, uint64_t n)
{
	while (n) {
		size_t have = r->end - r->start;
		int ret;

		if (!have && (ret = need(r, 1)) < 0)
			return ret;
		have = r->end - r->start;
		if (have > n)
			have = (size_t)n;
		consume(r, have);
		n -= have;
	}
	return 0;
}

/* A failure that ends the archive: said now and for every later call. */
static int fatal(struct kv_archive_reader *r, int err, const char *what)
{
	if (err == -KV_ESHORT)
		err = kvi_fail(-KV_ESHORT, "archive cut short at byte %llu%s%s: no end record",
			       (unsigned long long)(r->pos + (r->end - r->start)),
			       *what ? ", inside " : "", what);
	else if (err != -ENOMEM)
		err = kvi_fail(err, "cannot read the archive: %s", strerror(-err));
	r->fatal = err;
	return err;
}

struct cursor {
	const unsigned char *p, *end;
	int short_;		/* a field ran past the end */
};

static uint64_t take(struct cursor *c, int bytes)
{
	uint64_t v;

	if (c->end - c->p < bytes) {
		c->short_ = 1;
		return 0;
	}
	v = kvi_get_le(c->p, bytes);
	c->p += bytes;
	return v;
}

/* A string field of at most max bytes, no NUL in it, into out. */
static int take_str(struct cursor *c, size_t len, size_t max, char *out)
{
	if (len > max || (size_t)(c->end - c->p) < len || memchr(c->p, 0, len)) {
		c->short_ = 1;
		return -1;
	}
	memcpy(out, c->p, len);
	out[len] = '\0';
	c->p += len;
	return 0;
}

/*
 * The entry record content c[0..len) into e, every field bounded before
 * the checksum is looked at, so an oversized claim is named as such
 * rather than as damage: 0, -EFBIG, -KV_EPROTO (detail set).
 */
static int parse_entry(struct kv_archive_reader *r, const unsigned char *c, size_t len,
		       struct kv_archive_entry *e)
{
	struct cursor k = { c + TAG_BYTES, c + len - SUM_BYTES, 0 };
	unsigned flags, hl, ml, dl;
	uint64_t cl;
	char size[32], limit[32], dir[KV_NAME_MAX + 1] = "";

	memset(e, 0, sizeof(*e));
	e->offset = r->pos;
	flags = (unsigned)take(&k, 4);
	e->ref.rank = (unsigned)take(&k, 4);
	e->ref.group = (unsigned)take(&k, 4);
	e->shuffle_bytes = (unsigned)take(&k, 4);
	e->size_bytes = take(&k, 8);
	e->stored_bytes = take(&k, 8);
	e->xxh3 = take(&k, 8);
	hl = (unsigned)take(&k, 2);
	take_str(&k, hl, KV_HASH_MAX_LEN, e->ref.hash);
	ml = (unsigned)take(&k, 2);
	take_str(&k, ml, KV_NAME_MAX, dir);
	strcpy(e->ref.model_dir, dir);
	dl = (unsigned)take(&k, 2);
	take_str(&k, dl, KV_DTYPE_DIR_MAX, e->ref.dtype);
	cl = take(&k, 4);
	if (k.short_ || cl != (uint64_t)(k.end - k.p))
		return kvi_fail(-KV_EPROTO, "entry at byte %llu: its fields do not fill its record",
				(unsigned long long)e->offset);
	e->config = cl ? (const char *)k.p : NULL;
	e->config_len = (size_t)cl;
	if (e->size_bytes > r->max_block) {
		kv_size_format(e->size_bytes, size, sizeof(size));
		kv_size_format(r->max_block, limit, sizeof(limit));
		return kvi_fail(-EFBIG, "entry at byte %llu (%s) declares a block of %llu "
				"bytes (%s), more than the %s allowed",
				(unsigned long long)e->offset, e->ref.hash,
				(unsigned long long)e->size_bytes, size, limit);
	}
	e->ref.layout = flags & ENTRY_LLMD_V0 ? KV_LAYOUT_LLMD_V0 : KV_LAYOUT_V1;
	e->ref.group_dir = !!(flags & ENTRY_GROUP_DIR);
	if ((flags & ~ENTRY_FLAGS_KNOWN) || !e->shuffle_bytes ||
	    e->shuffle_bytes > SHUFFLE_MAX || !e->stored_bytes ||
	    e->stored_bytes > ZSTD_compressBound((size_t)e->size_bytes) ||
	    (e->ref.layout == KV_LAYOUT_V1 ? dl || !cl ||
	     kv_layout_model_dir_parse(dir, &e->ref) < 0 : cl != 0) ||
	    !ref_ok(&e->ref))
		return kvi_fail(-KV_EPROTO, "entry at byte %llu: malformed record",
				(unsigned long long)e->offset);
	return 0;
}

/*
 * The record at buf[start], checked, without consuming it: 0 with its
 * content length in *len (an entry parsed into e); -KV_ESHORT when the
 * input ends inside it; -KV_EPROTO / -EFBIG with the detail.
 */
static int check_record(struct kv_archive_reader *r, size_t *len, struct kv_archive_entry *e)
{
	const unsigned char *c;
	uint64_t size;
	int ret;

	ret = need(r, FRAME_HEAD_BYTES);
	if (ret < 0)
		return ret;
	c = r->buf + r->start;
	size = kvi_get_le(c + 4, 4);
	if (kvi_get_le(c, 4) != SKIP_MAGIC)
		return kvi_fail(-KV_EPROTO, "byte %llu: not an archive record",
				(unsigned long long)r->pos);
	if (size < TAG_BYTES + SUM_BYTES || size > RECORD_MAX_BYTES)
		return kvi_fail(-KV_EPROTO, "record at byte %llu declares %llu bytes, outside "
				"%d..%d", (unsigned long long)r->pos, (unsigned long long)size,
				TAG_BYTES + SUM_BYTES, (int)RECORD_MAX_BYTES);
	ret = need(r, FRAME_HEAD_BYTES + (size_t)size);
	if (ret < 0)
		return ret;
	c = r->buf + r->start + FRAME_HEAD_BYTES;
	*len = (size_t)size;
	if (!memcmp(c, TAG_ENTRY, TAG_BYTES)) {
		if (size < ENTRY_FIXED_BYTES)
			return kvi_fail(-KV_EPROTO, "entry at byte %llu: record too short",
					(unsigned long long)r->pos);
		ret = parse_entry(r, c, (size_t)size, e);
	} else if (!memcmp(c, TAG_END, TAG_BYTES)) {
		ret = size == END_BYTES ? 0 : kvi_fail(-KV_EPROTO, "byte %llu: malformed end record",
						     (unsigned long long)r->pos);
	} else {
		/* Headers come first only; other tags are not version 1. */
		ret = kvi_fail(-KV_EPROTO, "byte %llu: unknown record", (unsigned long long)r->pos);
	}
	if (ret == 0 && !sum_ok(c, (size_t)size))
		ret = kvi_fail(-KV_EPROTO, "record at byte %llu: checksum mismatch (damaged)",
			       (unsigned long long)r->pos);
	return ret;
}

/* After a record that failed: on to the next byte offset holding one
 * that passes.  0 there, or -KV_ESHORT / -errno. */
static int rescan(struct kv_archive_reader *r)
{
	static const unsigned char magic[4] = { 0x5b, 0x2a, 0x4d, 0x18 };
	struct kv_archive_entry e;
	size_t len;
	int ret;

	consume(r, 1);
	for (;;) {
		unsigned char *hit = memmem(r->buf + r->start, r->end - r->start, magic, 4);

		if (!hit) {
			/* Keep a partial magic at the end for the next read. */
			size_t keep = r->end - r->start < 3 ? r->end - r->start : 3;

			consume(r, r->end - r->start - keep);
			if (r->eof)
				return -KV_ESHORT;
			ret = need(r, keep + 1);
			if (ret < 0 && ret != -KV_ESHORT)
				return ret;
			continue;
		}
		consume(r, (size_t)(hit - (r->buf + r->start)));
		ret = check_record(r, &len, &e);
		if (ret == 0)
			return 0;
		if (ret != -KV_EPROTO && ret != -EFBIG && ret != -KV_ESHORT)
			return ret;
		consume(r, 1);
	}
}

int kv_archive_reader_open(int fd, const struct kv_archive_read_opts *opts,
			   struct kv_archive_reader **out)
{
	struct kv_archive_reader *r;
	const unsigned char *c;
	uint64_t version;
	int ret;

	kvi_error_clear();
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->fd = fd;
	r->max_block = opts && opts->max_block_bytes ? opts->max_block_bytes : DEFAULT_MAX_BLOCK;
	r->ds = ZSTD_createDStream();
	ret = r->ds ? need(r, FRAME_HEAD_BYTES + HEADER_BYTES) : -ENOMEM;
	if (ret == -KV_ESHORT)
		ret = kvi_fail(-KV_ESHORT, r->end == 0 ? "empty input: not an archive" :
			       "input of %zu bytes: too short for an archive", r->end);
	c = r->buf + FRAME_HEAD_BYTES;
	if (ret == 0 && (kvi_get_le(r->buf, 4) != SKIP_MAGIC || memcmp(c, TAG_HEADER, TAG_BYTES)))
		ret = kvi_fail(-KV_EPROTO, "not a kvtools archive");
	/* The version sits right after the tag in every version. */
	version = ret == 0 ? kvi_get_le(c + TAG_BYTES, 4) : 0;
	if (ret == 0 && version != KV_ARCHIVE_VERSION)
		ret = kvi_fail(-EPROTONOSUPPORT, "archive version %llu; this libkv reads "
			       "version %d", (unsigned long long)version, KV_ARCHIVE_VERSION);
	if (ret == 0 && (kvi_get_le(r->buf + 4, 4) != HEADER_BYTES || !sum_ok(c, HEADER_BYTES) ||
			 kvi_get_le(c + TAG_BYTES + 4, 4) != 0))
		ret = kvi_fail(-KV_EPROTO, "damaged archive header");
	if (ret < 0) {
		kv_archive_reader_close(r);
		return ret;
	}
	consume(r, FRAME_HEAD_BYTES + HEADER_BYTES);
	*out = r;
	return 0;
}

int kv_archive_next(struct kv_archive_reader *r, struct kv_archive_entry *e)
{
	size_t len;
	int ret;

	kvi_error_clear();
	if (r->fatal)
		return kvi_fail(r->fatal, "%s", "archive already failed");
	if (r->ended)
		return 0;
	if (r->have_data) {
		r->have_data = 0;
		ret = skip(r, r->cur.stored_bytes);
		if (ret < 0)
			return fatal(r, ret, r->cur.ref.hash);
	}
	if (r->rescan) {
		r->rescan = 0;
		ret = rescan(r);
		if (ret < 0)
			return fatal(r, ret, "");
	}
	ret = check_record(r, &len, &r->cur);
	if (ret == -KV_ESHORT)
		return fatal(r, ret, r->end > r->start ? "a record" : "");
	if (ret < 0) {
		r->rescan = 1;
		r->refused++;
		return ret;
	}
	if (!memcmp(r->buf + r->start + FRAME_HEAD_BYTES, TAG_END, TAG_BYTES)) {
		uint64_t n = kvi_get_le(r->buf + r->start + FRAME_HEAD_BYTES + TAG_BYTES, 8);

		consume(r, FRAME_HEAD_BYTES + len);
		r->ended = 1;
		/* Entries lost without a trace: a piece cut out of the stream. */
		if (n != r->entries + r->refused)
			return kvi_fail(-KV_EPROTO, "the archive's end counts %llu entries, but "
					"%llu were found", (unsigned long long)n,
					(unsigned long long)(r->entries + r->refused));
		return 0;
	}
	/* Keep the record: e's strings and config point into it. */
	if (grow((void **)&r->rec, &r->rec_cap, len) < 0)
		return fatal(r, -ENOMEM, "");
	memcpy(r->rec, r->buf + r->start + FRAME_HEAD_BYTES, len);
	if (r->cur.config)
		r->cur.config = (const char *)r->rec +
				((const unsigned char *)r->cur.config -
				 (r->buf + r->start + FRAME_HEAD_BYTES));
	consume(r, FRAME_HEAD_BYTES + len);
	r->entries++;
	r->have_data = 1;
	*e = r->cur;
	return 1;
}

/* Decompress the current frame into dst (size_bytes): 0, -KV_ECHECKSUM
 * (detail set; the rest of the frame still to skip), -KV_ESHORT/-errno. */
static int inflate(struct kv_archive_reader *r, void *dst, uint64_t *left)
{
	const struct kv_archive_entry *e = &r->cur;
	ZSTD_outBuffer out = { dst, (size_t)e->size_bytes, 0 };
	size_t z = 1;
	int ret;

	ZSTD_DCtx_reset(r->ds, ZSTD_reset_session_only);
	while (*left) {
		ZSTD_inBuffer in;

		if (r->end == r->start && (ret = need(r, 1)) < 0)
			return ret;
		in = (ZSTD_inBuffer){ r->buf + r->start,
				      r->end - r->start < *left ? r->end - r->start :
								  (size_t)*left, 0 };
		z = ZSTD_decompressStream(r->ds, &out, &in);
		consume(r, in.pos);
		*left -= in.pos;
		if (ZSTD_isError(z))
			return kvi_fail(-KV_ECHECKSUM, "entry at byte %llu (%s): %s",
					(unsigned long long)e->offset, e->ref.hash,
					ZSTD_getErrorName(z));
		if ((z == 0 && *left) || (in.pos == 0 && out.pos == out.size))
			return kvi_fail(-KV_ECHECKSUM, "entry at byte %llu (%s): its frame holds "
					"more than the record says", (unsigned long long)e->offset,
					e->ref.hash);
	}
	if (z != 0 || out.pos != out.size)
		return kvi_fail(-KV_ECHECKSUM, "entry at byte %llu (%s): its frame holds less "
				"than the record says", (unsigned long long)e->offset, e->ref.hash);
	return 0;
}

int kv_archive_data(struct kv_archive_reader *r, void *buf, size_t cap)
{
	const struct kv_archive_entry *e = &r->cur;
	uint64_t left = e->stored_bytes;
	void *dst = buf;
	int ret;

	kvi_error_clear();
	if (r->fatal)
		return kvi_fail(r->fatal, "%s", "archive already failed");
	if (!r->have_data || cap < e->size_bytes)
		return -EINVAL;
	r->have_data = 0;
	if (e->shuffle_bytes > 1) {
		if (grow(&r->scratch, &r->scratch_cap, (size_t)e->size_bytes) < 0)
			return -ENOMEM;
		dst = r->scratch;
	}
	ret = inflate(r, dst, &left);
	if (ret == -KV_ECHECKSUM) {
		/* The detail stands: skipping sets none unless it fails. */
		int sret = skip(r, left);

		if (sret < 0)
			return fatal(r, sret, e->ref.hash);
		return ret;
	}
	if (ret < 0)
		return fatal(r, ret, e->ref.hash);
	if (dst != buf)
		kv_archive_unshuffle(buf, dst, (size_t)e->size_bytes, e->shuffle_bytes);
	if (kv_xxh3(buf, (size_t)e->size_bytes) != e->xxh3)
		return kvi_fail(-KV_ECHECKSUM, "entry at byte %llu (%s): checksum mismatch",
				(unsigned long long)e->offset, e->ref.hash);
	return 0;
}

void kv_archive_reader_close(struct kv_archive_reader *r)
{
	if (!r)
		return;
	ZSTD_freeDStream(r->ds);
	free(r->buf);
	free(r->scratch);
	free(r->rec);
	free(r);
}
