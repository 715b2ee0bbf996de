/* kvput --batch manifest lines: a block record with "file" or "data_b64". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <openssl/evp.h>
#include "manifest.h"

int manifest_line_parse(char *text, const struct tool_record_opts *o,
			struct manifest_line *m)
{
	m->file = m->data_b64 = NULL;
	if (tool_record_parse(text, o, &m->rec) < 0)
		return -1;
	if (tool_record_string(&m->rec, "file", &m->file) < 0 ||
	    tool_record_string(&m->rec, "data_b64", &m->data_b64) < 0)
		return tool_record_refuse(&m->rec, "\"file\" and \"data_b64\" must be strings");
	if (!m->file == !m->data_b64)
		return tool_record_refuse(&m->rec, "want exactly one of \"file\" and \"data_b64\"");
	return 0;
}

int manifest_b64_decode(const char *text, void **buf, size_t *cap, size_t *len)
{
	size_t n = strlen(text), out = n / 4 * 3;
	int got;

	if (n % 4)
		return -EINVAL;
	if (out > *cap || !*buf) {
		void *nb = kv_io_buf_alloc(out);

		if (!nb)
			return -ENOMEM;
		kv_io_buf_free(*buf);
		*buf = nb;
		*cap = out ? out : 1;
	}
	if (n == 0) {
		*len = 0;
		return 0;
	}
	got = EVP_DecodeBlock(*buf, (const unsigned char *)text, (int)n);
	if (got < 0 || (size_t)got != out)
		return -EINVAL;
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	if (text[n - 1] == '=')
		out--;
	if (text[n - 2] == '=')
		out--;
	*len = out;
	return 0;
}
