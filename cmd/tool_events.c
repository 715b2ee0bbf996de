/*
 * --events ENDPOINT and $KV_EVENTS: the KV-event publisher as every
 * program opens it, and what it says at exit.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "tool.h"

const char *tool_events_endpoint(const char *opt)
{
	const char *spec = opt ? opt : getenv("KV_EVENTS");
	const char *what = opt ? "--events" : "$KV_EVENTS";

	if (!spec || (!opt && !*spec))
		return NULL;
	if (!kv_events_is_endpoint(spec))
		tool_usage_fail("%s: '%s' is not a ZMQ endpoint: use tcp://HOST:PORT or "
				"ipc://PATH (bind: or connect: in front to choose)", what, spec);
	if (kv_events_endpoint_check(spec, NULL) < 0)
		tool_usage_fail("%s: %s", what, kv_error_detail());
	return spec;
}

struct kv_events *tool_events_open(const char *endpoint, const char *pod)
{
	struct kv_events_opts o = { .pod = pod };

	return tool_events_open_opts(endpoint, &o);
}

struct kv_events *tool_events_open_opts(const char *endpoint, const struct kv_events_opts *opts)
{
	struct kv_events_opts o = *opts;
	const char *linger = getenv("KV_EVENTS_LINGER");
	struct kv_events *ev;
	int rc;

	if (!endpoint)
		return NULL;
	if (linger && *linger) {
		o.linger_ns = tool_parse_duration_ns("$KV_EVENTS_LINGER", linger);
		if (!o.linger_ns)
			o.linger_ns = 1;	/* "0": do not wait at all */
	}
	rc = kv_events_open(endpoint, &o, &ev);
	if (rc == -EINVAL)
		tool_usage_fail("--events: %s", kv_error_detail());
	if (rc < 0) {
		tool_err("--events: %s", *kv_error_detail() ? kv_error_detail() : kv_strerror(rc));
		exit(EXIT_RUNTIME);
	}
	return ev;
}

int tool_events_close(struct kv_events *ev)
{
	struct kv_events_stats st;

	if (!ev)
		return 0;
	kv_events_close(ev, &st);
	if (st.hashes_dropped || st.messages_dropped)
		tool_err("events: %llu block %s in %llu %s not delivered "
			 "(no subscriber, or one too slow)",
			 (unsigned long long)st.hashes_dropped,
			 tool_plural(st.hashes_dropped, "event", "events"),
			 (unsigned long long)st.messages_dropped,
			 tool_plural(st.messages_dropped, "message", "messages"));
	if (st.unnamed)
		tool_err("events: %llu %s in model dirs whose config.json names no model "
			 "a topic can carry %s not announced", (unsigned long long)st.unnamed,
			 tool_plural(st.unnamed, "block", "blocks"),
			 tool_plural(st.unnamed, "was", "were"));
	return st.hashes_dropped || st.messages_dropped || st.unnamed;
}
