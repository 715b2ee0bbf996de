/*
 * libFuzzer harness for the KV-event endpoint parser (--events,
 * $KV_EVENTS) and the hash reduction: any text is either accepted, and
 * then names a ZMQ scheme and says bind or connect, or refused with
 * -EINVAL and a message.  kv_events_hash64 takes any text.  Never a crash.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <kv/kv.h>

#define ASSERT(cond) do { if (!(cond)) abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	int bind = -1, ret;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	ret = kv_events_endpoint_check(text, &bind);
	if (ret == 0) {
		ASSERT(bind == 0 || bind == 1);
		ASSERT(kv_events_is_endpoint(text));
		ASSERT(strstr(text, "tcp://") || strstr(text, "ipc://"));
	} else {
		ASSERT(ret == -EINVAL);
		ASSERT(kv_error_detail()[0] != '\0');
	}
	(void)kv_events_hash64(text);
	free(text);
	return 0;
}
