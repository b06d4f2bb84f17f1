// SPDX-License-Identifier: GPL-2.0
/*
 * anon-swap-sharers: swap-out of anonymous 64K folios mapped by more
 * processes than a swap count holds must neither lose data nor leak a
 * swap entry (seed 002, batched unmap at swap-out).
 *
 * A swap map entry counts up to SWAP_MAP_MAX (62) mappings; beyond that the
 * count goes on in a continuation page, which swap_duplicate() allocates.
 * The batched path raises the counts of a whole range of entries at once
 * with swap_duplicate_nr(), which must refuse a range any of whose entries
 * needs a continuation before it changes one, then go entry by entry.  A
 * range whose entries are at different counts is what tells that apart
 * from a raise that stops half-way: the first entries raised twice, a count
 * that never comes back down.
 *
 * So: @folios 64K folios, filled with a pattern, shared by fork() with
 * @sharers children, the first @uneven and the last @uneven of which unmap
 * page 0 of every folio first.  The rmap walk visits the mappings in fork
 * order (or the reverse), so by the time pages 1-15 of a folio need a
 * continuation, its page 0 is @uneven counts behind.  The folios, and
 * nothing else, are charged to a memory cgroup of their own, whose
 * memory.reclaim swaps them out (MADV_PAGEOUT leaves shared folios
 * alone).  Then every page of every process must be a swap entry; each
 * child in turn reads its pages back and checks them, and exits, which
 * walks the counts down through the continuation; the parent checks its
 * own and unmaps them.  Last, swapoff of the swap device must
 * finish: swapoff waits for every entry's count to reach zero, so a count
 * that leaked keeps it looping until the alarm interrupts it.  The device
 * is then swapped on again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/swap.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: anon-swap-sharers [--folios N] [--sharers N] [--uneven N] [--reps N]\n"
"\n"
"Share N (default 64) anonymous 64K folios with --sharers (default 80)\n"
"child processes, more mappings than a swap map entry counts without a\n"
"continuation (62), the first and the last --uneven (default 10) of which\n"
"unmap page 0 of every folio; swap them all out through a memory cgroup's\n"
"memory.reclaim, then check that every mapping became a swap entry, that\n"
"every process reads its data back, and that swapoff then finds no swap\n"
"entry still counted (it is swapped on again).  Needs root and one swap\n"
"device with nothing in it (the lab's --zram).  Prints one UNFLUSH-RESULT\n"
"line per repetition (id anon-swap-sharers).\n"
"KTAP (lib/ktap.h): one test, anon-swap-sharers, after the result lines.\n"
"Exit 0: every repetition passed; 1: a check failed (data lost, a mapping\n"
"not swapped, swapoff not finished: a swap count leaked) or a precondition\n"
"failed, stopping at once, with no result line for that repetition (the\n"
"test's KTAP line says why); 4: skipped, the kernel lacks 64K anonymous\n"
"folios, their stats or memory.reclaim; 2: usage.\n";

#define FOLIO_KB	64
#define FOLIO_PAGES	16
#define WORDS		(PAGE_SIZE_4K / sizeof(uint64_t))
#define RECLAIM_TRIES	30
#define SWAPOFF_SECONDS	60

static long nfolios = 64, nsharers = 80, nuneven = 10;
static char swap_dev[128];

static uint64_t word(const char *base, long page, size_t w)
{
	return 0x5a4a5245ULL << 32 ^ (uint64_t)page << 12 ^ w ^
	       (uint64_t)(uintptr_t)base;
}

/* whether child @k (0: the parent) unmaps page 0 of every folio */
static bool uneven(long k)
{
	return k && (k <= nuneven || k > nsharers - nuneven);
}

/* whether @page is one the child @k (0: the parent) still maps */
static bool maps_page(long k, long page)
{
	return !uneven(k) || page % FOLIO_PAGES;
}

/* 0 if @k's pages hold the pattern; else 1, the first bad word printed */
static int check_data(const char *base, long k)
{
	for (long i = 0; i < nfolios * FOLIO_PAGES; i++) {
		const uint64_t *q = (const uint64_t *)(base + i * PAGE_SIZE_4K);

		if (!maps_page(k, i))
			continue;
		for (size_t w = 0; w < WORDS; w++) {
			if (q[w] == word(base, i, w))
				continue;
			fprintf(stderr, "anon-swap-sharers: sharer %ld, page %ld word %zu read back %#llx, expected %#llx: data lost\n",
				k, i, w, (unsigned long long)q[w],
				(unsigned long long)word(base, i, w));
			return 1;
		}
	}
	return 0;
}

/*
 * A child: unmap page 0 of every folio if it is one of the uneven ones,
 * say so, and wait; told to go on, read every page back and exit with the
 * verdict.  It touches nothing before that, so that no accessed bit of its
 * keeps reclaim from taking the folios.
 */
static void sharer(char *base, long k, int ready, int go)
{
	char c;

	/* a parent that dies leaves no sharer behind, waiting */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() == 1)
		_exit(2);
	if (uneven(k))
		for (long f = 0; f < nfolios; f++)
			if (madvise(base + f * FOLIO_KB * KiB, PAGE_SIZE_4K,
				    MADV_DONTNEED))
				_exit(2);
	if (write(ready, "r", 1) != 1)
		_exit(2);
	if (read(go, &c, 1) != 1)
		_exit(2);
	_exit(check_data(base, k));
}

/*
 * How many of the pages of @base that sharer @k maps are swap entries in
 * @pid's page tables; dies if a page it unmapped is mapped again.
 */
static long swapped_pages(pid_t pid, long k, const char *base)
{
	int fd = pagemap_open(pid);
	long swapped = 0;

	for (long i = 0; i < nfolios * FOLIO_PAGES; i++) {
		uint64_t v = pagemap_read(fd, (uintptr_t)base +
					  i * PAGE_SIZE_4K);

		if (!maps_page(k, i)) {
			if (v & (PM_PRESENT | PM_SWAP))
				die(1, "sharer %ld: page %ld, unmapped before the swap-out, is mapped again (pagemap %#llx)",
				    k, i, (unsigned long long)v);
			continue;
		}
		swapped += (v & PM_SWAP) != 0;
	}
	close(fd);
	return swapped;
}

static long expected_swapped(long k)
{
	return uneven(k) ? nfolios * (FOLIO_PAGES - 1) : nfolios * FOLIO_PAGES;
}

/* memory.reclaim until the parent's pages are all swap entries */
static int reclaim(const char *cgroup, const char *base)
{
	char path[600], amount[32];
	int tries;

	snprintf(path, sizeof(path), "%s/memory.reclaim", cgroup);
	snprintf(amount, sizeof(amount), "%ld", nfolios * FOLIO_KB * (long)KiB);
	for (tries = 1; tries <= RECLAIM_TRIES; tries++) {
		/* EAGAIN: less than asked was reclaimed; look and go on */
		if (!write_text(path, amount) && errno != EAGAIN)
			die(1, "cannot write %s: %s", path, strerror(errno));
		if (swapped_pages(getpid(), 0, base) == expected_swapped(0))
			return tries;
	}
	die(1, "%ld of %ld pages swapped out after %d writes to %s: reclaim does not take the shared folios",
	    swapped_pages(getpid(), 0, base), expected_swapped(0),
	    RECLAIM_TRIES, path);
}

/*
 * The one swap device, which must be empty: the swapoff at the end has to
 * bring back only what this program put there, within SWAPOFF_SECONDS, and
 * must not be done to a machine's swap in use.
 */
static void find_swap_device(void)
{
	char line[256], dev[128];
	long long used = 0, u;
	FILE *f = fopen("/proc/swaps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%127s %*s %*s %lld", dev, &u) == 2 &&
		    dev[0] == '/') {
			if (swap_dev[0])
				die(1, "more than one swap device in /proc/swaps: the swapoff check needs exactly one");
			snprintf(swap_dev, sizeof(swap_dev), "%s", dev);
			used = u;
		}
	}
	if (f)
		fclose(f);
	if (!swap_dev[0])
		die(1, "no swap device in /proc/swaps (the lab's --zram SIZE)");
	if (used)
		die(1, "swap device %s has %lld kB in use: the swapoff check needs a swap device of its own (the lab's --zram SIZE)",
		    swap_dev, used);
}

/*
 * swapoff, in a child that an alarm ends: a swap count that leaked keeps
 * try_to_unuse() looking for a mapping that does not exist.  Returns
 * whether it finished; the device is on again either way.
 */
static bool swapoff_finishes(void)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (!pid) {
		alarm(SWAPOFF_SECONDS);
		_exit(swapoff(swap_dev) ? 3 : 0);
	}
	if (waitpid(pid, &status, 0) != pid)
		die(1, "waitpid: %s", strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
		if (swapon(swap_dev, 0))
			die(1, "swapon %s after the check: %s", swap_dev,
			    strerror(errno));
		return true;
	}
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		return false;
	die(1, "swapoff %s failed (status %#x), not for want of time: see the kernel log",
	    swap_dev, status);
}

/*
 * @bytes of 64K folios filled with the pattern, charged to the cgroup, and
 * nothing else with them.  Every other page the 81 processes share would
 * also need a swap count continuation if reclaim took it, and the first
 * continuation for a page of the swap map serves all its entries from then
 * on: had a heap or stack page got there first, the folios' ranges would
 * never be refused.  So between joining the cgroup and leaving it, only
 * system calls and stores to the new mapping: no snapshot, no malloc().
 */
static char *map_charged_folios(size_t bytes, struct fields *checks)
{
	struct phase setup = { 0 };
	long long got;
	char *base;

	phase_begin(&setup);
	memcg_join();
	base = map_aligned(bytes, 2 * MiB);
	if (madvise(base, bytes, MADV_HUGEPAGE))
		die(1, "madvise(MADV_HUGEPAGE): %s (needs CONFIG_TRANSPARENT_HUGEPAGE)",
		    strerror(errno));
	for (long i = 0; i < nfolios * FOLIO_PAGES; i++)
		for (size_t w = 0; w < WORDS; w++)
			((uint64_t *)(base + i * PAGE_SIZE_4K))[w] = word(base, i, w);
	memcg_leave();
	phase_end(&setup);
	got = phase_delta(&setup, "mthp/64kB/anon_fault_alloc");
	phase_free(&setup);
	field_int(checks, "mthp_alloc_64kB", got);
	if (got < nfolios)
		die(1, "only %lld of %ld folios were 64K (mthp/64kB/anon_fault_alloc); free or compact memory",
		    got, nfolios);
	return base;
}

static void one_rep(int rep, const char *cgroup)
{
	struct fields checks = { 0 }, extra = { 0 };
	size_t bytes = nfolios * FOLIO_KB * KiB;
	int ready[2], tries;
	long swapped_all = 0;
	long long whole;
	struct phase p = { 0 };
	pid_t *kids;
	int *go;
	char *base, c;

	kids = calloc(nsharers + 1, sizeof(*kids));
	go = calloc(nsharers + 1, sizeof(*go));
	if (!kids || !go)
		die(1, "out of memory");
	base = map_charged_folios(bytes, &checks);
	/* old and inactive before the children copy the PTEs */
	if (madvise(base, bytes, MADV_COLD))
		die(1, "madvise(MADV_COLD): %s", strerror(errno));

	if (pipe(ready))
		die(1, "pipe: %s", strerror(errno));
	for (long k = 1; k <= nsharers; k++) {
		int fds[2];

		if (pipe(fds))
			die(1, "pipe: %s", strerror(errno));
		kids[k] = fork();
		if (kids[k] < 0)
			die(1, "fork of sharer %ld: %s", k, strerror(errno));
		if (!kids[k]) {
			close(fds[1]);
			close(ready[0]);
			sharer(base, k, ready[1], fds[0]);
		}
		close(fds[0]);
		go[k] = fds[1];
		if (read(ready[0], &c, 1) != 1)
			die(1, "sharer %ld did not get ready", k);
	}

	phase_begin(&p);
	tries = reclaim(cgroup, base);
	phase_end(&p);
	/* split folios would go through the one-at-a-time path only */
	whole = phase_delta(&p, "mthp/64kB/swpout");
	if (whole < nfolios)
		die(1, "%lld of %ld 64K folios were swapped out whole (mthp/64kB/swpout); the rest were split first",
		    whole, nfolios);
	for (long k = 0; k <= nsharers; k++) {
		long s = swapped_pages(k ? kids[k] : getpid(), k, base);

		if (s != expected_swapped(k))
			die(1, "sharer %ld: %ld of its %ld pages are swap entries after the swap-out; the folios were not unmapped from every process",
			    k, s, expected_swapped(k));
		swapped_all += s;
	}

	/* one at a time, so every exit walks the counts down on its own */
	for (long k = 1; k <= nsharers; k++) {
		int status;

		if (write(go[k], "g", 1) != 1)
			die(1, "cannot tell sharer %ld to go on", k);
		if (waitpid(kids[k], &status, 0) != kids[k])
			die(1, "waitpid: %s", strerror(errno));
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			die(1, "sharer %ld did not read its data back (status %#x)",
			    k, status);
		close(go[k]);
	}
	if (check_data(base, 0))
		die(1, "the parent did not read its data back");
	munmap(base, bytes);
	close(ready[0]);
	close(ready[1]);

	if (!swapoff_finishes())
		die(1, "swapoff of %s did not finish in %d s after every sharer unmapped its pages: a swap count leaked",
		    swap_dev, SWAPOFF_SECONDS);

	field_int(&checks, "folios", nfolios);
	field_int(&checks, "sharers", nsharers);
	field_int(&checks, "uneven", nuneven);
	field_int(&checks, "swap_entries_mapped", swapped_all);
	field_int(&checks, "folios_swapped_out_whole", whole);
	field_int(&checks, "swapoff_finished", 1);
	field_int(&extra, "reclaim_writes", tries);
	report_result("anon-swap-sharers", "single", rep, &p, &extra, &checks);
	phase_free(&p);
	free(kids);
	free(go);
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "folios" }, { .name = "sharers" },
				  { .name = "uneven" } };
	struct run_opts o;
	const char *cgroup, *why;
	char path[600];

	run_opts_init(&o, usage, false);
	parse_run_args(argc, argv, &o, args, 3);
	nfolios = arg_count(&args[0], 1, nfolios);
	nsharers = arg_count(&args[1], 1, nsharers);
	nuneven = arg_count(&args[2], 0, nuneven);
	if (2 * nuneven > nsharers)
		usage_error("--uneven %ld twice is more than --sharers %ld",
			    nuneven, nsharers);

	ktap_plan(1);
	ktap_test("anon-swap-sharers");

	why = mthp_missing(FOLIO_KB);
	if (why)
		ktap_skip_exit("%s", why);
	require_swap(2 * nfolios * FOLIO_KB * KiB);
	find_swap_device();
	mthp_set_only(FOLIO_KB);
	cgroup = memcg_create("anon-swap-sharers", 0);
	snprintf(path, sizeof(path), "%s/memory.reclaim", cgroup);
	if (!path_exists(path))
		ktap_skip_exit("no %s: the swap-out needs a memory cgroup's memory.reclaim (Linux 5.19 or later)",
			       path);
	for (int rep = 0; rep < o.reps; rep++)
		one_rep(rep, cgroup);
	/* every failed check died, its KTAP line saying why */
	ktap_result(true);
	return ktap_status();
}
