#ifndef KV_NUMA_H
#define KV_NUMA_H

/*
 * Placement with hwloc: the NUMA node nearest a GPU (by PCI bus id) or
 * the storage device under a path, its cores, binding a worker thread
 * there and allocating staging memory on it.  The topology is loaded
 * once per process.
 */

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of NUMA nodes (at least 1 once the topology loads). */
int kv_numa_node_count(void);

/* Node nearest a PCI device ("0000:3b:00.0"); -ENOENT if hwloc does
 * not know the device or it has no local node. */
int kv_numa_node_of_pci(const char *bus_id, int *node);

/* Node nearest the block device that holds path (its PCI controller);
 * -ENOENT for a filesystem with no PCI device behind it (tmpfs,
 * overlay, network). */
int kv_numa_node_of_path(const char *path, int *node);

/* The PCI bus id of the block device holding path, into buf. */
int kv_numa_pci_of_path(const char *path, char *buf, size_t len);

/* The node's cores as a list ("0-15,32-47"). */
int kv_numa_node_cpus(int node, char *buf, size_t len);

/* Bind the calling thread to the node's cores. */
int kv_numa_bind_thread(int node);

/* len bytes bound to node; free with kv_numa_free(p, len). */
int kv_numa_alloc(int node, size_t len, void **out);
void kv_numa_free(void *p, size_t len);

#ifdef __cplusplus
}
#endif

#endif
