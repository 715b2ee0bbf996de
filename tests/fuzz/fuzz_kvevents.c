/*
 * libFuzzer harness for the KV-event decoder (kv_events_decode): any
 * payload a publisher, or anyone who can reach the subscriber, sends is
 * either decoded into events of a known kind with their hashes, or
 * refused with -KV_EPROTO; never a crash, a leak or a read past it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

static int on_event(const struct kv_event *ev, void *arg)
{
	uint64_t *sum = arg;

	ASSERT(ev->kind == KV_EVENT_BLOCK_STORED || ev->kind == KV_EVENT_BLOCK_REMOVED ||
	       ev->kind == KV_EVENT_ALL_CLEARED);
	ASSERT(ev->medium && strlen(ev->medium) < 64);
	for (size_t i = 0; i < ev->nhashes; i++)
		*sum += ev->hashes[i];
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	uint64_t sum = 0;
	int rc = kv_events_decode(data, len, on_event, &sum);

	ASSERT(rc == 0 || rc == -KV_EPROTO || rc == -ENOMEM);
	return 0;
}
