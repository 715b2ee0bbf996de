/* Where a run happened: kernel, CPU, NUMA, the filesystem and device
 * under --dir, and any NVIDIA GPUs with their PCIe link. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <hwloc.h>
#include "kvbench.h"

/* First line of a small sysfs/procfs file, trimmed; "" if unreadable. */
static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	buf[0] = '\0';
	if (!f)
		return;
	if (!fgets(buf, (int)len, f))
		buf[0] = '\0';
	fclose(f);
	n = strlen(buf);
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
}

static json_t *str_or_null(const char *s)
{
	return s && *s ? json_string(s) : json_null();
}

struct mount {
	char point[PATH_MAX];
	char fstype[64];
	char source[PATH_MAX];
	char opts[1024];
	char super_opts[1024];
	unsigned maj, min;
};

/* The mount holding path: same device, deepest mount point above it. */
static int find_mount(const char *path, struct mount *out)
{
	char real[PATH_MAX], line[8192];
	struct stat st;
	size_t best = 0;
	int found = 0;
	FILE *f;

	if (!realpath(path, real) || stat(real, &st) < 0)
		return -errno;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		struct mount m;
		char *sep = strstr(line, " - ");
		size_t plen;

		if (!sep || sscanf(line, "%*s %*s %u:%u %*s %4095s %1023s", &m.maj, &m.min,
				   m.point, m.opts) != 4)
			continue;
		if (sscanf(sep + 3, "%63s %4095s %1023s", m.fstype, m.source, m.super_opts) != 3)
			continue;
		if (makedev(m.maj, m.min) != st.st_dev)
			continue;
		plen = strlen(m.point);
		if (strncmp(real, m.point, plen) ||
		    (real[plen] && real[plen] != '/' && plen > 1))
			continue;
		if (!found || plen >= best) {
			*out = m;
			best = plen;
			found = 1;
		}
	}
	fclose(f);
	return found ? 0 : -ENOENT;
}

/* The block device behind maj:min (its whole disk for a partition). */
static json_t *device_json(unsigned maj, unsigned min)
{
	char link[PATH_MAX], real[PATH_MAX], p[PATH_MAX + 64], v[256], *base;
	json_t *d;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", maj, min);
	if (!realpath(link, real))
		return json_null();
	snprintf(p, sizeof(p), "%s/partition", real);
	if (access(p, F_OK) == 0) {
		base = strrchr(real, '/');
		*base = '\0';
	}
	base = strrchr(real, '/') + 1;
	d = json_object();
	json_object_set_new(d, "name", json_string(base));
	snprintf(p, sizeof(p), "%s/device/model", real);
	read_line(p, v, sizeof(v));
	json_object_set_new(d, "model", str_or_null(v));
	snprintf(p, sizeof(p), "%s/queue/rotational", real);
	read_line(p, v, sizeof(v));
	json_object_set_new(d, "rotational", *v ? json_boolean(v[0] == '1') : json_null());
	snprintf(p, sizeof(p), "%s/queue/logical_block_size", real);
	read_line(p, v, sizeof(v));
	json_object_set_new(d, "logical_block_size_bytes",
			    *v ? json_integer(atoll(v)) : json_null());
	snprintf(p, sizeof(p), "%s/queue/scheduler", real);
	read_line(p, v, sizeof(v));
	json_object_set_new(d, "scheduler", str_or_null(v));
	return d;
}

/* The endpoint a bucket is reached at, as libkv finds it from the
 * environment; NULL: AWS's own (or one set in ~/.aws/config). */
static const char *s3_endpoint(void)
{
	const char *e = getenv("AWS_ENDPOINT_URL_S3");

	if (!e || !*e)
		e = getenv("AWS_ENDPOINT_URL");
	return e && *e ? e : NULL;
}

void env_fs_summary(const char *dir, char *buf, size_t len)
{
	struct mount m;

	if (kv_root_is_s3(dir))
		snprintf(buf, len, "S3 bucket at %s", s3_endpoint() ? s3_endpoint() : "AWS");
	else if (find_mount(dir, &m) < 0)
		snprintf(buf, len, "unknown filesystem");
	else
		snprintf(buf, len, "%s on %s (%s)", m.fstype, m.source, m.point);
}

static void cpu_model(char *buf, size_t len)
{
	char line[512], *v;
	FILE *f = fopen("/proc/cpuinfo", "re");

	buf[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) || !(v = strchr(line, ':')))
			continue;
		snprintf(buf, len, "%s", v + 2);
		buf[strcspn(buf, "\n")] = '\0';
		break;
	}
	fclose(f);
}

static json_t *topology_json(char *model, size_t len)
{
	hwloc_topology_t topo;
	hwloc_obj_t pkg;
	const char *m;
	json_t *j = json_object();

	if (hwloc_topology_init(&topo) < 0)
		return j;
	if (hwloc_topology_load(topo) == 0) {
		json_object_set_new(j, "numa_nodes",
				    json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE)));
		json_object_set_new(j, "packages",
				    json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE)));
		json_object_set_new(j, "cores",
				    json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE)));
		json_object_set_new(j, "pus",
				    json_integer(hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU)));
		pkg = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
		m = pkg ? hwloc_obj_get_info_by_name(pkg, "CPUModel") : NULL;
		if (!*model && m)
			snprintf(model, len, "%s", m);
	}
	hwloc_topology_destroy(topo);
	return j;
}

/* NVIDIA GPUs as the driver lists them, with their PCIe link from sysfs. */
static json_t *gpus_json(void)
{
	const char *base = "/proc/driver/nvidia/gpus";
	char p[PATH_MAX + 300], line[256], v[64];
	json_t *arr = json_array();
	struct dirent *e;
	DIR *d = opendir(base);

	if (!d)
		return arr;
	while ((e = readdir(d))) {
		json_t *g;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s/information", base, e->d_name);
		if (!(f = fopen(p, "re")))
			continue;
		g = json_object();
		json_object_set_new(g, "pci_address", json_string(e->d_name));
		while (fgets(line, sizeof(line), f)) {
			char *val = strchr(line, ':');

			if (!val || strncmp(line, "Model:", 6))
				continue;
			val++;
			val += strspn(val, " \t");
			val[strcspn(val, "\n")] = '\0';
			json_object_set_new(g, "model", json_string(val));
		}
		fclose(f);
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/current_link_speed", e->d_name);
		read_line(p, v, sizeof(v));
		json_object_set_new(g, "pcie_link_speed", str_or_null(v));
		snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/current_link_width", e->d_name);
		read_line(p, v, sizeof(v));
		json_object_set_new(g, "pcie_link_width", *v ? json_integer(atoi(v)) : json_null());
		json_array_append_new(arr, g);
	}
	closedir(d);
	return arr;
}

json_t *env_json(const char *dir)
{
	struct utsname u;
	struct mount m;
	char model[256], host[256];
	json_t *env = json_object(), *k, *cpu, *fs;

	if (uname(&u) == 0) {
		k = json_object();
		json_object_set_new(k, "sysname", json_string(u.sysname));
		json_object_set_new(k, "release", json_string(u.release));
		json_object_set_new(k, "version", json_string(u.version));
		json_object_set_new(k, "machine", json_string(u.machine));
		json_object_set_new(env, "kernel", k);
	}
	if (gethostname(host, sizeof(host)) == 0) {
		host[sizeof(host) - 1] = '\0';
		json_object_set_new(env, "hostname", json_string(host));
	}
	cpu_model(model, sizeof(model));
	cpu = topology_json(model, sizeof(model));
	json_object_set_new(cpu, "model", str_or_null(model));
	json_object_set_new(cpu, "online", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
	json_object_set_new(env, "cpu", cpu);
	if (dir && kv_root_is_s3(dir)) {
		const char *region = getenv("AWS_REGION");

		if (!region || !*region)
			region = getenv("AWS_DEFAULT_REGION");
		fs = json_object();
		json_object_set_new(fs, "url", json_string(dir));
		json_object_set_new(fs, "endpoint", str_or_null(s3_endpoint()));
		json_object_set_new(fs, "region", str_or_null(region && *region ? region : NULL));
		json_object_set_new(env, "filesystem", json_null());
		json_object_set_new(env, "device", json_null());
		json_object_set_new(env, "object_store", fs);
	} else if (dir && find_mount(dir, &m) == 0) {
		fs = json_object();
		json_object_set_new(fs, "type", json_string(m.fstype));
		json_object_set_new(fs, "source", json_string(m.source));
		json_object_set_new(fs, "mount_point", json_string(m.point));
		json_object_set_new(fs, "mount_options", json_string(m.opts));
		json_object_set_new(fs, "super_options", json_string(m.super_opts));
		json_object_set_new(env, "filesystem", fs);
		json_object_set_new(env, "device", m.maj ? device_json(m.maj, m.min) : json_null());
	} else {
		json_object_set_new(env, "filesystem", json_null());
		json_object_set_new(env, "device", json_null());
	}
	json_object_set_new(env, "gpus", gpus_json());
	return env;
}
