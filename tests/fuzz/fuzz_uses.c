/*
 * libFuzzer harness for the use journals (kv_uses_parse): any bytes a
 * node or a hostile user left in ROOT/.kvwatch/ either parse into uses
 * that name layout blocks at positive times, or are skipped as bad
 * lines; never a crash or a read past the buffer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct kv_uses *u;
	uint64_t bad = 0;

	if (kv_uses_new(&u) < 0)
		return 0;
	ASSERT(kv_uses_parse(u, (const char *)data, len, &bad) == 0);
	ASSERT(kv_uses_count(u) + bad <= len);
	kv_uses_free(u);
	return 0;
}
