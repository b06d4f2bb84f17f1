// SPDX-License-Identifier: GPL-2.0
/* Tiered memory: a CPU-less node as the target of reclaim's demotion. */
#define _GNU_SOURCE
#include "roload.h"

bool tiering_enable(void)
{
	if (cpuless_node() < 0)
		return false;
	setting_write("/sys/kernel/mm/numa/demotion_enabled", "1");
	/* promotion back to the fast node needs NUMA balancing in tiering mode */
	if (path_exists("/proc/sys/kernel/numa_balancing"))
		setting_write("/proc/sys/kernel/numa_balancing", "2");
	return true;
}
