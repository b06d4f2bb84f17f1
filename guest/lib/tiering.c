// SPDX-License-Identifier: GPL-2.0
/* Tiered memory: a CPU-less node as the target of reclaim's demotion. */
#define _GNU_SOURCE
#include "roload.h"

bool tiering_enable(void)
{
	int mem_nodes[64], cpu_nodes[64], nmem, ncpu;
	bool cpuless = false;

	nmem = node_list("has_memory", mem_nodes, 64);
	ncpu = node_list("has_cpu", cpu_nodes, 64);
	for (int m = 0; m < nmem; m++) {
		bool has_cpu = false;

		for (int c = 0; c < ncpu; c++)
			has_cpu |= cpu_nodes[c] == mem_nodes[m];
		cpuless |= !has_cpu;
	}
	if (!cpuless || ncpu <= 0)
		return false;
	setting_write("/sys/kernel/mm/numa/demotion_enabled", "1");
	/* promotion back to the fast node needs NUMA balancing in tiering mode */
	if (path_exists("/proc/sys/kernel/numa_balancing"))
		setting_write("/proc/sys/kernel/numa_balancing", "2");
	return true;
}
