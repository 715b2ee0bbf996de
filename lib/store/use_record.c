/*
 * Recording a use: the one rule kvwatch and the vLLM tier follow
 * (kv/lastuse.h).  A block's atime is stamped (atime now, mtime left),
 * beneath the root with no link followed; where the filesystem refuses
 * the stamp for good (a root-squashed export, a read-only mount) the
 * use goes to this node's journal; on a bucket, always to the journal
 * object.  A use within the resolution of the last one recorded costs
 * nothing more than the look that says so.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <kv/io.h>
#include <kv/lastuse.h>
#include <kv/layout.h>
#include <kv/units.h>
#include "store/s3.h"

struct kv_use_recorder {
	int rootfd;			/* -1 on a bucket */
	char *root;
	char node[KV_USES_NODE_MAX + 1];
	int64_t resolution_ns;
	pthread_mutex_t lock;		/* the journal */
	struct kv_uses_journal *journal; /* a filesystem's: opened on the
					    first use it cannot stamp */
};

void kv_uses_node_name(const char *name, char out[KV_USES_NODE_MAX + 1])
{
	struct utsname u;
	size_t j = 0;

	if (!name)
		name = uname(&u) == 0 ? u.nodename : "node";
	for (size_t i = 0; name[i] && j < KV_USES_NODE_MAX; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || (c == '.' && j)))
			c = '_';
		out[j++] = c;
	}
	if (!j)
		out[j++] = 'n';
	out[j] = '\0';
}

int kv_use_recorder_open(const char *root, const char *node, int64_t resolution_ns,
			 struct kv_use_recorder **out)
{
	struct kv_use_recorder *r;
	int rc = 0;

	if (!root || !out || resolution_ns < 0)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r || !(r->root = strdup(root))) {
		free(r);
		return -ENOMEM;
	}
	kv_uses_node_name(node, r->node);
	r->resolution_ns = resolution_ns;
	r->rootfd = -1;
	pthread_mutex_init(&r->lock, NULL);
	if (kvi_s3_is_url(root))
		rc = kv_uses_journal_open_bucket(root, r->node, &r->journal);
	else if ((r->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (rc) {
		kv_use_recorder_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* A refusal that means "not here", not "not now": journal it. */
static int unstampable(int err)
{
	return err == -EPERM || err == -EACCES || err == -EROFS || err == -EOPNOTSUPP ||
	       err == -ENOTSUP;
}

static int64_t journaled_last(struct kv_use_recorder *r, const char *relpath)
{
	int64_t t;

	pthread_mutex_lock(&r->lock);
	t = kv_uses_journal_last(r->journal, relpath);
	pthread_mutex_unlock(&r->lock);
	return t;
}

static int journal(struct kv_use_recorder *r, const char *relpath, int64_t now)
{
	int rc = 0;

	pthread_mutex_lock(&r->lock);
	if (!r->journal)
		rc = kv_uses_journal_open(r->rootfd, r->node, &r->journal);
	if (!rc)
		rc = kv_uses_journal_record(r->journal, relpath, now);
	pthread_mutex_unlock(&r->lock);
	return rc ? rc : KV_USE_JOURNALED;
}

int kv_use_record(struct kv_use_recorder *r, const char *relpath, int fd, int64_t now_ns)
{
	static const struct timespec atime_now[2] = { { 0, UTIME_NOW }, { 0, UTIME_OMIT } };
	int64_t edge = now_ns - r->resolution_ns;
	struct kv_block_ref ref;
	const char *name = relpath;
	struct stat st;
	int dirfd = -1, rc;

	if (kv_layout_block_parse(relpath, &ref) < 0)
		return -EINVAL;
	if (r->rootfd < 0)
		return journaled_last(r, relpath) > edge ? KV_USE_SKIPPED
							 : journal(r, relpath, now_ns);
	if (fd < 0) {
		dirfd = kv_open_parent_beneath(r->rootfd, relpath, &name);
		if (dirfd < 0)
			return dirfd;
	}
	if (fd >= 0 ? fstat(fd, &st) : fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = -ENOENT;
		goto out;
	}
	if (st.st_atim.tv_sec * 1000000000LL + st.st_atim.tv_nsec > edge ||
	    journaled_last(r, relpath) > edge) {
		rc = KV_USE_SKIPPED;
		goto out;
	}
	/* The fd may be of another mount of the volume, a read-only one:
	 * then the path beneath the root is stamped. */
	if (fd >= 0 && futimens(fd, atime_now) == 0) {
		rc = KV_USE_STAMPED;
		goto out;
	}
	if (dirfd < 0 && (dirfd = kv_open_parent_beneath(r->rootfd, relpath, &name)) < 0) {
		rc = dirfd;
		goto out;
	}
	rc = utimensat(dirfd, name, atime_now, AT_SYMLINK_NOFOLLOW) ? -errno : KV_USE_STAMPED;
	if (unstampable(rc))
		rc = journal(r, relpath, now_ns);
out:
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}

int kv_use_recorder_sync(struct kv_use_recorder *r, int (*keep)(const char *relpath, void *arg),
			 void *arg)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	rc = r->journal ? kv_uses_journal_sync(r->journal, keep, arg) : 0;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int kv_use_recorder_is_bucket(const struct kv_use_recorder *r)
{
	return r->rootfd < 0;
}

void kv_use_recorder_close(struct kv_use_recorder *r)
{
	if (!r)
		return;
	if (r->rootfd < 0 && r->journal)
		kv_uses_journal_sync(r->journal, NULL, NULL);
	kv_uses_journal_close(r->journal);
	if (r->rootfd >= 0)
		close(r->rootfd);
	pthread_mutex_destroy(&r->lock);
	free(r->root);
	free(r);
}
