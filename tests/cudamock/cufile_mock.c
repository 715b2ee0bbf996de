/*
 * A stand-in for libcufile next to the simulated CUDA device: what
 * kv_gds needs of cuFile, moving file bytes with pread/pwrite and
 * device bytes with cudaMemcpy (the simulated device's, or a real
 * one's).  Loaded by path through kv_gds_opts.library, so tests can
 * take the cuFile path where GPUDirect Storage is not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

struct cufile_error {
	int err;
	int cu_err;
};

struct cufile_descr {
	int type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};

#define DRIVER_NOT_INITIALIZED	5001
#define INVALID_VALUE		5022

static int opened;

struct cufile_error cuFileDriverOpen(void)
{
	opened++;
	return (struct cufile_error){ 0, 0 };
}

struct cufile_error cuFileDriverClose_v2(void)
{
	if (!opened)
		return (struct cufile_error){ DRIVER_NOT_INITIALIZED, 0 };
	opened--;
	return (struct cufile_error){ 0, 0 };
}

struct cufile_error cuFileHandleRegister(void **fh, struct cufile_descr *d)
{
	int *h;

	if (!opened)
		return (struct cufile_error){ DRIVER_NOT_INITIALIZED, 0 };
	if (d->type != 1 || d->handle.fd < 0 || fcntl(d->handle.fd, F_GETFD) < 0)
		return (struct cufile_error){ INVALID_VALUE, 0 };
	h = malloc(sizeof(*h));
	if (!h)
		return (struct cufile_error){ INVALID_VALUE, 0 };
	*h = d->handle.fd;
	*fh = h;
	return (struct cufile_error){ 0, 0 };
}

void cuFileHandleDeregister(void *fh)
{
	free(fh);
}

/* The registered file again, without O_DIRECT's alignment rules. */
static int reopen(void *fh, int flags)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/self/fd/%d", *(int *)fh);
	return open(path, flags | O_CLOEXEC);
}

ssize_t cuFileRead(void *fh, void *dev, size_t size, off_t file_off, off_t dev_off)
{
	char *buf = malloc(size ? size : 1);
	int fd = reopen(fh, O_RDONLY);
	ssize_t n = -1;

	if (buf && fd >= 0) {
		n = pread(fd, buf, size, file_off);
		if (n > 0 && cudaMemcpy((char *)dev + dev_off, buf, (size_t)n,
					cudaMemcpyDefault) != cudaSuccess)
			n = -1;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return n;
}

ssize_t cuFileWrite(void *fh, const void *dev, size_t size, off_t file_off,
		    off_t dev_off)
{
	char *buf = malloc(size ? size : 1);
	int fd = reopen(fh, O_WRONLY);
	ssize_t n = -1;

	if (buf && fd >= 0 &&
	    cudaMemcpy(buf, (const char *)dev + dev_off, size, cudaMemcpyDefault) ==
		    cudaSuccess)
		n = pwrite(fd, buf, size, file_off);
	if (fd >= 0)
		close(fd);
	free(buf);
	return n;
}
