/* Progress lines on a terminal's stderr (cmd/tool.h). */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include "tool.h"

#define PROGRESS_AFTER_NS	1000000000LL	/* quiet for short work */
#define PROGRESS_EVERY_NS	250000000LL

void tool_progress_init(struct tool_progress *p)
{
	p->on = isatty(STDERR_FILENO);
	p->shown = 0;
	p->next_ns = kv_monotonic_ns() + PROGRESS_AFTER_NS;
}

void tool_progress_show(struct tool_progress *p, const char *fmt, ...)
{
	int64_t now;
	va_list ap;

	if (!p->on)
		return;
	now = kv_monotonic_ns();
	if (now < p->next_ns)
		return;
	p->next_ns = now + PROGRESS_EVERY_NS;
	fprintf(stderr, "\r\033[K%s: ", tool_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	p->shown = 1;
}

void tool_progress_done(struct tool_progress *p)
{
	if (p->shown)
		fputs("\r\033[K", stderr);
	p->shown = 0;
}
