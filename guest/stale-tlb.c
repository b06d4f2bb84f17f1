// SPDX-License-Identifier: GPL-2.0
/*
 * stale-tlb: try to catch a CPU reading through a stale TLB entry.
 *
 * The safety property every deferred flush must keep (mission.md, "What
 * safe means"): once a page that was unmapped is handed to anyone else, no
 * CPU may still translate to it through the old mapping.  This program
 * attacks exactly that, one trial at a time:
 *
 *   reader   a thread pinned alone on its own CPU (the last usable one)
 *            that reads the trial's pages through a fresh read-only mapping
 *            over and over, comparing every word with what the page must
 *            hold (page index + the file's tag);
 *   helper   a process forked before the first trial and pinned on the
 *            first CPU, which takes the pages away from the reader's mm
 *            (process_madvise(MADV_PAGEOUT) or move_pages to another node)
 *            and at once faults in fresh anonymous pages of its own and
 *            fills them with a canary.  The freed pages go to the per-cpu
 *            free list of the helper's CPU, which is LIFO, so the canary
 *            pages are the very pages the reader lost (checked with PFNs);
 *   main     the reader's process's main thread, also on the first CPU:
 *            maps each trial's pages at a fresh address, faults them in,
 *            runs the trial, and reports.
 *
 * If the kernel forgot the flush, the reader's CPU still translates the old
 * address to the old physical page and sees the canary (or whatever else the
 * page now holds).  Under QEMU TCG a stale translation survives until the
 * guest flushes it, so a missing flush is seen, not just possible.
 *
 * The reader, the helper and the trial's mechanics are lib/reader.c's,
 * shared with luf-hazards.  When the kernel's LUF holds the pages it takes
 * away lazily (the luf switch is on), the helper releases them (the switch
 * off and on again: flush, then free on its CPU) before the canary.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: stale-tlb reclaim|migrate|anon|anon-32k [--trials N] [--pages N]\n"
"                 [--file PATH]... [--linger N] [--keep-going] [--quick]\n"
"\n"
"A reader thread pinned alone on the last CPU keeps reading read-only pages\n"
"while a helper process on the first CPU takes them away and at once\n"
"allocates pages of its own and fills them with a canary.  The reader must\n"
"never see anything but the pages' own contents.\n"
"\n"
"modes:\n"
"  reclaim      clean page cache of a file mapped MAP_SHARED, PROT_READ,\n"
"               reclaimed with process_madvise(MADV_PAGEOUT)\n"
"  migrate      the same pages moved to another NUMA node with move_pages(2)\n"
"               (needs 2 nodes with memory)\n"
"  anon         private anonymous pages, read-only (mprotect) and swapped\n"
"               back in by a read fault, so their PTEs are clean and not\n"
"               writable, then swapped out with MADV_PAGEOUT (needs swap)\n"
"  anon-32k     the same in 32K folios (mTHP of 32K only, set here and put\n"
"               back at exit): swapped back in whole, on a synchronous swap\n"
"               device such as zram, so that the swap-out goes through the\n"
"               batched unmap of a large folio and its deferred range flush;\n"
"               32K, the largest size the per-cpu free lists keep, so that\n"
"               the canary gets the freed folio back as surely as in anon\n"
"\n"
"  --trials N   trials in which every page was taken away (default 3000,\n"
"               --quick 300)\n"
"  --pages N    pages per trial (default 4, anon-32k 8; at most 64; anon-32k:\n"
"               a multiple of 8)\n"
"  --file PATH  a file in the lab's data-disk format (lab/datadisk.py: page i\n"
"               starts with the 64-bit little-endian i, the other 4088 bytes\n"
"               are the same in every page), on a disk filesystem so that\n"
"               reclaim drops its clean pages; repeat for more files\n"
"               (default: /data/model0, /data/model1, /data/model2)\n"
"  --linger N   reader passes over the pages after the canary is written\n"
"               (default 20)\n"
"  --keep-going do not stop after the first trial with a violation\n"
"  --quick      fewer trials, for CI\n"
"\n"
"Needs root (process_madvise, PFNs in /proc/PID/pagemap) and 2 usable CPUs.\n"
"Each violation is printed at once as a line 'UNFLUSH-VIOLATION {json}'\n"
"(the kernel may not survive much longer); at the end one UNFLUSH-RESULT\n"
"line, experiment stale-tlb/<mode>, with trials, violations and the first\n"
"violations (v<i>_trial, v<i>_addr, v<i>_offset, v<i>_expected, v<i>_seen,\n"
"v<i>_kind: canary or foreign).  checks: taken_pages (pages whose PTE no\n"
"longer mapped the old page after the take-away), reused_pages (old pages\n"
"that became canary pages), expected_pages, missed_trials; anon-32k:\n"
"large_trials (trials whose pages were whole, aligned 32K runs of PFNs).\n"
"KTAP (lib/ktap.h): one test, stale-tlb/<mode>, after the result line.\n"
"Exit 0: no violation; 1: violations, or a precondition failed (no result\n"
"line; the test's KTAP line says why); 4: skipped, migrate on a machine\n"
"with one NUMA node; 2: usage.\n";

#define MAX_FILES	8

enum mode { RECLAIM, MIGRATE, ANON, ANON_32K };
static const char *const mode_names[] = {
	"reclaim", "migrate", "anon", "anon-32k", NULL };
#define FOLIO_PAGES	8	/* anon-32k: pages per 32K folio */
#define FOLIO_BYTES	(FOLIO_PAGES * PAGE_SIZE_4K)
enum op { OP_TRIAL = 1 };

static enum mode mode;

struct datafile {
	const char *path;
	int fd;
	long pages;
	uint64_t tag[PAGE_WORDS];	/* words 1..511 of every page of the file */
};

struct run {
	long trials, linger;
	int npages;
	bool keep_going;
	struct datafile files[MAX_FILES];
	int nfiles;
	/* where the next trial's pages come from */
	int file;
	long page;
	uint64_t serial;		/* anon: word 0 of the next page */
	uint64_t anon_tag[PAGE_WORDS];
	struct fresh_va va;
	int nodes[8], nnodes;
	/* tallies */
	long done, attempts, missed, taken, reused, wrapped, large;
};

/* The helper's one command: take the pages away, reuse them at once. */
static void helper_op(int op)
{
	(void)op;
	helper_reuse_trial();
}

static void open_files(struct run *r)
{
	unsigned char buf[2 * PAGE_SIZE_4K];

	for (int f = 0; f < r->nfiles; f++) {
		struct datafile *s = &r->files[f];
		uint64_t w0, w1;
		off_t size;

		s->fd = open(s->path, O_RDONLY);
		if (s->fd < 0)
			die(1, "cannot open %s: %s", s->path, strerror(errno));
		size = lseek(s->fd, 0, SEEK_END);
		s->pages = size / PAGE_SIZE_4K;
		if (s->pages < 2 + r->npages)
			die(1, "%s is too small (%lld bytes)", s->path,
			    (long long)size);
		/*
		 * Dirty page cache is written back, not dropped, by
		 * MADV_PAGEOUT: a file just made would never be taken away.
		 */
		fsync(s->fd);
		/* no readahead: every page the trials use is faulted alone */
		posix_fadvise(s->fd, 0, 0, POSIX_FADV_RANDOM);
		if (pread(s->fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf))
			die(1, "cannot read %s: %s", s->path, strerror(errno));
		memcpy(&w0, buf, 8);
		memcpy(&w1, buf + PAGE_SIZE_4K, 8);
		if (w0 != 0 || w1 != 1 ||
		    memcmp(buf + 8, buf + PAGE_SIZE_4K + 8, PAGE_SIZE_4K - 8))
			die(1, "%s is not in the lab's data-disk format (page i starts with i, the rest of every page is alike: lab/datadisk.py)",
			    s->path);
		memcpy(&s->tag[1], buf + 8, PAGE_SIZE_4K - 8);
	}
}

static size_t trial_align(void)
{
	return mode == ANON_32K ? FOLIO_BYTES : PAGE_SIZE_4K;
}

/*
 * Are @n PFNs runs of 8 consecutive PFNs, each starting at a multiple of
 * 8?  What a 32K folio looks like from user space; the kernel's counters
 * (mthp swpout, nr_tlb_anon_unmap_*) say the rest.
 */
static bool whole_folios(const uint64_t *pfn, int n)
{
	for (int i = 0; i < n; i++)
		if (pfn[i] != pfn[i - i % FOLIO_PAGES] + i % FOLIO_PAGES ||
		    pfn[i - i % FOLIO_PAGES] % FOLIO_PAGES)
			return false;
	return true;
}

/* Map the next trial's pages at a fresh address; fault them in here. */
static uintptr_t map_trial(struct run *r)
{
	size_t len = r->npages * PAGE_SIZE_4K;
	char *va = fresh_va(&r->va, len, trial_align(), r->attempts);

	if (mode >= ANON) {
		if (mmap(va, len, PROT_READ | PROT_WRITE, MAP_PRIVATE |
			 MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			die(1, "mmap: %s", strerror(errno));
		madvise(va, len, mode == ANON_32K ? MADV_HUGEPAGE :
			MADV_NOHUGEPAGE);
		memcpy(ctl->old.tag, r->anon_tag, sizeof(ctl->old.tag));
		for (int i = 0; i < r->npages; i++) {
			uint64_t *q = (uint64_t *)(va + i * PAGE_SIZE_4K);

			ctl->old.index[i] = r->serial++;
			memcpy(q, r->anon_tag, PAGE_SIZE_4K);
			q[0] = ctl->old.index[i];
		}
		/*
		 * Read-only, out to swap, back in by a read fault: the PTE
		 * is then neither writable nor dirty, as after a file read.
		 * anon-32k: the first read of a folio brings all 8 pages
		 * back as one 32K folio (mTHP swap-in from zram).
		 */
		if (mprotect(va, len, PROT_READ))
			die(1, "mprotect: %s", strerror(errno));
		if (madvise(va, len, MADV_PAGEOUT))
			die(1, "madvise(MADV_PAGEOUT): %s", strerror(errno));
		for (int i = 0; i < r->npages; i++)
			if (!swapped_entry(pagemap_self((uintptr_t)va +
							i * PAGE_SIZE_4K)))
				die(1, "MADV_PAGEOUT did not swap an anonymous page out: is swap on and large enough?");
	} else {
		struct datafile *s = &r->files[r->file];

		if (r->page + r->npages > s->pages) {
			r->file = (r->file + 1) % r->nfiles;
			r->page = 1;
			r->wrapped += r->file == 0;
			s = &r->files[r->file];
		}
		if (mmap(va, len, PROT_READ, MAP_SHARED | MAP_FIXED, s->fd,
			 r->page * PAGE_SIZE_4K) == MAP_FAILED)
			die(1, "mmap of %s: %s", s->path, strerror(errno));
		/* no readahead around faults, neither here nor in the reader */
		madvise(va, len, MADV_RANDOM);
		memcpy(ctl->old.tag, s->tag, sizeof(ctl->old.tag));
		for (int i = 0; i < r->npages; i++)
			ctl->old.index[i] = r->page + i;
		r->page += r->npages;
	}
	/*
	 * Fault in on this CPU: the folios land on this CPU's LRU batch,
	 * which MADV_PAGEOUT drains (lru_add_drain() is CPU-local).
	 */
	trial_fault_in((uintptr_t)va, r->npages, r->attempts);
	if (mode == ANON_32K)
		r->large += whole_folios(ctl->victim_pfn, r->npages);
	return (uintptr_t)va;
}

/* migrate: a node with memory other than the one page 0 is on. */
static int target_node(struct run *r, uintptr_t va)
{
	void *page = (void *)va;
	int status = -1;

	if (syscall(SYS_move_pages, 0, 1, &page, NULL, &status, 0) < 0 ||
	    status < 0)
		die(1, "move_pages (query): %s", strerror(status < 0 ? -status : errno));
	for (int i = 0; i < r->nnodes; i++)
		if (r->nodes[i] != status)
			return r->nodes[i];
	die(1, "no node to migrate to");
}

static void one_trial(struct run *r)
{
	long t = ++r->attempts;
	uintptr_t va = map_trial(r);

	if (mode == MIGRATE)
		ctl->target_node = target_node(r, va);
	trial_start(va, r->npages, t, AFTER_SAME);

	/* take them away, and hand them to the canary at once */
	helper_command(OP_TRIAL);

	/* the reader goes on reading: it must only ever see the pages' data */
	wait_reader(t, atomic_load(&ctl->passes) + r->linger,
		    "finish reading after the take-away");
	trial_stop();

	r->taken += ctl->taken;
	r->reused += ctl->reused;
	if (ctl->taken == r->npages)
		r->done++;
	else
		r->missed++;
}

static struct run r = { .page = 1, .serial = 1 };

/* --file PATH, repeatable */
static void file_arg(int i, char *value)
{
	(void)i;
	if (r.nfiles == MAX_FILES)
		usage_error("at most %d --file", MAX_FILES);
	r.files[r.nfiles++].path = value;
}

int main(int argc, char **argv)
{
	static const char *const own[] = { "file", NULL };
	static const char *const default_files[] = {
		"/data/model0", "/data/model1", "/data/model2" };
	struct attack_args args = {
		.usage = usage, .modes = mode_names, .own = own, .own_arg = file_arg };
	struct fields extra = { 0 }, checks = { 0 };
	int main_cpu, reader_cpu;
	struct phase p = { 0 };
	char name[64];
	long max_missed;

	parse_attack_args(argc, argv, &args);
	mode = args.mode;
	r.trials = args.trials;
	r.npages = args.npages;
	r.linger = args.linger;
	r.keep_going = args.keep_going;
	if (mode >= ANON && r.nfiles)
		usage_error("%s mode reads no file: drop --file",
			    mode_names[mode]);
	if (!r.npages)
		r.npages = mode == ANON_32K ? FOLIO_PAGES : 4;
	if (mode == ANON_32K && r.npages % FOLIO_PAGES)
		usage_error("--pages %d: anon-32k takes whole 32K folios, a multiple of %d",
			    r.npages, FOLIO_PAGES);
	if (!r.trials)
		r.trials = args.quick ? 300 : 3000;
	snprintf(name, sizeof(name), "stale-tlb/%s", mode_names[mode]);
	ktap_plan(1);
	ktap_test("%s", name);

	/* preconditions */
	attack_cpus(&main_cpu, &reader_cpu);
	if (mode == MIGRATE) {
		r.nnodes = node_list("has_memory", r.nodes, 8);
		if (r.nnodes < 2)
			ktap_skip_exit("migrate needs 2 NUMA nodes with memory, this machine has %d; boot the guest with a second node (python3 -m lab run --node1 512M)",
			    r.nnodes < 0 ? 0 : r.nnodes);
	}
	if (mode >= ANON) {
		require_swap(2 * r.npages * PAGE_SIZE_4K);
	} else if (!r.nfiles) {
		for (int i = 0; i < 3; i++)
			if (!access(default_files[i], R_OK))
				r.files[r.nfiles++].path = default_files[i];
		if (!r.nfiles)
			die(1, "no file to read: give --file PATH (lab/datadisk.py's format, on a disk filesystem) or boot the guest with the lab's data disk at /data");
	}

	/* settings after pin_main(): its parent _exit()s, restoring nothing */
	pin_main(main_cpu);
	if (mode == ANON_32K)
		mthp_set_only(4 * FOLIO_PAGES);
	attack_init(name, main_cpu, reader_cpu);
	ctl->migrate = mode == MIGRATE;
	ctl->luf_release = luf_on();
	if (mode >= ANON) {
		random_tag(r.anon_tag, 0x5354414c45544c42ULL ^
			   (uint64_t)getpid() << 32);
	} else {
		open_files(&r);
	}
	/*
	 * A trial is missed when the reader, faulting right after a correct
	 * flush, finds the folio still in the swap cache (its zram write
	 * unlocks it for a while) and maps it again, so it is not freed.
	 * Writing a large folio takes longer: from 29 of 329 to 86 of 243
	 * anon-32k attempts missed on correct kernels, and on patched in one
	 * clean-clone CI 111 of 164 and 311 of 410 (12 of 112 and 22 of 122
	 * on the same kernels right after), so there up to three times as
	 * many misses as trials are let through.  With LUF, anon's pages are
	 * unmapped lazily (read-only and clean), and on the debug kernel
	 * something else flushes the reader's CPU while the folio is still
	 * in the swap cache more often (nr_tlb_flush_luf_keep = missed):
	 * 21 of 103 and 16 of 116 attempts missed with luf on, 14 of 114
	 * and 9 of 109 with it off, 1 in 100 on patched either way; so anon
	 * lets half as many misses as trials through.  A missed trial costs
	 * time only: every counted one is checked.
	 */
	max_missed = mode == ANON_32K ? 3 * r.trials + 10 :
		     mode == ANON ? r.trials / 2 + 10 : r.trials / 10 + 10;
	fresh_va_reserve(&r.va, r.trials + max_missed + 1,
			 r.npages * PAGE_SIZE_4K, trial_align());

	/*
	 * anon-32k: the reader's folio goes to the per-cpu list of its order,
	 * so the canary asks for folios of that order too.
	 */
	attack_start(r.npages, mode == ANON_32K, helper_op);
	attack_begin(&p);
	while (r.done < r.trials) {
		one_trial(&r);
		if (atomic_load(&ctl->violations) && !r.keep_going)
			break;
		if (r.missed > max_missed)
			break;
	}
	attack_end(&p);

	long violations = atomic_load(&ctl->violations);

	if (!violations && r.missed > max_missed)
		die(1, "in %ld of %ld trials the kernel did not take every page away (%ld of %ld pages taken): the test proves nothing; %s",
		    r.missed, r.attempts, r.taken, r.attempts * r.npages,
		    mode == MIGRATE ? "is the other node short of free memory?" :
		    mode >= ANON ? "is swap full?" :
		    "is the file on a disk filesystem (tmpfs pages need swap)?");
	/* of the pages taken away: a missed attempt frees few or none */
	if (!violations && r.reused * 2 < r.taken)
		die(1, "the canary process got only %ld of the %ld freed pages: the test proves little; is something else allocating on CPU %d?",
		    r.reused, r.taken, main_cpu);

	if (!violations && mode == ANON_32K && r.large * 2 < r.attempts)
		die(1, "only %ld of %ld trials had their pages in whole 32K folios: the batched path was hardly tried; is swap fragmented or memory short?",
		    r.large, r.attempts);

	attack_fields(&extra, r.done, r.npages, r.linger,
		      mode >= ANON ? "(anonymous)" : r.files[0].path);
	field_int(&checks, "attempts", r.attempts);
	field_int(&checks, "missed_trials", r.missed);
	field_int(&checks, "taken_pages", r.taken);
	field_int(&checks, "reused_pages", r.reused);
	field_int(&checks, "expected_pages", r.attempts * r.npages);
	field_int(&checks, "file_wraps", r.wrapped);
	if (mode == ANON_32K)
		field_int(&checks, "large_trials", r.large);
	attack_switch_checks(&checks);
	report_result(name, "threads", 0, &p, &extra, &checks);
	phase_free(&p);
	ktap_result(!violations);
	return ktap_status();
}
