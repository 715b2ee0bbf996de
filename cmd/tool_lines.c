/* Numbered lines of batch input, blank ones skipped: see tool.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tool.h"
#include "tool_record.h"

#define LINES_CHUNK_BYTES	(64u * 1024)

int tool_lines_open(struct tool_lines *l, const char *path)
{
	*l = (struct tool_lines){ .fd = STDIN_FILENO, .name = "<stdin>" };
	if (!path || !strcmp(path, "-"))
		return 0;
	l->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (l->fd < 0) {
		tool_err("cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	l->name = path;
	return 0;
}

/* The next line in the buffer, NUL-terminated in place: 1, else 0 when
 * the rest has no newline yet (the last line needs none at the end).  A
 * line over max goes out cut to max + 1 bytes as
 * soon as that much is here; its rest is dropped as it comes. */
static int take(struct tool_lines *l, char **text)
{
	size_t max = l->max ? l->max : TOOL_LINE_MAX, stop;
	char *nl = NULL;

	if (l->scanned < l->end)
		nl = memchr(l->buf + l->scanned, '\n', l->end - l->scanned);
	if (l->skipping) {
		l->start = l->scanned = nl ? (size_t)(nl - l->buf) + 1 : l->end;
		if (!nl)
			return 0;
		l->skipping = 0;
		return take(l, text);
	}
	stop = nl ? (size_t)(nl - l->buf) : l->end;
	if (stop - l->start > max) {
		stop = l->start + max + 1;
		/* Unless its newline is right there, the rest is to skip. */
		l->skipping = !(nl && stop == (size_t)(nl - l->buf)) && !(l->eof && stop >= l->end);
		nl = NULL;
	} else if (!nl && (!l->eof || l->start == l->end)) {
		l->scanned = l->end;
		return 0;
	}
	/* The byte at stop is the newline, the rest to skip, or the
	 * spare byte past the end. */
	l->buf[stop] = '\0';
	*text = l->buf + l->start;
	l->start = l->scanned = stop < l->end ? stop + 1 : l->end;
	return 1;
}

/* Read more: 0, -EAGAIN when wait is 0 and nothing has come, -errno. */
static int fill(struct tool_lines *l, int wait)
{
	struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
	ssize_t r;

	if (l->start) {
		memmove(l->buf, l->buf + l->start, l->end - l->start);
		l->end -= l->start;
		l->scanned -= l->start;
		l->start = 0;
	}
	/* A line longer than half the buffer: double it rather than read
	 * in ever smaller pieces.  One byte spare for the last line's NUL. */
	if (l->end >= l->cap / 2) {
		size_t ncap = l->cap ? l->cap * 2 : LINES_CHUNK_BYTES;
		char *nb = realloc(l->buf, ncap);

		if (!nb)
			return -ENOMEM;
		l->buf = nb;
		l->cap = ncap;
	}
	/* poll, not O_NONBLOCK: the flag would be set on a file description
	 * that stdin may share with other processes. */
	if (!wait && poll(&pfd, 1, 0) == 0)
		return -EAGAIN;
	do
		r = read(l->fd, l->buf + l->end, l->cap - 1 - l->end);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	l->end += r;
	l->eof = r == 0;
	return 0;
}

static int lines_next(struct tool_lines *l, char **text, int wait)
{
	int r;

	for (;;) {
		while (take(l, text)) {
			l->line++;
			if ((*text)[strspn(*text, " \t\r\n")])
				return 1;
		}
		if (l->eof)
			return 0;
		r = fill(l, wait);
		if (r == -EAGAIN)
			return r;
		if (r < 0) {
			tool_err("cannot read '%s': %s", l->name, strerror(-r));
			return -EIO;
		}
	}
}

int tool_lines_next(struct tool_lines *l, char **text)
{
	return lines_next(l, text, 1);
}

int tool_lines_ready(struct tool_lines *l, char **text)
{
	return lines_next(l, text, 0);
}

const char *tool_lines_refuse(struct tool_lines *l, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(l->why, sizeof(l->why), fmt, ap);
	va_end(ap);
	tool_err("%s:%lu: %s", l->name, l->line, l->why);
	return l->why;
}

void tool_lines_close(struct tool_lines *l)
{
	free(l->buf);
	if (l->fd > STDIN_FILENO)
		close(l->fd);
	l->buf = NULL;
	l->fd = -1;
}
