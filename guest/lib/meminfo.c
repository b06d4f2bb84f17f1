// SPDX-License-Identifier: GPL-2.0
/* /proc/meminfo, and the swap an experiment needs before it starts. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "unflush.h"

long long meminfo_value(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	size_t len = strlen(key), cap = 0;
	long long value = -1;
	char *line = NULL;

	if (!f)
		die(1, "cannot open /proc/meminfo: is /proc mounted?");
	while (getline(&line, &cap, f) > 0) {
		if (!strncmp(line, key, len) && line[len] == ':') {
			value = strtoll(line + len + 1, NULL, 10);
			break;
		}
	}
	free(line);
	fclose(f);
	return value;
}

void require_swap(size_t bytes)
{
	long long total = meminfo_value("SwapTotal");
	long long free_kb = meminfo_value("SwapFree");

	if (total <= 0)
		die(1, "no swap configured: this experiment swaps out; set up swap first (the lab's init does zram when asked; or mkswap + swapon a device)");
	if ((unsigned long long)free_kb * KiB < bytes)
		die(1, "only %lld MiB of swap free, %zu MiB needed; add swap or use a smaller --mem",
		    free_kb / 1024, (size_t)(bytes / MiB));
}
