// SPDX-License-Identifier: GPL-2.0
/*
 * anon-unmap-rollback: swap-out of anonymous 64K folios must keep every
 * page's own PTE state, and a swap-out that fails must leave the folio
 * mapped exactly as it was (seed 002, batched unmap at swap-out).
 *
 * The batched path of try_to_unmap_one() clears all the PTEs of a folio
 * before it knows whether it can finish; if it cannot (the folio is pinned,
 * a swap count cannot be raised), it has to put every PTE back with its own
 * bits.  Pages of one folio are given different soft-dirty states, and
 * whole folios uffd-wp, so that a rollback to one merged PTE value, or no
 * rollback at all, shows in /proc/self/pagemap.
 *
 * Part a (pinned): a folio is swapped out while zram refuses to store
 * anything, so it stays in the swap cache; it is read back (the same
 * folio, same PFNs: this also shows the swap PTEs kept the exclusive bit,
 * else the pin below would have copied the page), one page of it is
 * pinned with gup_test, and MADV_PAGEOUT must fail to unmap it: every PTE
 * present, same PFN, same soft-dirty and uffd-wp bit, data unchanged, and a
 * soft-dirty-clean page still write-protected (writing it sets soft-dirty).
 * Part c (pageout): every page reaches swap with its own bits, and reads
 * back.  Part b (swap full): swap is filled with other memory until only
 * half the folios fit; every page is present or swapped, with its bits,
 * and reads back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: anon-unmap-rollback [--uffd-wp 0|1] [--soft-dirty 0|1] [--reps N]\n"
"\n"
"Swap out anonymous memory backed by 64K folios whose pages have different\n"
"soft-dirty states (and some folios uffd-wp), and check every page's PTE\n"
"state in /proc/self/pagemap and its data: (a) a pinned folio that the\n"
"kernel fails to unmap stays mapped exactly as it was, (b) with swap full\n"
"every page is mapped or swapped with its own bits, (c) a normal pageout\n"
"swaps every page with its own bits.  Needs root, swap on zram,\n"
"CONFIG_GUP_TEST and CONFIG_MEM_SOFT_DIRTY; --uffd-wp 0 skips uffd-wp,\n"
"--soft-dirty 0 soft-dirty bits (arm64 has neither): presence, PFNs,\n"
"exclusive bits and data are still checked.\n"
"Prints one UNFLUSH-RESULT line per repetition (id anon-unmap-rollback).\n"
"KTAP (lib/ktap.h): one test, anon-unmap-rollback, after the result lines.\n"
"Exit 0: every page of every repetition kept its state and data; 1: the\n"
"first mismatch, or a precondition failed, with no result line for that\n"
"repetition (the test's KTAP line says why); 4: skipped, the kernel lacks\n"
"64K anonymous folios or their stats, gup_test, or (unless --soft-dirty 0\n"
"or --uffd-wp 0) soft-dirty bits or userfaultfd's write-protection;\n"
"2: usage.\n";

#define FOLIO_KB	64
#define FOLIO_PAGES	16	/* FOLIO_KB / 4K */
#define WORDS		(PAGE_SIZE_4K / sizeof(uint64_t))

/* mm/gup_test.h: not a uapi header, so the two requests are spelled here */
struct pin_longterm_test {
	uint64_t addr;
	uint64_t size;
	uint32_t flags;
};
#define PIN_LONGTERM_TEST_START	_IOW('g', 7, struct pin_longterm_test)
#define PIN_LONGTERM_TEST_STOP	_IO('g', 8)
#define GUP_TEST_PATH		"/sys/kernel/debug/gup_test"

struct region {
	const char *name;
	char *p;
	int pages;
	uint64_t *gen;		/* data generation of each page */
	bool *sd, *wp;		/* expected soft-dirty and uffd-wp */
	uint64_t *pfn;		/* PFNs while first mapped */
};

static int pagemap_fd = -1, uffd = -1;
static bool use_wp = true;
static bool use_sd = true;
static char mem_limit_path[128];

static uint64_t word(const struct region *r, int page, size_t w)
{
	return 0x5eed0000000000ULL ^ ((uint64_t)page << 24) ^
	       (r->gen[page] << 12) ^ w ^ (uint64_t)(uintptr_t)r->p;
}

static void fill_page(struct region *r, int page)
{
	uint64_t *q = (uint64_t *)(r->p + page * PAGE_SIZE_4K);

	for (size_t w = 0; w < WORDS; w++)
		q[w] = word(r, page, w);
}

static void check_data(const struct region *r, const char *when)
{
	for (int i = 0; i < r->pages; i++) {
		const uint64_t *q = (const uint64_t *)(r->p + i * PAGE_SIZE_4K);

		for (size_t w = 0; w < WORDS; w++)
			if (q[w] != word(r, i, w))
				die(1, "%s, %s: page %d word %zu is %#llx, expected %#llx: data lost",
				    r->name, when, i, w, (unsigned long long)q[w],
				    (unsigned long long)word(r, i, w));
	}
}

static uint64_t pagemap(const struct region *r, int page)
{
	return pagemap_read(pagemap_fd, (uintptr_t)r->p + page * PAGE_SIZE_4K);
}

enum want { WANT_PRESENT, WANT_SWAPPED, WANT_EITHER };

/*
 * Every page's pagemap entry against what it must be; returns how many pages
 * were swapped.  @same_pfn: present pages must still have their first PFNs.
 */
static int check_ptes(const struct region *r, enum want want, bool same_pfn,
		      const char *when)
{
	int swapped = 0;

	for (int i = 0; i < r->pages; i++) {
		uint64_t v = pagemap(r, i);
		bool present = v & PM_PRESENT, swap = v & PM_SWAP;

		if (!present && !swap)
			die(1, "%s, %s: page %d is neither mapped nor swapped (pagemap %#llx): its PTE was lost",
			    r->name, when, i, (unsigned long long)v);
		if (want == WANT_PRESENT && !present)
			die(1, "%s, %s: page %d was swapped out, it must still be mapped (pagemap %#llx)",
			    r->name, when, i, (unsigned long long)v);
		if (want == WANT_SWAPPED && !swap)
			die(1, "%s, %s: page %d is still mapped, it must be swapped (pagemap %#llx)",
			    r->name, when, i, (unsigned long long)v);
		if (use_sd && !!(v & PM_SOFT_DIRTY) != r->sd[i])
			die(1, "%s, %s: page %d soft-dirty is %d, expected %d (pagemap %#llx)",
			    r->name, when, i, !!(v & PM_SOFT_DIRTY), r->sd[i],
			    (unsigned long long)v);
		if (!!(v & PM_UFFD_WP) != r->wp[i])
			die(1, "%s, %s: page %d uffd-wp is %d, expected %d (pagemap %#llx)",
			    r->name, when, i, !!(v & PM_UFFD_WP), r->wp[i],
			    (unsigned long long)v);
		if (present && !(v & PM_EXCLUSIVE))
			die(1, "%s, %s: page %d is mapped but not exclusive (pagemap %#llx)",
			    r->name, when, i, (unsigned long long)v);
		if (present && same_pfn && (v & PM_PFN) != r->pfn[i])
			die(1, "%s, %s: page %d is at PFN %#llx, was %#llx: the folio was not kept",
			    r->name, when, i, (unsigned long long)(v & PM_PFN),
			    (unsigned long long)r->pfn[i]);
		swapped += swap;
	}
	return swapped;
}

/* Record the PFNs and check that each folio is one naturally aligned 64K. */
static void record_folios(struct region *r)
{
	for (int i = 0; i < r->pages; i++) {
		uint64_t v = pagemap(r, i);

		if (!(v & PM_PRESENT) || !(v & PM_PFN))
			die(1, "%s: page %d not mapped, or no PFN in pagemap (needs root)",
			    r->name, i);
		r->pfn[i] = v & PM_PFN;
		if (r->pfn[i] != r->pfn[i - i % FOLIO_PAGES] + i % FOLIO_PAGES ||
		    r->pfn[i - i % FOLIO_PAGES] % FOLIO_PAGES)
			die(1, "%s: page %d is not in a 64K folio (PFN %#llx)",
			    r->name, i, (unsigned long long)r->pfn[i]);
	}
}

static void pageout(const struct region *r, int first, int pages)
{
	if (madvise(r->p + first * PAGE_SIZE_4K, pages * PAGE_SIZE_4K,
		    MADV_PAGEOUT))
		die(1, "madvise(MADV_PAGEOUT): %s", strerror(errno));
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n, size);

	if (!p)
		die(1, "out of memory");
	return p;
}

static void uffd_ioctl(unsigned long req, void *arg, const char *what)
{
	if (ioctl(uffd, req, arg))
		die(1, "userfaultfd %s: %s (needs CONFIG_USERFAULTFD and uffd-wp on anonymous memory; or --uffd-wp 0)",
		    what, strerror(errno));
}

/* Map and fill @folios 64K folios; the uffd-wp comes later, see setup(). */
static void region_map(struct region *r, const char *name, int folios)
{
	struct fields checks = { 0 };	/* map_anon_folios() dies if not 64K */

	r->name = name;
	r->pages = folios * FOLIO_PAGES;
	r->gen = xcalloc(r->pages, sizeof(*r->gen));
	r->sd = xcalloc(r->pages, sizeof(*r->sd));
	r->wp = xcalloc(r->pages, sizeof(*r->wp));
	r->pfn = xcalloc(r->pages, sizeof(*r->pfn));
	r->p = map_anon_folios(r->pages * PAGE_SIZE_4K, FOLIO_KB, &checks);
	free(checks.b.s);
	for (int i = 0; i < r->pages; i++)
		fill_page(r, i);
	if (use_wp) {
		struct uffdio_register reg = {
			.range = { (uintptr_t)r->p, r->pages * PAGE_SIZE_4K },
			.mode = UFFDIO_REGISTER_MODE_WP,
		};

		uffd_ioctl(UFFDIO_REGISTER, &reg, "UFFDIO_REGISTER");
	}
}

static void region_free(struct region *r)
{
	munmap(r->p, r->pages * PAGE_SIZE_4K);
	free(r->gen);
	free(r->sd);
	free(r->wp);
	free(r->pfn);
}

/*
 * After clear_refs: page i of folio f is written, and so soft-dirty, when
 * i and f have the same parity, so that within a folio clean and dirty
 * pages alternate and the first page is dirty in every other folio.
 * Folios in @wp_mask are then uffd-wp: never written again.
 */
static void region_mark(struct region *r, unsigned int wp_mask)
{
	for (int i = 0; i < r->pages; i++) {
		int f = i / FOLIO_PAGES;

		if ((i % FOLIO_PAGES) % 2 == f % 2) {
			r->gen[i]++;
			fill_page(r, i);
			r->sd[i] = true;
		}
	}
	for (int f = 0; use_wp && f < r->pages / FOLIO_PAGES; f++) {
		struct uffdio_writeprotect wp = {
			.range = { (uintptr_t)(r->p + f * FOLIO_KB * KiB),
				   FOLIO_KB * KiB },
			.mode = UFFDIO_WRITEPROTECT_MODE_WP,
		};

		if (!(wp_mask & (1u << f)))
			continue;
		uffd_ioctl(UFFDIO_WRITEPROTECT, &wp, "UFFDIO_WRITEPROTECT");
		for (int i = 0; i < FOLIO_PAGES; i++)
			r->wp[f * FOLIO_PAGES + i] = true;
	}
}

static void unlimit_zram(void)
{
	if (mem_limit_path[0])
		write_text(mem_limit_path, "0");
}

/* The zram device swap is on, for its mem_limit. */
static void find_zram(void)
{
	char line[256], dev[64];
	FILE *f = fopen("/proc/swaps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "/dev/%63s", dev) == 1 && !strncmp(dev, "zram", 4)) {
			snprintf(mem_limit_path, sizeof(mem_limit_path),
				 "/sys/block/%s/mem_limit", dev);
			break;
		}
	}
	if (f)
		fclose(f);
	if (!mem_limit_path[0])
		die(1, "no zram swap in /proc/swaps: part a keeps a folio in the swap cache by making zram refuse writes");
	cleanup_push_fn(unlimit_zram);
}

static int open_gup_test(void)
{
	int fd = open(GUP_TEST_PATH, O_RDWR);

	if (fd < 0)
		die(1, "cannot open " GUP_TEST_PATH ": %s (needs CONFIG_GUP_TEST and debugfs)",
		    strerror(errno));
	return fd;
}

/*
 * Part a: two folios, the second uffd-wp; pin pages 8..23, half of each, so
 * both are pinned.
 */
static int part_pinned(struct region *r)
{
	struct pin_longterm_test pin = {
		.addr = (uintptr_t)(r->p + FOLIO_PAGES / 2 * PAGE_SIZE_4K),
		.size = FOLIO_PAGES * PAGE_SIZE_4K,
	};
	int gup, clean = -1, swapped;

	record_folios(r);
	/* zram stores nothing, so the folio stays in the swap cache */
	if (!write_text(mem_limit_path, "4096"))
		die(1, "cannot write %s: %s", mem_limit_path, strerror(errno));
	pageout(r, 0, r->pages);
	unlimit_zram();
	swapped = check_ptes(r, WANT_SWAPPED, false, "swap-out to a full zram");
	check_data(r, "read back from the swap cache");
	check_ptes(r, WANT_PRESENT, true, "read back from the swap cache");

	gup = open_gup_test();
	if (ioctl(gup, PIN_LONGTERM_TEST_START, &pin))
		die(1, "gup_test PIN_LONGTERM_TEST_START: %s", strerror(errno));
	/*
	 * A page that came back from the swap cache without its exclusive
	 * bit (its swap PTE had lost it) is copied by a read-only pin.
	 */
	for (int i = FOLIO_PAGES / 2; i < FOLIO_PAGES / 2 + FOLIO_PAGES; i++)
		if ((pagemap(r, i) & PM_PFN) != r->pfn[i])
			die(1, "%s: page %d was copied when pinned: it was not exclusive after swap-in, its swap PTE had lost the exclusive bit",
			    r->name, i);
	check_ptes(r, WANT_PRESENT, true, "pinned");
	pageout(r, 0, r->pages);
	check_ptes(r, WANT_PRESENT, true, "pageout of a pinned folio");
	check_data(r, "pageout of a pinned folio");
	if (ioctl(gup, PIN_LONGTERM_TEST_STOP))
		die(1, "gup_test PIN_LONGTERM_TEST_STOP: %s", strerror(errno));
	close(gup);

	/* a soft-dirty-clean PTE put back must still be write-protected */
	for (int i = 0; i < FOLIO_PAGES && clean < 0; i++)
		if (!r->sd[i] && !r->wp[i])
			clean = i;
	r->gen[clean]++;
	fill_page(r, clean);
	r->sd[clean] = true;
	check_ptes(r, WANT_PRESENT, true, "write after the failed pageout");
	check_data(r, "write after the failed pageout");
	return swapped;
}

/* Part c: a normal pageout. */
static int part_pageout(struct region *r)
{
	int swapped;

	record_folios(r);
	pageout(r, 0, r->pages);
	swapped = check_ptes(r, WANT_SWAPPED, false, "pageout");
	check_data(r, "read back after pageout");
	check_ptes(r, WANT_EITHER, false, "read back after pageout");
	return swapped;
}

/*
 * Part b: swap filled with same-filled pages (zram stores them in no
 * memory) until only half of @r fits, then @r paged out.
 */
static int part_swap_full(struct region *r)
{
	size_t chunk_max = 8 * MiB, target, sizes[1024];
	char *filler[1024];
	int n = 0, swapped;
	long long free_kb;

	record_folios(r);
	target = r->pages * PAGE_SIZE_4K / 2;
	while ((free_kb = meminfo_value("SwapFree")) > 0 &&
	       (size_t)free_kb * KiB > target && n < 1024) {
		size_t chunk = (size_t)free_kb * KiB - target;
		char *q;

		if (chunk > chunk_max)
			chunk = chunk_max;
		chunk &= ~(PAGE_SIZE_4K - 1);
		/* no MAP_NORESERVE: never merged into @r's VMA (soft-dirty) */
		q = mmap(NULL, chunk, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (q == MAP_FAILED)
			die(1, "mmap of filler: %s", strerror(errno));
		memset(q, 0x5a, chunk);
		if (madvise(q, chunk, MADV_PAGEOUT))
			die(1, "madvise(MADV_PAGEOUT) of filler: %s", strerror(errno));
		sizes[n] = chunk;
		filler[n++] = q;
		if (meminfo_value("SwapFree") == free_kb)
			break;	/* no progress: swap is as full as it gets */
	}
	pageout(r, 0, r->pages);
	swapped = check_ptes(r, WANT_EITHER, true, "pageout with swap full");
	check_data(r, "read back after pageout with swap full");
	check_ptes(r, WANT_EITHER, false, "read back after pageout with swap full");
	while (n--)
		munmap(filler[n], sizes[n]);
	return swapped;
}

/* Whether pagemap shows soft-dirty bits: a page just written has one. */
static bool soft_dirty_bits(void)
{
	char *p = mmap(NULL, PAGE_SIZE_4K, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	bool sd;

	if (p == MAP_FAILED)
		die(1, "mmap: %s", strerror(errno));
	*(volatile char *)p = 1;
	sd = pagemap_read(pagemap_fd, (uintptr_t)p) & PM_SOFT_DIRTY;
	munmap(p, PAGE_SIZE_4K);
	return sd;
}

/* The userfaultfd for uffd-wp; skips if the kernel has none. */
static void open_uffd(void)
{
	struct uffdio_api api = { .api = UFFD_API };

	uffd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0 && errno == ENOSYS)
		ktap_skip_exit("no userfaultfd (CONFIG_USERFAULTFD); or --uffd-wp 0");
	if (uffd < 0)
		die(1, "userfaultfd: %s (or --uffd-wp 0)", strerror(errno));
	uffd_ioctl(UFFDIO_API, &api, "UFFDIO_API");
	if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
		ktap_skip_exit("userfaultfd has no write-protection here (UFFD_FEATURE_PAGEFAULT_FLAG_WP; CONFIG_HAVE_ARCH_USERFAULTFD_WP); or --uffd-wp 0");
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "uffd-wp" }, { .name = "soft-dirty" } };
	struct fields checks = { 0 }, extra = { 0 };
	struct run_opts o;
	const char *why;
	int cpu;

	run_opts_init(&o, usage, false);
	parse_run_args(argc, argv, &o, args, 2);
	use_wp = arg_count(&args[0], 0, 1) != 0;
	use_sd = arg_count(&args[1], 0, 1) != 0;
	ktap_plan(1);
	ktap_test("anon-unmap-rollback");

	if (geteuid())
		die(1, "needs root: gup_test in debugfs, PFNs in /proc/self/pagemap, zram's mem_limit");
	online_cpus(&cpu, 1);
	pin_main(cpu);
	/* what the kernel must have: else skipped */
	why = mthp_missing(FOLIO_KB);
	if (why)
		ktap_skip_exit("%s", why);
	need_debugfs(GUP_TEST_PATH);
	if (!path_exists(GUP_TEST_PATH))
		ktap_skip_exit("no " GUP_TEST_PATH ": part a pins a page with gup_test (CONFIG_GUP_TEST, debugfs)");
	pagemap_fd = pagemap_open(0);
	if (use_sd && !soft_dirty_bits())
		ktap_skip_exit("pagemap shows no soft-dirty bit on a page just written: this kernel has no CONFIG_MEM_SOFT_DIRTY; or --soft-dirty 0");
	if (use_wp)
		open_uffd();
	/* what the machine must be set up with: else not ok */
	require_swap(4 * MiB);
	mthp_set_only(FOLIO_KB);
	find_zram();

	for (int rep = 0; rep < o.reps; rep++) {
		struct region a, b, c;
		struct phase p = { 0 };
		int sa, sb, sc;

		fields_clear(&checks);
		fields_clear(&extra);
		region_map(&a, "a (pinned)", 2);
		region_map(&c, "c (pageout)", 8);
		region_map(&b, "b (swap full)", 8);
		if (use_sd && !write_text("/proc/self/clear_refs", "4"))
			die(1, "cannot clear soft-dirty bits (/proc/self/clear_refs): %s (needs CONFIG_MEM_SOFT_DIRTY)",
			    strerror(errno));
		region_mark(&a, 1u << 1);
		region_mark(&c, (1u << 2) | (1u << 5));
		region_mark(&b, 1u << 3);

		phase_begin(&p);
		sa = part_pinned(&a);
		sc = part_pageout(&c);
		sb = part_swap_full(&b);
		phase_end(&p);

		field_int(&checks, "a_pages", a.pages);
		field_int(&checks, "a_swapped_to_full_zram", sa);
		field_int(&checks, "c_pages", c.pages);
		field_int(&checks, "c_swapped", sc);
		field_int(&checks, "b_pages", b.pages);
		field_int(&checks, "b_swapped", sb);
		field_int(&extra, "uffd_wp", use_wp);
		field_int(&extra, "soft_dirty", use_sd);
		report_result("anon-unmap-rollback", "single", rep, &p, &extra,
			      &checks);
		phase_free(&p);
		region_free(&a);
		region_free(&b);
		region_free(&c);
	}
	/* every mismatch died, its KTAP line saying why */
	ktap_result(true);
	return ktap_status();
}
