/*
 * libFuzzer harness for kvoffd's control-frame decoder,
 * kv_offd_frame_decode, and the BATCH payload decoders: any bytes a
 * client sends must either decode to a frame that holds the protocol's
 * promises or be refused with -KV_EPROTO; never a crash, a read past the
 * buffer, or a frame that does not survive an encode/decode round trip.
 * The input is a frame, then (for a BATCH frame) its payload; a CONFIG
 * frame's payload is text the daemon parses as a config (fuzz_config).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>
#include <kv/offd.h>

static int safe_text(const char *s, size_t max, int hex)
{
	size_t n = strnlen(s, max + 1);
	size_t i;

	if (n > max)
		return 0;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (hex ? !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))
			: (c == '/' || c < 0x20 || c == 0x7f))
			return 0;
	}
	return !(hex == 0 && (!strcmp(s, ".") || !strcmp(s, "..")));
}

/* A BATCH payload as the daemon (requests) or the client (replies) reads
 * it: each entry decodes, or is refused, and re-encodes to its bytes. */
static void check_payload(const struct kv_offd_frame *f, const uint8_t *p, size_t n)
{
	static unsigned char again[KV_OFFD_BATCH_MAX * (8 + KV_OFFD_HASH_MAX)];
	size_t need = kv_offd_batch_bytes(f), stride;

	if (need > sizeof(again) || (need && (f->len == 0 || f->len > KV_OFFD_BATCH_MAX)))
		abort();
	if (!need || n < need)
		return;
	stride = need / f->len;
	for (size_t i = 0; i < f->len; i++) {
		if (f->type & KV_OFFD_REPLY) {
			struct kv_offd_result r;

			if (kv_offd_result_decode(p, i, &r))
				continue;
			if (r.status > 0 || kv_offd_result_encode(again, i, &r))
				abort();
		} else {
			struct kv_offd_batch_entry e;

			if (kv_offd_batch_decode(f, p, i, &e))
				continue;
			if (!safe_text(e.hash, KV_OFFD_HASH_MAX, 1) ||
			    kv_offd_batch_encode(f, again, i, &e))
				abort();
		}
		if (memcmp(again + i * stride, p + i * stride, stride))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_offd_frame f, g;
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	int rc;

	memset(&f, 0xa5, sizeof(f));
	rc = kv_offd_frame_decode(data, size < KV_OFFD_FRAME_BYTES ? size : KV_OFFD_FRAME_BYTES,
				  &f);
	if (rc != 0) {
		if (rc != -KV_EPROTO)
			abort();
		return 0;
	}
	if (size < KV_OFFD_FRAME_BYTES)
		abort();
	if ((f.type & ~KV_OFFD_REPLY) == 0 || (f.type & ~KV_OFFD_REPLY) >= KV_OFFD_TYPE_MAX)
		abort();
	if (!safe_text(f.model_dir, KV_OFFD_MODEL_MAX, 0) ||
	    !safe_text(f.hash, KV_OFFD_HASH_MAX, 1))
		abort();

	/* What decoded must encode, and decode again to the same frame. */
	if (kv_offd_frame_encode(&f, buf, sizeof(buf)) != 0)
		abort();
	memset(&g, 0x5a, sizeof(g));
	if (kv_offd_frame_decode(buf, sizeof(buf), &g) != 0)
		abort();
	if (f.type != g.type || f.status != g.status || f.slot != g.slot ||
	    f.rank != g.rank || f.group != g.group || f.len != g.len ||
	    f.arg != g.arg || f.sum != g.sum || strcmp(f.model_dir, g.model_dir) ||
	    strcmp(f.hash, g.hash) || memcmp(&f.stats, &g.stats, sizeof(f.stats)))
		abort();
	/* A valid frame re-encodes to the very bytes it came from. */
	if (memcmp(buf, data, sizeof(buf)))
		abort();
	if ((f.type & ~KV_OFFD_REPLY) == KV_OFFD_BATCH)
		check_payload(&f, data + KV_OFFD_FRAME_BYTES, size - KV_OFFD_FRAME_BYTES);
	else if (f.type == KV_OFFD_CONFIG) {
		/* Its text is the daemon's to check: only its size is the frame's. */
		if (!f.model_dir[0] || kv_offd_batch_bytes(&f) != f.len || !f.len ||
		    f.len > KV_OFFD_CONFIG_MAX)
			abort();
	} else if (kv_offd_batch_bytes(&f))
		abort();
	return 0;
}
