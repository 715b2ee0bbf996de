/* --plot: the latency CDF of each phase's data operations (log time
 * axis) above its throughput over time, as a self-contained SVG. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/stat.h>
#include "kvbench.h"

#define W		900
#define PANEL_H		300
#define LEFT		80
#define RIGHT		30
#define TOP		50
#define GAP		90

static const char *const colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd",
				      "#ff7f0e", "#8c564b" };

/* The histogram behind a phase's curve: its data reads or writes, or
 * lookups. */
static const struct kv_hist *main_hist(const struct phase_result *r, int i)
{
	static const enum lat order[] = { LAT_READ, LAT_WRITE, LAT_LOOKUP, LAT_BATCH,
					   LAT_CREATE, LAT_UNLINK };
	int n = 0;

	for (unsigned k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		if (!r->lat[order[k]] || !r->lat[order[k]]->count)
			continue;
		if (n++ == i)
			return r->lat[order[k]];
	}
	return NULL;
}

static const char *hist_label(const struct phase_result *r, const struct kv_hist *h)
{
	for (unsigned l = 0; l < LAT_COUNT; l++)
		if (r->lat[l] == h)
			return lat_names[l];
	return "";
}

static void cdf_panel(FILE *f, const struct bench *b)
{
	double lo = 1e300, hi = 0, x0, x1, y0 = TOP + PANEL_H, plot_w = W - LEFT - RIGHT;
	unsigned ph, c = 0;
	int i, d;

	for (ph = 0; ph < PH_COUNT; ph++)
		for (i = 0; b->res[ph].ran && main_hist(&b->res[ph], i); i++) {
			const struct kv_hist *h = main_hist(&b->res[ph], i);

			lo = fmin(lo, (double)(h->min ? h->min : 1));
			hi = fmax(hi, (double)h->max);
		}
	if (hi <= 0)
		return;
	x0 = floor(log10(lo));
	x1 = ceil(log10(hi));
	if (x1 <= x0)
		x1 = x0 + 1;
	fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"15\">Latency CDF of data operations</text>\n",
		LEFT, TOP - 15);
	fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
		LEFT, TOP, plot_w, PANEL_H);
	for (d = (int)x0; d <= (int)x1; d++) {
		double x = LEFT + (d - x0) / (x1 - x0) * plot_w;
		static const char *const units[] = { "ns", "us", "ms", "s" };
		char lab[16];

		/* Decades read best as 1, 10, 100 of a unit. */
		if (d < 9)
			snprintf(lab, sizeof(lab), "%d%s", (int)pow(10, d % 3), units[d / 3]);
		else
			snprintf(lab, sizeof(lab), "%.0f%s", pow(10, d - 9), units[3]);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n",
			x, TOP, x, TOP + PANEL_H);
		fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
			x, TOP + PANEL_H + 15, lab);
	}
	for (d = 0; d <= 4; d++)
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.2f</text>\n",
			LEFT - 5, y0 - d * PANEL_H / 4.0 + 4, d / 4.0);
	fprintf(f, "<text x=\"%.0f\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">latency (log scale)</text>\n",
		LEFT + plot_w / 2, TOP + PANEL_H + 32);
	for (ph = 0; ph < PH_COUNT; ph++) {
		const struct phase_result *r = &b->res[ph];
		const struct kv_hist *h;

		for (i = 0; r->ran && (h = main_hist(r, i)); i++, c++) {
			uint64_t seen = 0;
			const char *col = colors[c % 6];

			fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
				col);
			for (unsigned k = 0; k < KV_HIST_BUCKETS; k++) {
				double v, x;

				if (!h->buckets[k])
					continue;
				seen += h->buckets[k];
				v = (double)kv_hist_bucket_high(k);
				if (v > (double)h->max)
					v = (double)h->max;
				x = LEFT + (log10(v > 1 ? v : 1) - x0) / (x1 - x0) * plot_w;
				fprintf(f, "%.1f,%.1f ", x,
					y0 - (double)seen / (double)h->count * PANEL_H);
			}
			fprintf(f, "\"/>\n");
			fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"%s\">%s %s</text>\n",
				LEFT + 10, TOP + 18 + 16 * (int)c, col, phase_names[ph],
				hist_label(r, h));
		}
	}
}

static void rate_panel(FILE *f, const struct bench *b)
{
	double top = TOP + PANEL_H + GAP, y0 = top + PANEL_H, plot_w = W - LEFT - RIGHT;
	double tmax = 0, rmax = 0, off[PH_COUNT] = { 0 }, acc = 0;
	size_t i;
	unsigned ph;
	int d;

	/* Phases follow each other on one time axis. */
	for (ph = 0; ph < PH_COUNT; ph++) {
		off[ph] = acc;
		if (b->res[ph].ran)
			acc += (double)b->res[ph].elapsed_ns / 1e9;
	}
	tmax = acc > 0 ? acc : 1;
	for (i = 0; i < b->nsamples; i++) {
		const struct sample *s = &b->samples[i];
		double r = s->interval_ns ? (double)s->bytes / ((double)s->interval_ns / 1e9) : 0;

		rmax = fmax(rmax, r);
	}
	if (rmax <= 0)
		rmax = 1;
	fprintf(f, "<text x=\"%d\" y=\"%.0f\" font-size=\"15\">Throughput over time</text>\n",
		LEFT, top - 15);
	fprintf(f, "<rect x=\"%d\" y=\"%.0f\" width=\"%.0f\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
		LEFT, top, plot_w, PANEL_H);
	for (d = 0; d <= 4; d++) {
		char lab[16];

		kv_size_format((uint64_t)(rmax * d / 4), lab, sizeof(lab));
		fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%s/s</text>\n",
			LEFT - 5, y0 - d * PANEL_H / 4.0 + 4, lab);
		fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%.1f s</text>\n",
			LEFT + d * plot_w / 4, y0 + 15, tmax * d / 4);
	}
	for (ph = 0; ph < PH_COUNT; ph++) {
		double prev_t = 0;

		if (!b->res[ph].ran || ph == PH_LOOKUP)
			continue;
		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
			colors[ph % 6]);
		for (i = 0; i < b->nsamples; i++) {
			const struct sample *s = &b->samples[i];
			double r, x_a, x_b, y;

			if (s->phase != ph)
				continue;
			r = s->interval_ns ? (double)s->bytes / ((double)s->interval_ns / 1e9) : 0;
			x_a = LEFT + (off[ph] + prev_t) / tmax * plot_w;
			x_b = LEFT + (off[ph] + (double)s->t_ns / 1e9) / tmax * plot_w;
			y = y0 - r / rmax * PANEL_H;
			fprintf(f, "%.1f,%.1f %.1f,%.1f ", x_a, y, x_b, y);
			prev_t = (double)s->t_ns / 1e9;
		}
		fprintf(f, "\"/>\n");
		fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"12\" fill=\"%s\">%s</text>\n",
			LEFT + off[ph] / tmax * plot_w + 4, top + 16, colors[ph % 6],
			phase_names[ph]);
	}
}

int plot_svg(const char *path, const struct bench *b)
{
	struct stat st;
	FILE *f;
	int r = 0;
	/* kvbench often runs as root with the plot beside the scratch dir:
	 * a link planted at the name is refused, not followed, and only a
	 * regular file is truncated. */
	int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
		      0644);

	if (fd < 0)
		return -errno;
	r = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL
	    : ftruncate(fd, 0) < 0 ? -errno : 0;
	if (r < 0 || !(f = fdopen(fd, "w"))) {
		r = r < 0 ? r : -errno;
		close(fd);
		return r;
	}
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W, TOP + 2 * PANEL_H + GAP + 50, W, TOP + 2 * PANEL_H + GAP + 50);
	cdf_panel(f, b);
	rate_panel(f, b);
	fprintf(f, "</svg>\n");
	if (ferror(f))
		r = -EIO;
	if (fclose(f) != 0 && !r)
		r = -errno;
	return r;
}
