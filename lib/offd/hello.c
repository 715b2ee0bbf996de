/*
 * The HELLO exchange, both ends: the daemon's first frame on a
 * connection carries the pool's geometry and, in SCM_RIGHTS, the memfd
 * the client maps; a refused peer gets the status alone.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <kv/errors.h>
#include <kv/offd.h>

int kv_offd_hello_send(int fd, int status, int pool_fd,
		       const struct kv_offd_geometry *geo)
{
	struct kv_offd_frame f = { .type = KV_OFFD_HELLO | KV_OFFD_REPLY, .status = status };
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;
	ssize_t n;

	if (!status) {
		f.slot = geo->slots;
		f.len = geo->pool_bytes;
		f.arg = geo->slot_bytes;
		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.space;
		msg.msg_controllen = sizeof(ctl.space);
		cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pool_fd, sizeof(int));
	}
	if (kv_offd_frame_encode(&f, buf, sizeof(buf)))
		return -KV_EPROTO;
	/* Non-blocking: a new socket's buffer always takes one frame, and a
	 * peer that is gone must not hold the daemon's loop. */
	do
		n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(buf) ? 0 : -EPIPE;
}

/* The frame's bytes and, if one came, the passed fd (-1 otherwise). */
static int recv_frame(int fd, unsigned char *buf, int *pool_fd)
{
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = KV_OFFD_FRAME_BYTES };
	struct msghdr msg = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.space, .msg_controllen = sizeof(ctl.space),
	};
	struct cmsghdr *cm;
	size_t got;
	ssize_t n;

	do
		n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	/* EAGAIN: the socket's receive deadline ran out. */
	if (n <= 0)
		return n == 0 ? -ECONNRESET : errno == EAGAIN ? -ETIMEDOUT : -errno;
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(pool_fd, CMSG_DATA(cm), sizeof(int));
	for (got = (size_t)n; got < KV_OFFD_FRAME_BYTES; got += (size_t)n) {
		n = recv(fd, buf + got, KV_OFFD_FRAME_BYTES - got, 0);
		if (n < 0 && errno == EINTR) {
			n = 0;
			continue;
		}
		if (n <= 0)
			return n == 0 ? -ECONNRESET : errno == EAGAIN ? -ETIMEDOUT : -errno;
	}
	return 0;
}

int kv_offd_hello_recv(int fd, struct kv_offd_geometry *geo, int *pool_fd)
{
	unsigned char buf[KV_OFFD_FRAME_BYTES];
	struct kv_offd_frame f;
	struct stat st;
	int err;

	*pool_fd = -1;
	err = recv_frame(fd, buf, pool_fd);
	if (!err)
		err = kv_offd_frame_decode(buf, sizeof(buf), &f);
	if (!err && f.type != (KV_OFFD_HELLO | KV_OFFD_REPLY))
		err = -KV_EPROTO;
	if (!err)
		err = f.status;
	/* The geometry must describe the pool the fd holds: slots of
	 * several sizes, the largest arg bytes. */
	if (!err && (*pool_fd < 0 || f.slot == 0 || f.arg == 0 || f.arg > f.len ||
		     f.len / f.arg > f.slot || f.len > SIZE_MAX ||
		     fstat(*pool_fd, &st) < 0 || (uint64_t)st.st_size < f.len))
		err = -KV_EPROTO;
	if (err) {
		if (*pool_fd >= 0)
			close(*pool_fd);
		*pool_fd = -1;
		return err;
	}
	geo->pool_bytes = f.len;
	geo->slot_bytes = f.arg;
	geo->slots = f.slot;
	return 0;
}
