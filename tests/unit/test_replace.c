/*
 * kv_file_replace: a regular file is replaced atomically and a new name
 * made; a device, FIFO or socket is written in place or refused, per
 * flag, and never replaced; a directory and a symlink are refused; a
 * path resolved beneath a dir never leaves it; a commit refuses what
 * appeared at the name meanwhile.  The device case needs root (mknod);
 * without it the rest runs and the test exits 77.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <kv/kv.h>
#include "check.h"

static char dir[] = "/tmp/kv-test-replace-XXXXXX";
static int dirfd_;

static void at(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

/* Temps left in the test dir. */
static int temps(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += kv_layout_is_temp(e->d_name);
	if (d)
		closedir(d);
	return n;
}

static int file_is(const char *name, const char *want)
{
	char path[512], got[64] = "";
	FILE *f;
	size_t n;

	at(name, path, sizeof(path));
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(got, 1, sizeof(got) - 1, f);
	fclose(f);
	got[n] = '\0';
	return !strcmp(got, want);
}

static mode_t type_of(const char *name)
{
	struct stat st;

	return fstatat(dirfd_, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? 0 : st.st_mode & S_IFMT;
}

static int check_regular(void)
{
	struct stat before, after;
	char path[512];
	int rc;

	at("plain", path, sizeof(path));
	CHECK(kv_file_replace(AT_FDCWD, path, "old", 3, 0644, 0) == 0, "new file");
	CHECK(file_is("plain", "old"), "new file's bytes");
	CHECK(stat(path, &before) == 0, "stat");
	rc = kv_file_replace(AT_FDCWD, path, "new", 3, 0640, KV_FILE_MODE_EXACT | KV_FILE_FSYNC);
	CHECK(rc == 0, "replace: %s", kv_strerror(rc));
	CHECK(file_is("plain", "new"), "replaced bytes");
	CHECK(stat(path, &after) == 0 && after.st_ino != before.st_ino,
	      "a regular file is replaced by rename, not rewritten");
	CHECK((after.st_mode & 07777) == 0640, "mode %o, want 0640 exactly",
	      (unsigned)(after.st_mode & 07777));
	/* In place is for what is not a regular file: a file is still replaced. */
	rc = kv_file_replace(dirfd_, "plain", "third", 5, 0644, KV_FILE_IN_PLACE | KV_FILE_BENEATH);
	CHECK(rc == 0 && file_is("plain", "third"), "replace beneath: %s", kv_strerror(rc));
	CHECK(temps() == 0, "temps left behind");
	return 0;
}

static int check_stream(void)
{
	struct kv_file_out *f;
	char path[512];
	int rc;

	at("stream", path, sizeof(path));
	CHECK(kv_file_replace(AT_FDCWD, path, "keep", 4, 0644, 0) == 0, "seed");
	CHECK(kv_file_replace_open(AT_FDCWD, path, 0644, 0, &f) == 0, "open");
	CHECK(kv_write_full(kv_file_replace_fd(f), "half", 4) == 0, "write");
	CHECK(file_is("stream", "keep"), "the name changed before the commit");
	kv_file_replace_abort(f);
	CHECK(file_is("stream", "keep") && temps() == 0, "abort left a change or a temp");
	/* A FIFO put at the name while the temp is written is not replaced. */
	CHECK(kv_file_replace_open(AT_FDCWD, path, 0644, KV_FILE_IN_PLACE, &f) == 0, "open");
	CHECK(kv_write_full(kv_file_replace_fd(f), "late", 4) == 0, "write");
	CHECK(unlink(path) == 0 && mkfifo(path, 0600) == 0, "swap in a FIFO");
	rc = kv_file_replace_commit(f);
	CHECK(rc == -EINVAL, "commit over a FIFO: %s", kv_strerror(rc));
	CHECK(strstr(kv_error_detail(), "FIFO"), "detail: '%s'", kv_error_detail());
	CHECK(type_of("stream") == S_IFIFO && temps() == 0, "the FIFO was replaced");
	return 0;
}

static int check_fifo(void)
{
	char path[512], got[16] = "";
	int rd, rc;

	at("fifo", path, sizeof(path));
	CHECK(mkfifo(path, 0600) == 0, "mkfifo");
	/* No reader: refused at once, never waited on. */
	rc = kv_file_replace(AT_FDCWD, path, "x", 1, 0644, KV_FILE_IN_PLACE);
	CHECK(rc == -ENXIO, "FIFO with no reader: %s", kv_strerror(rc));
	CHECK(strstr(kv_error_detail(), "no reader"), "detail: '%s'", kv_error_detail());
	rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	CHECK(rd >= 0, "open the reader");
	rc = kv_file_replace(AT_FDCWD, path, "bytes", 5, 0644, 0);
	CHECK(rc == -EINVAL, "FIFO refused without KV_FILE_IN_PLACE: %s", kv_strerror(rc));
	rc = kv_file_replace(AT_FDCWD, path, "bytes", 5, 0644, KV_FILE_IN_PLACE);
	CHECK(rc == 0, "FIFO with a reader: %s", kv_strerror(rc));
	CHECK(read(rd, got, sizeof(got)) == 5 && !memcmp(got, "bytes", 5), "the reader's bytes");
	/* A reader that reads nothing: KV_FILE_NONBLOCK never waits. */
	{
		static char big[1 << 20];

		rc = kv_file_replace(AT_FDCWD, path, big, sizeof(big), 0644,
				     KV_FILE_IN_PLACE | KV_FILE_NONBLOCK);
		CHECK(rc == -EAGAIN, "a full FIFO with KV_FILE_NONBLOCK: %s", kv_strerror(rc));
	}
	close(rd);
	CHECK(type_of("fifo") == S_IFIFO && temps() == 0, "the FIFO was replaced");
	return 0;
}

static int check_socket(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s, rc;

	at("sock", sa.sun_path, sizeof(sa.sun_path));
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind");
	rc = kv_file_replace(AT_FDCWD, sa.sun_path, "x", 1, 0644, 0);
	CHECK(rc == -EINVAL, "socket without KV_FILE_IN_PLACE: %s", kv_strerror(rc));
	rc = kv_file_replace(AT_FDCWD, sa.sun_path, "x", 1, 0644, KV_FILE_IN_PLACE);
	CHECK(rc == -ENXIO, "socket in place: %s", kv_strerror(rc));
	CHECK(strstr(kv_error_detail(), "socket"), "detail: '%s'", kv_error_detail());
	close(s);
	CHECK(type_of("sock") == S_IFSOCK && temps() == 0, "the socket was replaced");
	return 0;
}

static int check_dir_and_link(void)
{
	char path[512], link[512];
	int rc;

	at("sub", path, sizeof(path));
	CHECK(mkdir(path, 0755) == 0, "mkdir");
	rc = kv_file_replace(AT_FDCWD, path, "x", 1, 0644, KV_FILE_IN_PLACE);
	CHECK(rc == -EISDIR, "a directory: %s", kv_strerror(rc));
	rc = kv_file_replace(dirfd_, "sub/", "x", 1, 0644, KV_FILE_BENEATH);
	CHECK(rc == -EISDIR, "a path ending in '/': %s", kv_strerror(rc));
	CHECK(type_of("sub") == S_IFDIR, "the dir was replaced");
	/* A link is neither followed nor replaced, whatever it points at. */
	CHECK(kv_file_replace(dirfd_, "target", "mine", 4, 0644, KV_FILE_BENEATH) == 0, "target");
	at("link", link, sizeof(link));
	CHECK(symlink("target", link) == 0, "symlink");
	rc = kv_file_replace(AT_FDCWD, link, "x", 1, 0644, KV_FILE_IN_PLACE);
	CHECK(rc == -ELOOP, "a symlink: %s", kv_strerror(rc));
	CHECK(strstr(kv_error_detail(), "symbolic link"), "detail: '%s'", kv_error_detail());
	rc = kv_file_replace(dirfd_, "link", "x", 1, 0644, KV_FILE_BENEATH);
	CHECK(rc == -ELOOP, "a symlink beneath: %s", kv_strerror(rc));
	CHECK(type_of("link") == S_IFLNK && file_is("target", "mine"), "link or target changed");
	CHECK(temps() == 0, "temps left behind");
	return 0;
}

static int check_beneath(void)
{
	char path[512];
	int sub, rc;

	at("inner", path, sizeof(path));
	CHECK(mkdir(path, 0755) == 0, "mkdir");
	sub = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(sub >= 0, "open inner");
	rc = kv_file_replace(sub, "../escaped", "x", 1, 0644, KV_FILE_BENEATH);
	CHECK(rc < 0 && type_of("escaped") == 0, "'..' left the dir: %s", kv_strerror(rc));
	rc = kv_file_replace(sub, path, "x", 1, 0644, KV_FILE_BENEATH);
	CHECK(rc < 0, "an absolute path beneath: %s", kv_strerror(rc));
	/* A symlinked dir component is not followed either. */
	at("inner/up", path, sizeof(path));
	CHECK(symlink("..", path) == 0, "symlink");
	rc = kv_file_replace(sub, "up/escaped", "x", 1, 0644, KV_FILE_BENEATH);
	CHECK(rc < 0 && type_of("escaped") == 0, "a link left the dir: %s", kv_strerror(rc));
	rc = kv_file_replace(sub, "ok", "in", 2, 0644, KV_FILE_BENEATH);
	CHECK(rc == 0 && file_is("inner/ok", "in"), "a name beneath: %s", kv_strerror(rc));
	close(sub);
	return 0;
}

/* 0 done, 1 skipped (not root). */
static int check_device(void)
{
	char path[512];
	struct stat st;
	int rc;

	at("null", path, sizeof(path));
	if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) < 0) {
		fprintf(stderr, "skipping the device case: mknod: %s\n", strerror(errno));
		return 1;
	}
	rc = kv_file_replace(AT_FDCWD, path, "x", 1, 0644, 0);
	CHECK(rc == -EINVAL, "a device without KV_FILE_IN_PLACE: %s", kv_strerror(rc));
	CHECK(strstr(kv_error_detail(), "character device"), "detail: '%s'", kv_error_detail());
	rc = kv_file_replace(AT_FDCWD, path, "bytes", 5, 0644, KV_FILE_IN_PLACE | KV_FILE_FSYNC);
	CHECK(rc == 0, "a device in place: %s", kv_strerror(rc));
	CHECK(stat(path, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3),
	      "the device was replaced");
	CHECK(temps() == 0, "temps left behind");
	return 0;
}

int main(void)
{
	char cmd[64];
	int skipped;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	check_regular();
	check_stream();
	check_fifo();
	check_socket();
	check_dir_and_link();
	check_beneath();
	skipped = check_device() == 1;
	close(dirfd_);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return failures ? 1 : skipped ? 77 : 0;
}
