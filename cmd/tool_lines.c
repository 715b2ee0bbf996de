/* Numbered lines of batch input, blank ones skipped: see tool.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tool.h"

int tool_lines_open(struct tool_lines *l, const char *path)
{
	*l = (struct tool_lines){ .in = stdin, .name = "<stdin>" };
	if (!path || !strcmp(path, "-"))
		return 0;
	l->in = fopen(path, "re");
	if (!l->in) {
		tool_err("cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	l->name = path;
	return 0;
}

int tool_lines_next(struct tool_lines *l, char **text)
{
	while (getline(&l->text, &l->cap, l->in) >= 0) {
		l->line++;
		if (!l->text[strspn(l->text, " \t\r\n")])
			continue;
		*text = l->text;
		return 1;
	}
	if (ferror(l->in)) {
		tool_err("cannot read '%s': %s", l->name, strerror(errno));
		return -EIO;
	}
	return 0;
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
	free(l->text);
	if (l->in && l->in != stdin)
		fclose(l->in);
	l->text = NULL;
	l->in = NULL;
}
