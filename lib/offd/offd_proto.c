/*
 * kvoffd frames: fixed-size, little-endian, versioned.  Decoding accepts
 * any bytes and rejects everything that is not exactly a frame this
 * version writes, so the daemon can close a confused peer early.
 *
 *   0 magic u32   4 version u16   6 type u16   8 status i32   12 slot u32
 *  16 rank u32   20 group u32    24 len u64   32 arg u64
 *  40 model_len u16   42 hash_len u16   44 reserved u32 (zero)
 *  48 body: key frames  model_dir[256] hash[128], zero to the end;
 *           COMMIT requests and LOOKUP replies: the block's xxh3 at 432;
 *           BATCH requests of keyed ops the same with no hash;
 *           stats frames u64 x KV_OFFD_STATS_COUNT, tier stats frames
 *           u64 x KV_OFFD_TIER_STATS_COUNT, zero to the end.
 *
 * A BATCH frame's payload follows it on the stream: entries of a fixed
 * stride (batch_stride), or in the reply KV_OFFD_RESULT_BYTES results.
 */
#include <errno.h>
#include <string.h>
#include <kv/errors.h>
#include <kv/offd.h>

#define OFF_MAGIC	0
#define OFF_VERSION	4
#define OFF_TYPE	6
#define OFF_STATUS	8
#define OFF_SLOT	12
#define OFF_RANK	16
#define OFF_GROUP	20
#define OFF_LEN		24
#define OFF_ARG		32
#define OFF_MODEL_LEN	40
#define OFF_HASH_LEN	42
#define OFF_RESERVED	44
#define OFF_BODY	48
#define OFF_MODEL	OFF_BODY
#define MODEL_FIELD	256
#define OFF_HASH	(OFF_MODEL + MODEL_FIELD)
#define HASH_FIELD	128
#define KEY_END		(OFF_HASH + HASH_FIELD)
#define OFF_SUM		KEY_END

_Static_assert(KV_OFFD_MODEL_MAX < MODEL_FIELD + 1, "model field too small");
_Static_assert(KV_OFFD_HASH_MAX <= HASH_FIELD, "hash field too small");
_Static_assert(KEY_END <= KV_OFFD_FRAME_BYTES, "key body overflows frame");
_Static_assert(OFF_BODY + 8 * KV_OFFD_STATS_COUNT <= KV_OFFD_FRAME_BYTES,
	       "stats body overflows frame");
_Static_assert(OFF_BODY + 8 * KV_OFFD_TIER_STATS_COUNT <= KV_OFFD_FRAME_BYTES,
	       "tier stats body overflows frame");

/* Which fields a frame type carries; everything else must be zero. */
enum {
	F_STATUS = 1 << 0,
	F_SLOT = 1 << 1,
	F_KEY = 1 << 2,
	F_LEN = 1 << 3,
	F_ARG = 1 << 4,
	F_STATS = 1 << 5,
	F_MODEL = 1 << 6,	/* model_dir, rank, group; no hash */
	F_SUM = 1 << 7,
};

static const struct {
	unsigned request;	/* 0: clients never send it */
	unsigned reply;
} fields[KV_OFFD_TYPE_MAX] = {
	[KV_OFFD_HELLO] = { 0, F_STATUS | F_SLOT | F_LEN | F_ARG },
	[KV_OFFD_ALLOC] = { F_KEY | F_LEN, F_STATUS | F_SLOT | F_LEN | F_ARG },
	[KV_OFFD_COMMIT] = { F_SLOT | F_ARG | F_SUM, F_STATUS | F_SLOT },
	[KV_OFFD_ABORT] = { F_SLOT, F_STATUS | F_SLOT },
	[KV_OFFD_LOOKUP] = { F_KEY, F_STATUS | F_SLOT | F_LEN | F_ARG | F_SUM },
	[KV_OFFD_RELEASE] = { F_SLOT | F_ARG, F_STATUS | F_SLOT },
	[KV_OFFD_HAS] = { F_KEY, F_STATUS | F_ARG },
	[KV_OFFD_STATS] = { F_ARG, F_STATUS | F_STATS },
	[KV_OFFD_LIST] = { F_ARG, F_STATUS | F_SLOT | F_KEY | F_LEN | F_ARG },
	[KV_OFFD_BATCH] = { F_MODEL | F_LEN | F_ARG, F_STATUS | F_LEN | F_ARG },
	[KV_OFFD_TIER_STATS] = { F_ARG, F_STATUS | F_STATS },
	[KV_OFFD_CONFIG] = { F_MODEL | F_LEN, F_STATUS },
};

static const char *const stats_names[] = {
	"pool_bytes", "slot_bytes", "slots", "slots_used", "pool_bytes_used",
	"blocks", "block_bytes", "dirty_blocks", "pins", "clients", "hits",
	"misses", "puts", "put_bytes", "gets", "get_bytes", "spills",
	"spill_bytes", "readthroughs", "readthrough_bytes", "evictions",
	"wb_queue_depth", "wb_queue_capacity", "wb_drops", "wb_errors",
	"disk_blocks", "disk_bytes", "refused", "protocol_errors", "accept_errors",
	"alloc_refused", "allocs_reclaimed", "altered", "hugepages",
	"uptime_ns", "pid", "pins_revoked", "pins_refused",
};

_Static_assert(sizeof(stats_names) / sizeof(stats_names[0]) == KV_OFFD_STATS_COUNT,
	       "a stats member without a name");

const char *kv_offd_stats_name(size_t i)
{
	return i < KV_OFFD_STATS_COUNT ? stats_names[i] : NULL;
}

/* Member i of a struct of count uint64_t members; 0 past the end. */
static uint64_t member(const void *st, size_t count, size_t i)
{
	uint64_t v = 0;

	if (i < count)
		memcpy(&v, (const char *)st + i * sizeof(uint64_t), sizeof(v));
	return v;
}

uint64_t kv_offd_stats_value(const struct kv_offd_stats *st, size_t i)
{
	return member(st, KV_OFFD_STATS_COUNT, i);
}

static const char *const tier_stats_names[] = {
	"tier", "kind", "capacity_bytes", "blocks", "bytes", "hits", "misses",
	"read_bytes", "writes", "write_bytes", "promotions", "demotions", "drops",
	"errors",
};

_Static_assert(sizeof(tier_stats_names) / sizeof(tier_stats_names[0]) ==
	       KV_OFFD_TIER_STATS_COUNT, "a tier stats member without a name");

const char *kv_offd_tier_stats_name(size_t i)
{
	return i < KV_OFFD_TIER_STATS_COUNT ? tier_stats_names[i] : NULL;
}

uint64_t kv_offd_tier_stats_value(const struct kv_offd_tier_stats *st, size_t i)
{
	return member(st, KV_OFFD_TIER_STATS_COUNT, i);
}

/* A stats frame's body: the struct its type carries, as u64s. */
static uint64_t *stats_body(struct kv_offd_frame *f, size_t *count)
{
	if ((f->type & ~KV_OFFD_REPLY) == KV_OFFD_TIER_STATS) {
		*count = KV_OFFD_TIER_STATS_COUNT;
		return (uint64_t *)&f->tier_stats;
	}
	*count = KV_OFFD_STATS_COUNT;
	return (uint64_t *)&f->stats;
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* A model dir name: printable ASCII, no '/' or '\\', not "." or "..". */
static int model_ok(const char *s, size_t n)
{
	if (n == 0 || n > KV_OFFD_MODEL_MAX)
		return 0;
	if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch <= 0x20 || ch >= 0x7f || ch == '/' || ch == '\\')
			return 0;
	}
	return 1;
}

static int hash_ok(const char *s, size_t n)
{
	if (n < KV_HASH_MIN_LEN || n > KV_OFFD_HASH_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

static int all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static unsigned fields_of(unsigned type)
{
	unsigned base = type & ~KV_OFFD_REPLY;

	if (base == 0 || base >= KV_OFFD_TYPE_MAX || (type & 0xff00))
		return 0;
	return type & KV_OFFD_REPLY ? fields[base].reply : fields[base].request;
}

static int status_ok(int32_t status)
{
	return status <= 0 && status > -KV_ERRMAX;
}

/* Replies that failed carry only their status. */
static int has_key(unsigned mask, const struct kv_offd_frame *f)
{
	return (mask & F_KEY) && !((f->type & KV_OFFD_REPLY) && f->status);
}

static unsigned batch_op(const struct kv_offd_frame *f)
{
	return (unsigned)(f->arg & 0xff);
}

static size_t batch_hash_len(const struct kv_offd_frame *f)
{
	return (size_t)(f->arg >> 8 & 0xff);
}

/* A COMMIT's flags and sum: KV_OFFD_COMMIT_SUM or none (then no sum). */
static int commit_ok(uint64_t flags, uint64_t sum)
{
	return flags == KV_OFFD_COMMIT_SUM || (!flags && !sum);
}

/* Whether a frame's arg and sum are ones its type takes. */
static int arg_ok(const struct kv_offd_frame *f)
{
	switch (f->type) {
	case KV_OFFD_COMMIT:
		return commit_ok(f->arg, f->sum);
	case KV_OFFD_RELEASE:
		return f->arg <= KV_OFFD_RELEASE_ALTERED;
	}
	return 1;
}

static int batch_keyed(unsigned op)
{
	return op == KV_OFFD_HAS || op == KV_OFFD_LOOKUP || op == KV_OFFD_ALLOC;
}

/* Bytes of one request entry. */
static size_t batch_stride(const struct kv_offd_frame *f)
{
	switch (batch_op(f)) {
	case KV_OFFD_HAS:
	case KV_OFFD_LOOKUP:
		return batch_hash_len(f);
	case KV_OFFD_ALLOC:
		return 8 + batch_hash_len(f);
	case KV_OFFD_COMMIT:
		return 16;	/* slot, flags, xxh3 */
	case KV_OFFD_RELEASE:
		return 8;	/* slot, flags */
	default:
		return 4;
	}
}

/* A BATCH head: a batchable op, 1 to KV_OFFD_BATCH_MAX entries, and a
 * model dir and hash length exactly when the op is keyed. */
static int batch_head_ok(const struct kv_offd_frame *f, size_t ml)
{
	unsigned op = batch_op(f);
	size_t hl = batch_hash_len(f);

	if ((f->type & KV_OFFD_REPLY) && f->status)
		return !f->len && !f->arg;
	if (f->arg >> 16 || f->len == 0 || f->len > KV_OFFD_BATCH_MAX)
		return 0;
	if (f->type & KV_OFFD_REPLY)
		return op == KV_OFFD_HAS || op == KV_OFFD_LOOKUP || op == KV_OFFD_ALLOC ||
		       op == KV_OFFD_COMMIT || op == KV_OFFD_ABORT || op == KV_OFFD_RELEASE;
	if (batch_keyed(op))
		return ml && hl >= KV_HASH_MIN_LEN && hl <= KV_OFFD_HASH_MAX;
	return (op == KV_OFFD_COMMIT || op == KV_OFFD_ABORT || op == KV_OFFD_RELEASE) &&
	       !ml && !hl && !f->rank && !f->group;
}

/* A CONFIG: a model dir and 1 to KV_OFFD_CONFIG_MAX bytes of text. */
static int config_head_ok(const struct kv_offd_frame *f, size_t ml)
{
	return (f->type & KV_OFFD_REPLY) ||
	       (ml && f->len && f->len <= KV_OFFD_CONFIG_MAX && !f->rank && !f->group);
}

size_t kv_offd_batch_bytes(const struct kv_offd_frame *f)
{
	if (f->type == KV_OFFD_CONFIG)
		return (size_t)f->len;
	if (f->type == KV_OFFD_BATCH)
		return (size_t)f->len * batch_stride(f);
	if (f->type == (KV_OFFD_BATCH | KV_OFFD_REPLY) && !f->status)
		return (size_t)f->len * KV_OFFD_RESULT_BYTES;
	return 0;
}

int kv_offd_batch_decode(const struct kv_offd_frame *f, const void *payload,
			 size_t i, struct kv_offd_batch_entry *e)
{
	const unsigned char *p = (const unsigned char *)payload + i * batch_stride(f);
	size_t hl = batch_hash_len(f);

	if (f->type != KV_OFFD_BATCH || i >= f->len)
		return -KV_EPROTO;
	/* Field by field, not a memset: the daemon decodes thousands. */
	e->len = 0;
	e->slot = 0;
	e->flags = 0;
	e->sum = 0;
	e->hash[0] = '\0';
	if (batch_op(f) == KV_OFFD_COMMIT) {
		e->slot = get32(p);
		e->flags = get32(p + 4);
		e->sum = get64(p + 8);
		return commit_ok(e->flags, e->sum) ? 0 : -KV_EPROTO;
	}
	if (batch_op(f) == KV_OFFD_RELEASE) {
		e->slot = get32(p);
		e->flags = get32(p + 4);
		return e->flags <= KV_OFFD_RELEASE_ALTERED ? 0 : -KV_EPROTO;
	}
	if (!batch_keyed(batch_op(f))) {
		e->slot = get32(p);
		return 0;
	}
	if (batch_op(f) == KV_OFFD_ALLOC) {
		e->len = get64(p);
		p += 8;
	}
	if (!hash_ok((const char *)p, hl))
		return -KV_EPROTO;
	memcpy(e->hash, p, hl);
	e->hash[hl] = '\0';
	return 0;
}

int kv_offd_batch_encode(const struct kv_offd_frame *f, void *payload,
			 size_t i, const struct kv_offd_batch_entry *e)
{
	unsigned char *p = (unsigned char *)payload + i * batch_stride(f);
	size_t hl = batch_hash_len(f);

	if (f->type != KV_OFFD_BATCH || i >= f->len)
		return -KV_EPROTO;
	if (batch_op(f) == KV_OFFD_COMMIT) {
		if (!commit_ok(e->flags, e->sum))
			return -KV_EPROTO;
		put32(p, e->slot);
		put32(p + 4, e->flags);
		put64(p + 8, e->sum);
		return 0;
	}
	if (batch_op(f) == KV_OFFD_RELEASE) {
		if (e->flags > KV_OFFD_RELEASE_ALTERED)
			return -KV_EPROTO;
		put32(p, e->slot);
		put32(p + 4, e->flags);
		return 0;
	}
	if (!batch_keyed(batch_op(f))) {
		put32(p, e->slot);
		return 0;
	}
	if (strnlen(e->hash, sizeof(e->hash)) != hl || !hash_ok(e->hash, hl))
		return -KV_EPROTO;
	if (batch_op(f) == KV_OFFD_ALLOC) {
		put64(p, e->len);
		p += 8;
	}
	memcpy(p, e->hash, hl);
	return 0;
}

/* A failed entry carries its status alone. */
static int result_ok(const struct kv_offd_result *r)
{
	return status_ok(r->status) &&
	       (!r->status || (!r->slot && !r->len && !r->offset && !r->sum));
}

int kv_offd_result_decode(const void *payload, size_t i, struct kv_offd_result *r)
{
	const unsigned char *p = (const unsigned char *)payload + i * KV_OFFD_RESULT_BYTES;
	struct kv_offd_result v = {
		.status = (int32_t)get32(p), .slot = get32(p + 4),
		.len = get64(p + 8), .offset = get64(p + 16), .sum = get64(p + 24),
	};

	if (!result_ok(&v))
		return -KV_EPROTO;
	*r = v;
	return 0;
}

int kv_offd_result_encode(void *payload, size_t i, const struct kv_offd_result *r)
{
	unsigned char *p = (unsigned char *)payload + i * KV_OFFD_RESULT_BYTES;

	if (!result_ok(r))
		return -KV_EPROTO;
	put32(p, (uint32_t)r->status);
	put32(p + 4, r->slot);
	put64(p + 8, r->len);
	put64(p + 16, r->offset);
	put64(p + 24, r->sum);
	return 0;
}

int kv_offd_frame_encode(const struct kv_offd_frame *f, void *buf, size_t len)
{
	unsigned char *p = buf;
	unsigned mask = fields_of(f->type);
	size_t ml = strnlen(f->model_dir, sizeof(f->model_dir));
	size_t hl = strnlen(f->hash, sizeof(f->hash));

	if (len < KV_OFFD_FRAME_BYTES || !mask)
		return -KV_EPROTO;
	if ((!(mask & F_STATUS) && f->status) || !status_ok(f->status) ||
	    (!(mask & F_SLOT) && f->slot) || (!(mask & F_LEN) && f->len) ||
	    (!(mask & F_ARG) && f->arg) || (!(mask & F_SUM) && f->sum) || !arg_ok(f) ||
	    ((f->type & KV_OFFD_REPLY) && f->status && f->sum))
		return -KV_EPROTO;
	if (has_key(mask, f)) {
		if (!model_ok(f->model_dir, ml) || !hash_ok(f->hash, hl))
			return -KV_EPROTO;
	} else if (mask & F_MODEL) {
		if ((ml && !model_ok(f->model_dir, ml)) || hl)
			return -KV_EPROTO;
	} else if (ml || hl || f->rank || f->group) {
		return -KV_EPROTO;
	}
	if (((f->type & ~KV_OFFD_REPLY) == KV_OFFD_BATCH && !batch_head_ok(f, ml)) ||
	    ((f->type & ~KV_OFFD_REPLY) == KV_OFFD_CONFIG && !config_head_ok(f, ml)))
		return -KV_EPROTO;
	memset(p, 0, KV_OFFD_FRAME_BYTES);
	put32(p + OFF_MAGIC, KV_OFFD_MAGIC);
	put16(p + OFF_VERSION, KV_OFFD_VERSION);
	put16(p + OFF_TYPE, f->type);
	put32(p + OFF_STATUS, (uint32_t)f->status);
	put32(p + OFF_SLOT, f->slot);
	put32(p + OFF_RANK, f->rank);
	put32(p + OFF_GROUP, f->group);
	put64(p + OFF_LEN, f->len);
	put64(p + OFF_ARG, f->arg);
	put16(p + OFF_MODEL_LEN, (uint16_t)ml);
	put16(p + OFF_HASH_LEN, (uint16_t)hl);
	memcpy(p + OFF_MODEL, f->model_dir, ml);
	memcpy(p + OFF_HASH, f->hash, hl);
	if (mask & F_SUM)
		put64(p + OFF_SUM, f->sum);
	if ((mask & F_STATS) && f->status == 0) {
		size_t n;
		const uint64_t *body = stats_body((struct kv_offd_frame *)f, &n);

		for (size_t i = 0; i < n; i++)
			put64(p + OFF_BODY + 8 * i, body[i]);
	}
	return 0;
}

int kv_offd_frame_decode(const void *buf, size_t len, struct kv_offd_frame *out)
{
	const unsigned char *p = buf;
	unsigned char unsummed[KV_OFFD_FRAME_BYTES];
	struct kv_offd_frame f;
	unsigned mask;
	size_t ml, hl;

	if (!buf || len != KV_OFFD_FRAME_BYTES)
		return -KV_EPROTO;
	if (get32(p + OFF_MAGIC) != KV_OFFD_MAGIC ||
	    get16(p + OFF_VERSION) != KV_OFFD_VERSION ||
	    get32(p + OFF_RESERVED) != 0)
		return -KV_EPROTO;
	memset(&f, 0, sizeof(f));
	f.type = get16(p + OFF_TYPE);
	mask = fields_of(f.type);
	if (!mask)
		return -KV_EPROTO;
	/* The sum taken out, the rest must be what a frame without one is. */
	if ((mask & F_SUM) && !((f.type & KV_OFFD_REPLY) && get32(p + OFF_STATUS))) {
		f.sum = get64(p + OFF_SUM);
		memcpy(unsummed, p, sizeof(unsummed));
		memset(unsummed + OFF_SUM, 0, 8);
		p = unsummed;
	}
	f.status = (int32_t)get32(p + OFF_STATUS);
	f.slot = get32(p + OFF_SLOT);
	f.rank = get32(p + OFF_RANK);
	f.group = get32(p + OFF_GROUP);
	f.len = get64(p + OFF_LEN);
	f.arg = get64(p + OFF_ARG);
	ml = get16(p + OFF_MODEL_LEN);
	hl = get16(p + OFF_HASH_LEN);
	if (!status_ok(f.status) || (!(mask & F_STATUS) && f.status) ||
	    (!(mask & F_SLOT) && f.slot) || (!(mask & F_LEN) && f.len) ||
	    (!(mask & F_ARG) && f.arg) || !arg_ok(&f))
		return -KV_EPROTO;
	if (has_key(mask, &f)) {
		if (ml > MODEL_FIELD || hl > HASH_FIELD ||
		    !model_ok((const char *)p + OFF_MODEL, ml) ||
		    !hash_ok((const char *)p + OFF_HASH, hl) ||
		    !all_zero(p + OFF_MODEL + ml, MODEL_FIELD - ml) ||
		    !all_zero(p + OFF_HASH + hl, HASH_FIELD - hl) ||
		    !all_zero(p + KEY_END, KV_OFFD_FRAME_BYTES - KEY_END))
			return -KV_EPROTO;
		memcpy(f.model_dir, p + OFF_MODEL, ml);
		memcpy(f.hash, p + OFF_HASH, hl);
	} else if (mask & F_MODEL) {
		if (ml > MODEL_FIELD || hl ||
		    (ml && !model_ok((const char *)p + OFF_MODEL, ml)) ||
		    !all_zero(p + OFF_MODEL + ml, KV_OFFD_FRAME_BYTES - OFF_MODEL - ml))
			return -KV_EPROTO;
		memcpy(f.model_dir, p + OFF_MODEL, ml);
	} else if ((mask & F_STATS) && f.status == 0) {
		size_t n;
		uint64_t *body = stats_body(&f, &n);

		if (ml || hl || f.rank || f.group ||
		    !all_zero(p + OFF_BODY + 8 * n, KV_OFFD_FRAME_BYTES - OFF_BODY - 8 * n))
			return -KV_EPROTO;
		for (size_t i = 0; i < n; i++)
			body[i] = get64(p + OFF_BODY + 8 * i);
	} else if (ml || hl || f.rank || f.group ||
		   !all_zero(p + OFF_BODY, KV_OFFD_FRAME_BYTES - OFF_BODY)) {
		return -KV_EPROTO;
	}
	if (((f.type & ~KV_OFFD_REPLY) == KV_OFFD_BATCH && !batch_head_ok(&f, ml)) ||
	    ((f.type & ~KV_OFFD_REPLY) == KV_OFFD_CONFIG && !config_head_ok(&f, ml)))
		return -KV_EPROTO;
	*out = f;
	return 0;
}

int kv_offd_frame_set_key(struct kv_offd_frame *f, const struct kv_block_ref *ref)
{
	size_t ml = strnlen(ref->model_dir, sizeof(ref->model_dir));
	size_t hl = strnlen(ref->hash, sizeof(ref->hash));

	if (!model_ok(ref->model_dir, ml))
		return -KV_EBADPATH;
	if (hl < KV_HASH_MIN_LEN || hl > KV_OFFD_HASH_MAX)
		return -KV_EBADHASH;
	for (size_t i = 0; i < hl; i++) {
		char ch = ref->hash[i];

		if (ch >= 'A' && ch <= 'F')
			ch = (char)(ch - 'A' + 'a');
		f->hash[i] = ch;
	}
	f->hash[hl] = '\0';
	if (!hash_ok(f->hash, hl)) {
		f->hash[0] = '\0';
		return -KV_EBADHASH;
	}
	memcpy(f->model_dir, ref->model_dir, ml);
	f->model_dir[ml] = '\0';
	f->rank = ref->rank;
	f->group = ref->group;
	return 0;
}
