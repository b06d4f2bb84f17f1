/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Seed 001's (LUF's) read-only streaming: the pieces ro-reclaim-tiering
 * measures it with, and an endless form of it as a background load for
 * programs that measure other work while it runs (luf-cost).  Declared
 * apart from unflush.h, which it builds on.
 */
#ifndef UNFLUSH_ROLOAD_H
#define UNFLUSH_ROLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "unflush.h"

/* --- tiering.c --- */

/*
 * If a node has memory but no CPU, make it reclaim's demotion target:
 * /sys/kernel/mm/numa/demotion_enabled=1 and kernel.numa_balancing=2
 * (promotion back), both restored at exit.  False if there is no such node.
 */
bool tiering_enable(void);

/* --- roload.c --- */

/*
 * Drop @path's clean page cache (POSIX_FADV_DONTNEED), so the next reader
 * reads it, and is charged for it, anew; returns the pages still resident
 * (dirty, mapped, or tmpfs, which cannot be dropped).
 */
long long evict_file(const char *path);
/*
 * mmap() all of @path (opened read-only) with @prot and @flags; its size in
 * *@len if @len.  Exit 1 with a message if it cannot be opened or mapped.
 */
void *map_file(const char *path, int prot, int flags, size_t *len);

#define ROLOAD_MAX_PROCS	64

/*
 * One process per file (a file named twice gets two), each in a memory
 * cgroup of the load's own (memcg_create(), memory.max = @limit), mapping its
 * file MAP_SHARED PROT_READ and reading one byte per 4K page with @threads
 * threads, pass after pass, until roload_stop(); all of them together at
 * most @rate pages a second if @rate > 0.  Thread t is pinned to the
 * (t + 1) mod ncpus-th usable CPU (fewer threads than CPUs leave the first
 * CPU, the caller's, alone) and reads a slice of its own.  They run at the
 * caller's priority, as seed 001's instances would beside other work: LUF
 * defers a flush only while the mm runs on another CPU too, so readers kept
 * off a CPU by a lower priority would leave it little to do.
 */
struct roload {
	_Atomic int stop;		/* main -> readers */
	_Atomic int streaming;		/* processes that have started */
	_Atomic long long pages;	/* pages read so far, every process */
	pid_t pids[ROLOAD_MAX_PROCS];
	int nprocs, threads;
	double thread_rate;		/* pages/s of each thread, 0: no limit */
};
/*
 * Make the cgroup, drop the files' page cache, fork the readers, and return
 * once they stream and reclaim has begun (pgsteal moved; exit 1 if it does
 * not within @warmup_s seconds).  A cleanup kills the readers at exit, before
 * the cgroup is removed.
 */
struct roload *roload_start(char **files, int nfiles, int threads,
			    size_t limit, double rate, double warmup_s);
/* Pages the readers have read so far. */
long long roload_pages(const struct roload *l);
/* Stop the readers and wait for them; exit 1 if one failed. */
void roload_stop(struct roload *l);

#endif
