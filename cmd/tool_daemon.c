/* The --daemon SOCK option of kvput, kvget and kvls: reaching kvoffd. */
#include <errno.h>
#include <stdlib.h>
#include "tool.h"

const char *tool_daemon(const char *opt)
{
	const char *env = getenv("KV_DAEMON");

	if (opt)
		return opt;
	return env && *env ? env : NULL;
}

int tool_daemon_exit(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -ECONNRESET ||
	       err == -EPIPE || err == -EACCES ? EXIT_DAEMON : EXIT_RUNTIME;
}

int tool_daemon_lost(int err)
{
	return err == -ECONNRESET || err == -EPIPE || err == -KV_EPROTO;
}

struct kv_offd *tool_daemon_connect(const char *sock)
{
	struct kv_offd *c;
	int err = kv_offd_connect(sock, &c);

	if (err) {
		tool_err("cannot reach daemon at '%s': %s", sock, kv_strerror(err));
		exit(tool_daemon_exit(err));
	}
	return c;
}
