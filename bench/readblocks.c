/*
 * readblocks: read block files as a model server loads them, for
 * bench/kvwatch.sh: each file opened (O_DIRECT where the filesystem
 * takes it, as vLLM's fs tier does), read whole, closed; the list
 * ROUNDS times.  Prints "opens N bytes B seconds S".
 *
 *   readblocks LIST ROUNDS      (LIST: one path per line)
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUF_BYTES	(8u << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	FILE *f = argc == 3 ? fopen(argv[1], "r") : NULL;
	char **paths = NULL, line[4096];
	size_t n = 0, cap = 0;
	unsigned long long opens = 0, bytes = 0;
	long rounds = argc == 3 ? atol(argv[2]) : 0;
	void *buf;
	double t0;

	if (!f || rounds <= 0) {
		fprintf(stderr, "usage: readblocks LIST ROUNDS\n");
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (n == cap && !(paths = realloc(paths, (cap = cap ? 2 * cap : 1024) * sizeof(*paths))))
			return 3;
		if (!(paths[n++] = strdup(line)))
			return 3;
	}
	fclose(f);
	if (posix_memalign(&buf, 4096, BUF_BYTES))
		return 3;
	t0 = now_s();
	for (long r = 0; r < rounds; r++)
		for (size_t i = 0; i < n; i++) {
			int fd = open(paths[i], O_RDONLY | O_DIRECT);
			ssize_t got;

			if (fd < 0)
				fd = open(paths[i], O_RDONLY);
			if (fd < 0) {
				perror(paths[i]);
				return 3;
			}
			while ((got = read(fd, buf, BUF_BYTES)) > 0)
				bytes += (unsigned long long)got;
			close(fd);
			opens++;
		}
	printf("opens %llu bytes %llu seconds %.6f\n", opens, bytes, now_s() - t0);
	for (size_t i = 0; i < n; i++)
		free(paths[i]);
	free(paths);
	free(buf);
	return 0;
}
