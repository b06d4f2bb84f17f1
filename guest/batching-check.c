// SPDX-License-Identifier: GPL-2.0
/*
 * batching-check: drive one TLB-flush batching mechanism over memory full of
 * known data, then read every page back.
 *
 * The run-time switches of the series (/sys/kernel/mm/tlb_batching/) choose
 * between a batched path and the one-at-a-time path it replaced.  Both must
 * leave memory exactly as the program expects; only the flush counts may
 * differ.  This program does the work of one mechanism, checks every page
 * against the pattern it wrote (or against zeroes where memory was
 * discarded), exits 1 on the first difference, and reports the counters of
 * the work and a digest of everything it read, so a test can compare the
 * two settings.  It does not touch the switch itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "unflush.h"

#define NR_HUGEPAGES	"/proc/sys/vm/nr_hugepages"
#define HVO		"/proc/sys/vm/hugetlb_optimize_vmemmap"
#define HUGE_2M		(2 * MiB)
#define WORDS		(PAGE_SIZE_4K / sizeof(uint64_t))

static const char usage[] =
"usage: batching-check zap|reclaim|migrate|hvo [--reps N] [--quick]\n"
"                      [--shape threads|single]\n"
"\n"
"  zap      64K mTHP memory: MADV_DONTNEED of a range that starts and ends\n"
"           inside folios, then munmap() of another (zap_pte_range())\n"
"  reclaim  MADV_PAGEOUT of 4K pages to swap, read back, and again: the\n"
"           second swap-out, of clean PTEs, is measured (try_to_unmap)\n"
"  migrate  move_pages() to the second node and back (try_to_migrate)\n"
"  hvo      hugetlb pages allocated with vm.hugetlb_optimize_vmemmap=1,\n"
"           filled through a MAP_HUGETLB mapping, then freed\n"
"\n"
"With --shape threads (the default) a helper thread stays busy on every\n"
"other CPU, so flushes have somewhere to go and reclaim and migration may\n"
"defer them.  Every page\n"
"is checked; prints one UNFLUSH-RESULT (experiment batching-check/<mode>)\n"
"with the counters of the work and checks.digest, a hash of all data read.\n";

static uint64_t digest;		/* FNV-1a of every word checked */
static long pages_checked;

static uint64_t pattern(size_t page, size_t word)
{
	return (page + 1) * 0x9e3779b97f4a7c15ULL ^ word;
}

static void fill(char *mem, size_t pages)
{
	for (size_t i = 0; i < pages; i++) {
		uint64_t *w = (uint64_t *)(mem + i * PAGE_SIZE_4K);

		for (size_t j = 0; j < WORDS; j++)
			w[j] = pattern(i, j);
	}
}

/* Page @i of @mem must hold its pattern, or zeroes if @zero. */
static void check_page(const char *what, const char *mem, size_t i, bool zero)
{
	const uint64_t *w = (const uint64_t *)(mem + i * PAGE_SIZE_4K);

	for (size_t j = 0; j < WORDS; j++) {
		uint64_t want = zero ? 0 : pattern(i, j);

		if (w[j] != want)
			die(1, "%s: page %zu word %zu reads %#llx, expected %#llx",
			    what, i, j, (unsigned long long)w[j],
			    (unsigned long long)want);
		digest = (digest ^ w[j]) * 1099511628211ULL;
	}
	pages_checked++;
}

static void check_all(const char *what, const char *mem, size_t pages)
{
	for (size_t i = 0; i < pages; i++)
		check_page(what, mem, i, false);
}

static char *map_private(size_t bytes)
{
	char *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED)
		die(1, "mmap of %zu bytes: %s", bytes, strerror(errno));
	return mem;
}

/*
 * Discard pages [a, b) of 64K folios with MADV_DONTNEED, starting and ending
 * inside a folio so zap_pte_range() meets partial batches too, and munmap
 * the last quarter; everything else must keep its data.
 */
static void run_zap(struct phase *p, struct fields *checks, bool quick)
{
	size_t bytes = quick ? 8 * MiB : 32 * MiB, pages = bytes / PAGE_SIZE_4K;
	size_t a = pages / 4 + 3, b = pages / 2 - 5, keep = pages * 3 / 4;
	char *mem;

	mthp_set_only(64);
	mem = map_anon_folios(bytes, 64, checks);
	fill(mem, pages);
	phase_begin(p);
	if (madvise(mem + a * PAGE_SIZE_4K, (b - a) * PAGE_SIZE_4K,
		    MADV_DONTNEED))
		die(1, "madvise(MADV_DONTNEED): %s", strerror(errno));
	if (munmap(mem + keep * PAGE_SIZE_4K, bytes - keep * PAGE_SIZE_4K))
		die(1, "munmap: %s", strerror(errno));
	phase_end(p);
	for (size_t i = 0; i < keep; i++)
		check_page("after MADV_DONTNEED and munmap", mem, i,
			   i >= a && i < b);
	munmap(mem, keep * PAGE_SIZE_4K);
}

/* How many of the pages of @mem are swapped out. */
static long swapped_pages(const char *mem, size_t pages)
{
	int fd = pagemap_open(0);
	long n = 0;

	for (size_t i = 0; i < pages; i++)
		n += swapped_entry(pagemap_read(fd, (uintptr_t)mem +
						i * PAGE_SIZE_4K));
	close(fd);
	return n;
}

static void page_out(char *mem, size_t bytes, size_t pages, const char *what,
		     struct fields *checks)
{
	long out;

	if (madvise(mem, bytes, MADV_PAGEOUT))
		die(1, "madvise(MADV_PAGEOUT): %s", strerror(errno));
	out = swapped_pages(mem, pages);
	field_int(checks, what, out);
	if (out < (long)pages * 9 / 10)
		die(1, "%s: only %ld of %zu pages are swapped out", what, out,
		    pages);
}

/*
 * Reclaim batches the flush of a clean PTE only: a dirty one must be
 * flushed before the page is written to swap (try_to_unmap_flush_dirty()),
 * so the first swap-out of freshly written memory flushes per page either
 * way.  The measured swap-out is the second: the pages were read back,
 * their PTEs are clean and their swap copies still valid.
 */
static void run_reclaim(struct phase *p, struct fields *checks, bool quick)
{
	size_t bytes = quick ? 4 * MiB : 16 * MiB, pages = bytes / PAGE_SIZE_4K;
	char *mem;

	require_swap(bytes);
	mthp_set_only(4);
	mem = map_private(bytes);
	fill(mem, pages);
	page_out(mem, bytes, pages, "swapped_dirty", checks);
	check_all("after the first swap-out", mem, pages);
	phase_begin(p);
	page_out(mem, bytes, pages, "swapped_clean", checks);
	phase_end(p);
	check_all("after the second swap-out", mem, pages);
	munmap(mem, bytes);
}

static void run_migrate(struct phase *p, struct fields *checks, bool quick)
{
	size_t bytes = quick ? 4 * MiB : 16 * MiB, pages = bytes / PAGE_SIZE_4K;
	struct mover mover;
	long there, back;
	int nodes[2];
	char *mem;

	if (node_list("has_memory", nodes, 2) < 2)
		die(1, "needs two NUMA nodes with memory (the lab's --node1)");
	mthp_set_only(4);
	mem = map_private(bytes);
	fill(mem, pages);
	mover_init(&mover, mem, bytes);
	mover_move(&mover, nodes[0]);
	phase_begin(p);
	there = mover_move(&mover, nodes[1]);
	back = mover_move(&mover, nodes[0]);
	phase_end(p);
	mover_free(&mover);
	field_int(checks, "moved_there", there);
	field_int(checks, "moved_back", back);
	if (there < (long)pages * 9 / 10 || back < (long)pages * 9 / 10)
		die(1, "only %ld and %ld of %zu pages moved", there, back, pages);
	check_all("after migrating there and back", mem, pages);
	munmap(mem, bytes);
}

/*
 * Allocating hugetlb pages through vm.nr_hugepages optimises their vmemmap
 * as a list; freeing them restores it as a list.  In between the pages
 * must work as memory.
 */
static void run_hvo(struct phase *p, struct fields *checks, bool quick)
{
	long n = quick ? 8 : 32;
	long long total;
	size_t pages = n * (HUGE_2M / PAGE_SIZE_4K);
	char num[32];
	char *mem;

	setting_write(HVO, "1");
	setting_write(NR_HUGEPAGES, "0");
	snprintf(num, sizeof(num), "%ld", n);
	phase_begin(p);
	if (!write_text(NR_HUGEPAGES, num))
		die(1, "writing %s: %s", NR_HUGEPAGES, strerror(errno));
	mem = mmap(NULL, n * HUGE_2M, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (mem == MAP_FAILED)
		die(1, "mmap of %ld hugetlb pages: %s", n, strerror(errno));
	fill(mem, pages);
	check_all("hugetlb page", mem, pages);
	munmap(mem, n * HUGE_2M);
	if (!write_text(NR_HUGEPAGES, "0"))
		die(1, "writing %s: %s", NR_HUGEPAGES, strerror(errno));
	phase_end(p);
	total = meminfo_value("HugePages_Total");
	field_int(checks, "hugepages", n);
	if (total != 0)
		die(1, "%lld hugetlb pages left after freeing", total);
}

int main(int argc, char **argv)
{
	static const char *const modes[] = { "zap", "reclaim", "migrate", "hvo" };
	void (*const run[])(struct phase *, struct fields *, bool) = {
		run_zap, run_reclaim, run_migrate, run_hvo };
	char experiment[64], hex[32];
	const char *mode = NULL;
	struct run_opts o;
	int cpu, m;

	/* the mechanism comes first; the options after it are the usual ones */
	if (argc > 1 && argv[1][0] != '-') {
		mode = argv[1];
		argv[1] = argv[0];
		argc--;
		argv++;
	}
	run_opts_init(&o, usage, true);
	parse_run_args(argc, argv, &o, NULL, 0);
	if (!mode)
		usage_error("say which mechanism: zap, reclaim, migrate or hvo");
	for (m = 0; m < 4 && strcmp(mode, modes[m]); m++)
		;
	if (m == 4)
		usage_error("unknown mechanism '%s': zap, reclaim, migrate or hvo",
			    mode);
	snprintf(experiment, sizeof(experiment), "batching-check/%s", mode);

	online_cpus(&cpu, 1);
	pin_main(cpu);
	for (int rep = 0; rep < o.reps; rep++) {
		struct fields checks = { 0 };
		struct phase p = { 0 };
		struct busy *busy;

		digest = 14695981039346656037ULL;
		pages_checked = 0;
		busy = shape_start(&o, cpu, NULL, 0);
		run[m](&p, &checks, o.quick);
		busy_stop(busy);
		snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)digest);
		field_str(&checks, "digest", hex);
		field_int(&checks, "pages_checked", pages_checked);
		report_result(experiment, shape_name(&o), rep, &p, NULL, &checks);
		phase_free(&p);
		free(checks.b.s);
	}
	return 0;
}
