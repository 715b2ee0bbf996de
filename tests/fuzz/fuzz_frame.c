/*
 * libFuzzer harness for kvoffd's control-frame decoder,
 * kv_offd_frame_decode: any bytes a client sends must either decode to a
 * frame that holds the protocol's promises or be refused with
 * -KV_EPROTO; never a crash, a read past the buffer, or a frame that
 * does not survive an encode/decode round trip.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_offd_frame f, g;
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	int rc;

	memset(&f, 0xa5, sizeof(f));
	rc = kv_offd_frame_decode(data, size, &f);
	if (rc != 0) {
		if (rc != -KV_EPROTO)
			abort();
		return 0;
	}
	if (size != KV_OFFD_FRAME_BYTES)
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
	    f.arg != g.arg || strcmp(f.model_dir, g.model_dir) ||
	    strcmp(f.hash, g.hash) || memcmp(&f.stats, &g.stats, sizeof(f.stats)))
		abort();
	/* A valid frame re-encodes to the very bytes it came from. */
	if (memcmp(buf, data, sizeof(buf)))
		abort();
	return 0;
}
