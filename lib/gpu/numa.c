/*
 * NUMA placement through hwloc.  The topology (with PCI devices) is
 * loaded once and only read afterwards, which hwloc allows from any
 * thread.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <hwloc.h>
#include <kv/numa.h>

static hwloc_topology_t topo;
static int topo_err;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_load(void)
{
	if (hwloc_topology_init(&topo) < 0) {
		topo_err = -ENOMEM;
		return;
	}
	hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	if (hwloc_topology_load(topo) < 0) {
		topo_err = errno ? -errno : -EIO;
		hwloc_topology_destroy(topo);
	}
}

static int topology(void)
{
	pthread_once(&topo_once, topo_load);
	return topo_err;
}

static hwloc_obj_t node_obj(int node)
{
	if (node < 0)
		return NULL;
	return hwloc_get_numanode_obj_by_os_index(topo, (unsigned)node);
}

int kv_numa_node_count(void)
{
	int r = topology();

	if (r < 0)
		return r;
	return hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
}

int kv_numa_node_of_pci(const char *bus_id, int *node)
{
	hwloc_obj_t dev, anc;
	int r = topology(), first;

	if (r < 0)
		return r;
	dev = hwloc_get_pcidev_by_busidstring(topo, bus_id);
	if (!dev)
		return -ENOENT;
	anc = hwloc_get_non_io_ancestor_obj(topo, dev);
	if (!anc || !anc->nodeset)
		return -ENOENT;
	first = hwloc_bitmap_first(anc->nodeset);
	if (first < 0)
		return -ENOENT;
	*node = first;
	return 0;
}

/* Is s a PCI address "dddd:bb:dd.f"? */
static int is_pci_id(const char *s)
{
	unsigned d, b, dv, f;
	int n = 0;

	if (sscanf(s, "%4x:%2x:%2x.%1x%n", &d, &b, &dv, &f, &n) != 4)
		return 0;
	return n == 12 && s[n] == '\0';
}

/* The PCI device nearest the block device in /sys/dev/block/<majmin>,
 * following dm/md devices to their first underlying device. */
static int pci_of_sysblock(const char *sys, char *buf, size_t len, int depth)
{
	char real[PATH_MAX], slaves[PATH_MAX], *save = NULL, *c;
	char found[16] = "";
	DIR *d;
	struct dirent *e;

	if (!realpath(sys, real))
		return -errno;
	for (c = strtok_r(real, "/", &save); c; c = strtok_r(NULL, "/", &save))
		if (is_pci_id(c))
			snprintf(found, sizeof(found), "%s", c);
	if (found[0]) {
		if ((size_t)snprintf(buf, len, "%s", found) >= len)
			return -ENAMETOOLONG;
		return 0;
	}
	if (depth > 4)
		return -ENOENT;
	snprintf(slaves, sizeof(slaves), "%s/slaves", sys);
	d = opendir(slaves);
	if (!d)
		return -ENOENT;
	while ((e = readdir(d))) {
		char next[PATH_MAX];
		int r;

		if (e->d_name[0] == '.')
			continue;
		snprintf(next, sizeof(next), "/sys/class/block/%s", e->d_name);
		r = pci_of_sysblock(next, buf, len, depth + 1);
		if (r == 0) {
			closedir(d);
			return 0;
		}
	}
	closedir(d);
	return -ENOENT;
}

int kv_numa_pci_of_path(const char *path, char *buf, size_t len)
{
	char sys[64];
	struct stat st;

	if (stat(path, &st) < 0)
		return -errno;
	/* Major 0 is an anonymous device: tmpfs, overlay, NFS, FUSE. */
	if (major(st.st_dev) == 0)
		return -ENOENT;
	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u", major(st.st_dev),
		 minor(st.st_dev));
	return pci_of_sysblock(sys, buf, len, 0);
}

int kv_numa_node_of_path(const char *path, int *node)
{
	char pci[16];
	int r = kv_numa_pci_of_path(path, pci, sizeof(pci));

	if (r < 0)
		return r;
	return kv_numa_node_of_pci(pci, node);
}

int kv_numa_node_cpus(int node, char *buf, size_t len)
{
	hwloc_obj_t obj;
	int r = topology();

	if (r < 0)
		return r;
	obj = node_obj(node);
	if (!obj || !obj->cpuset)
		return -ENOENT;
	r = hwloc_bitmap_list_snprintf(buf, len, obj->cpuset);
	if (r < 0)
		return -EINVAL;
	return (size_t)r >= len ? -ENAMETOOLONG : 0;
}

int kv_numa_bind_thread(int node)
{
	hwloc_obj_t obj;
	int r = topology();

	if (r < 0)
		return r;
	obj = node_obj(node);
	if (!obj || !obj->cpuset || hwloc_bitmap_iszero(obj->cpuset))
		return -ENOENT;
	if (hwloc_set_cpubind(topo, obj->cpuset, HWLOC_CPUBIND_THREAD) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

int kv_numa_alloc(int node, size_t len, void **out)
{
	hwloc_obj_t obj;
	void *p;
	int r = topology();

	if (r < 0)
		return r;
	if (len == 0)
		return -EINVAL;
	obj = node_obj(node);
	if (!obj)
		return -ENOENT;
	p = hwloc_alloc_membind(topo, len, obj->nodeset, HWLOC_MEMBIND_BIND,
				HWLOC_MEMBIND_BYNODESET);
	if (!p)
		return errno ? -errno : -ENOMEM;
	*out = p;
	return 0;
}

void kv_numa_free(void *p, size_t len)
{
	if (p && topology() == 0)
		hwloc_free(topo, p, len);
}
