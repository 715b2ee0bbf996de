/*
 * libFuzzer harness for the use journals (kv_uses_parse, and the reader
 * that takes a journal in pieces): any bytes a node or a hostile user
 * left in ROOT/.kvwatch/ either parse into uses that name layout blocks
 * at positive times, or are skipped as bad lines; never a crash or a
 * read past the buffer.  The same bytes cut into pieces of sizes the
 * input picks (down to one byte, lines split anywhere) read as they do
 * whole, and an unfinished line is never held past KV_USES_LINE_MAX.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>
#include "store/lastuse.h"

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	const char *text = (const char *)data;
	struct kvi_uses_feed whole, cut;
	struct kv_uses *u, *w, *c;
	uint32_t seed = len ? data[0] * 2654435761u + (uint32_t)len : 1;
	uint64_t bad = 0;

	if (kv_uses_new(&u) < 0)
		return 0;
	ASSERT(kv_uses_parse(u, text, len, &bad) == 0);
	ASSERT(kv_uses_count(u) + bad <= len);
	kv_uses_free(u);

	if (kv_uses_new(&w) < 0)
		return 0;
	if (kv_uses_new(&c) < 0) {
		kv_uses_free(w);
		return 0;
	}
	kvi_uses_feed_init(&whole, w, NULL, NULL);
	kvi_uses_feed_init(&cut, c, NULL, NULL);
	cut.latest_ns = whole.latest_ns;
	ASSERT(kvi_uses_feed(&whole, text, len) == 0);
	for (size_t at = 0; at < len;) {
		size_t n;

		seed = seed * 1103515245u + 12345u;
		/* mostly short pieces, now and then one past a line's limit */
		n = (seed >> 16) % 8 == 0 ? (seed >> 8) % (2 * KV_USES_LINE_MAX) + 1 :
					    (seed >> 16) % 64 + 1;
		if (n > len - at)
			n = len - at;
		ASSERT(kvi_uses_feed(&cut, text + at, n) == 0);
		ASSERT(cut.held < KV_USES_LINE_MAX);
		at += n;
	}
	ASSERT(cut.lines == whole.lines && cut.bad == whole.bad);
	ASSERT(kv_uses_count(c) == kv_uses_count(w));
	ASSERT(whole.bad == bad);
	kv_uses_free(w);
	kv_uses_free(c);
	return 0;
}
