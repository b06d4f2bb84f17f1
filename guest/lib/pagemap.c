// SPDX-License-Identifier: GPL-2.0
/*
 * /proc/PID/pagemap: one 64-bit entry per virtual page, read to see whether
 * a page is mapped, swapped out, and at which PFN (the bits are in
 * unflush.h).  No read falls back to a zero entry: it would pass for "not
 * mapped, not swapped" and turn an error into a verdict on the kernel.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "unflush.h"

int pagemap_open(pid_t pid)
{
	char path[64];
	int fd;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/pagemap");
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(1, "cannot open %s: %s", path, strerror(errno));
	return fd;
}

bool pagemap_try(int fd, uintptr_t addr, uint64_t *e)
{
	off_t off = (off_t)(addr / PAGE_SIZE_4K) * sizeof(*e);

	errno = 0;
	return pread(fd, e, sizeof(*e), off) == sizeof(*e);
}

uint64_t pagemap_read(int fd, uintptr_t addr)
{
	uint64_t e;

	if (!pagemap_try(fd, addr, &e))
		die(1, "read of the pagemap entry of %#lx failed: %s",
		    (unsigned long)addr,
		    errno ? strerror(errno) : "short read (has the process exited?)");
	return e;
}

uint64_t present_pfn(uint64_t e)
{
	return e & PM_PRESENT ? e & PM_PFN : 0;
}

bool swapped_entry(uint64_t e)
{
	return e & PM_SWAP;
}
