/* NUMA placement on this machine: the topology loads, paths and PCI
 * devices map to a node or say -ENOENT, binding and node-local
 * allocation work. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <kv/kv.h>
#include "check.h"

/* CPU list text ("0-3,8") to a set. */
static int parse_cpus(const char *list, cpu_set_t *set)
{
	const char *p = list;

	CPU_ZERO(set);
	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;

		if (end == p)
			return -1;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		for (long c = a; c <= b; c++)
			CPU_SET(c, set);
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

static int check_path(const char *path, int nodes)
{
	char pci[32];
	int node = -1, via_pci = -1, r;

	r = kv_numa_node_of_path(path, &node);
	CHECK(r == 0 || r == -ENOENT, "node of %s: %s", path, kv_strerror(r));
	if (r == 0) {
		CHECK(node >= 0 && node < 64 * nodes, "node %d of %s", node, path);
		CHECK(kv_numa_pci_of_path(path, pci, sizeof(pci)) == 0, "pci of %s", path);
		CHECK(kv_numa_node_of_pci(pci, &via_pci) == 0 && via_pci == node,
		      "%s: node %d by path, %d by its PCI device %s", path, node,
		      via_pci, pci);
		printf("%s: PCI %s, NUMA node %d\n", path, pci, node);
	} else {
		printf("%s: no PCI storage device behind it\n", path);
	}
	return 0;
}

static int check_tmpfs(void)
{
	struct statfs sf;
	int node;

	/* An anonymous filesystem has no device to be near. */
	if (statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC)
		CHECK(kv_numa_node_of_path("/dev/shm", &node) == -ENOENT,
		      "tmpfs mapped to a node");
	CHECK(kv_numa_node_of_path("/nonexistent/kv-test", &node) == -ENOENT,
	      "missing path");
	CHECK(kv_numa_node_of_pci("ffff:ff:1f.7", &node) == -ENOENT, "bogus PCI id");
	return 0;
}

static int check_bind_alloc(void)
{
	char cpus[1024], tiny[1];
	cpu_set_t want, got;
	unsigned char *p;
	void *m;
	int r;

	CHECK(kv_numa_node_cpus(0, cpus, sizeof(cpus)) == 0 && cpus[0], "node 0 cpus");
	CHECK(kv_numa_node_cpus(0, tiny, sizeof(tiny)) == -ENAMETOOLONG, "short buffer");
	CHECK(parse_cpus(cpus, &want) == 0, "cpu list '%s'", cpus);
	r = kv_numa_bind_thread(0);
	CHECK(r == 0, "bind to node 0: %s", kv_strerror(r));
	CHECK(sched_getaffinity(0, sizeof(got), &got) == 0, "getaffinity");
	CHECK(CPU_COUNT(&got) > 0, "no cpu left after binding");
	for (int c = 0; c < CPU_SETSIZE; c++)
		CHECK(!CPU_ISSET(c, &got) || CPU_ISSET(c, &want),
		      "bound thread may run on cpu %d outside node 0 (%s)", c, cpus);
	CHECK(kv_numa_bind_thread(99999) == -ENOENT, "bind to a missing node");
	r = kv_numa_alloc(0, 1 << 20, &m);
	CHECK(r == 0, "alloc on node 0: %s", kv_strerror(r));
	p = m;
	memset(p, 0x5a, 1 << 20);
	CHECK(p[0] == 0x5a && p[(1 << 20) - 1] == 0x5a, "node memory");
	kv_numa_free(m, 1 << 20);
	CHECK(kv_numa_alloc(99999, 4096, &m) == -ENOENT, "alloc on a missing node");
	CHECK(kv_numa_alloc(0, 0, &m) == -EINVAL, "zero-length alloc");
	printf("node 0: cpus %s\n", cpus);
	return 0;
}

/* Where a GPU exists, its node is found from its PCI bus id. */
static int check_gpu(void)
{
	struct kv_dma *dma;
	char pci[32];
	int n, node, r;

	if (kv_dma_device_count(&n) < 0) {
		printf("no CUDA device (%s): GPU placement not checked\n",
		       kv_error_detail());
		return 0;
	}
	CHECK(kv_dma_open(0, NULL, &dma) == 0, "open device 0");
	CHECK(kv_dma_pci_bus_id(dma, pci, sizeof(pci)) == 0, "bus id");
	r = kv_numa_node_of_pci(pci, &node);
	CHECK(r == 0, "GPU %s: %s", pci, kv_strerror(r));
	CHECK(kv_dma_numa_node(dma, &n) == 0 && n == node, "kv_dma_numa_node");
	printf("GPU %s: NUMA node %d\n", pci, node);
	kv_dma_close(dma);
	return 0;
}

int main(void)
{
	int nodes = kv_numa_node_count();

	if (nodes < 1) {
		fprintf(stderr, "hwloc topology: %s\n", kv_strerror(nodes));
		return 1;
	}
	printf("%d NUMA node(s)\n", nodes);
	check_path("/", nodes);
	check_path("/tmp", nodes);
	check_tmpfs();
	check_bind_alloc();
	check_gpu();
	return failures ? 1 : 0;
}
