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
 * Traps avoided (lab-notes.md): every fork happens before the reader thread
 * starts (a fork flushes the mm on every CPU); nothing but the reader runs
 * on its CPU (a CR3 write empties the TLB); the page is freed and
 * reallocated on the helper's CPU, not the reader's (a refault on the
 * freeing CPU would get the same page back and look right); no virtual
 * address is ever mapped twice (a stale entry would then look right too).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <linux/mempolicy.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
"Exit 0: no violation; 1: violations (result printed), or a precondition\n"
"failed (no result); 2: usage.\n";

#define MAX_PAGES	64
#define MAX_FILES	8
#define MAX_DETAILS	4	/* violations described in the result */
#define MAX_PRINTED	8	/* violations printed as they happen */
#define WORDS		(PAGE_SIZE_4K / 8)
#define CANARY_MAGIC	0xCA9A2700ULL	/* high 32 bits of every canary word */
#define WAIT_S		30.0

enum mode { RECLAIM, MIGRATE, ANON, ANON_32K };
static const char *const mode_names[] = {
	"reclaim", "migrate", "anon", "anon-32k" };
#define FOLIO_PAGES	8	/* anon-32k: pages per 32K folio */
#define FOLIO_BYTES	(FOLIO_PAGES * PAGE_SIZE_4K)
enum op { OP_TRIAL = 1, OP_EXIT };

struct violation {
	long trial;
	int page;
	uintptr_t addr;		/* of the word that was wrong */
	int offset;		/* in the page */
	uint64_t expected, seen;
};

/* Shared by the reader's process and the helper (MAP_SHARED, before fork). */
struct ctl {
	/* main -> reader */
	_Atomic long trial;		/* 0: idle, -1: exit */
	uintptr_t va;
	int npages;
	uint64_t index[MAX_PAGES];	/* word 0 of each page */
	uint64_t tag[WORDS];		/* words 1..511, same in every page */
	/* reader -> main */
	_Atomic long reader_trial;
	_Atomic long passes;		/* full passes over the current trial */
	_Atomic long violations, bad_reads, printed;
	_Atomic int reader_tid;
	struct violation v[MAX_DETAILS];
	/* main -> helper */
	_Atomic uint32_t cmd;		/* futex word: bumped per command */
	int op;
	long htrial;
	int target_node;
	uint64_t victim_pfn[MAX_PAGES];
	/* helper -> main */
	_Atomic uint32_t done;		/* futex word: = cmd when finished */
	int taken, reused;
	char error[256];
};

static struct ctl *ctl;
static enum mode mode;
static const char *experiment;
static int reader_cpu, main_cpu;

/* --- small helpers --------------------------------------------------------- */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, double timeout_s)
{
	struct timespec ts = {
		.tv_sec = (time_t)timeout_s,
		.tv_nsec = (long)((timeout_s - (time_t)timeout_s) * 1e9),
	};

	/* not FUTEX_PRIVATE_FLAG: the word is shared between processes */
	return syscall(SYS_futex, word, op, val, timeout_s > 0 ? &ts : NULL,
		       NULL, 0);
}

static void cpu_relax(void)
{
	__asm__ __volatile__("" ::: "memory");
#if defined(__x86_64__) || defined(__i386__)
	__asm__ __volatile__("pause");
#endif
}

/* pagemap entry of @addr in @fd: bit 63 present, bits 0-54 PFN (root). */
static uint64_t pagemap_entry(int fd, uintptr_t addr)
{
	uint64_t e;

	if (pread(fd, &e, sizeof(e), (off_t)(addr / PAGE_SIZE_4K) * 8) != sizeof(e))
		return 0;
	return e;
}

static uint64_t present_pfn(uint64_t e)
{
	return (e >> 63) & 1 ? e & ((1ULL << 55) - 1) : 0;
}

/* --- the reader ------------------------------------------------------------ */

static void report_violation(long trial, int page, uintptr_t addr, int offset,
			     uint64_t expected, uint64_t seen)
{
	long n = atomic_fetch_add(&ctl->violations, 1);
	char line[512];
	int len;

	if (n < MAX_DETAILS)
		ctl->v[n] = (struct violation){ trial, page, addr, offset,
						expected, seen };
	if (atomic_fetch_add(&ctl->printed, 1) >= MAX_PRINTED)
		return;
	/* straight to fd 1 from this thread: the kernel may not last long */
	len = snprintf(line, sizeof(line),
		       "UNFLUSH-VIOLATION {\"experiment\":\"%s\",\"trial\":%ld,"
		       "\"page\":%d,\"addr\":\"0x%" PRIxPTR "\",\"offset\":%d,"
		       "\"expected\":\"0x%016" PRIx64 "\",\"seen\":\"0x%016" PRIx64
		       "\",\"kind\":\"%s\"}\n",
		       experiment, trial, page, addr, offset, expected, seen,
		       seen >> 32 == CANARY_MAGIC ? "canary" : "foreign");
	if (write(1, line, len) < 0)
		return;
}

static void *reader_main(void *arg)
{
	bool bad[MAX_PAGES];
	long cur = 0, passes = 0;

	(void)arg;
	pin_to_cpu(reader_cpu);
	atomic_store(&ctl->reader_tid, (int)syscall(SYS_gettid));
	atomic_store(&ctl->reader_trial, 0);
	for (;;) {
		long t = atomic_load_explicit(&ctl->trial, memory_order_acquire);

		if (t < 0)
			break;
		if (t != cur) {
			cur = t;
			passes = 0;
			memset(bad, 0, sizeof(bad));
			atomic_store(&ctl->passes, 0);
			atomic_store(&ctl->reader_trial, t);
		}
		if (t == 0) {
			cpu_relax();
			continue;
		}
		for (int i = 0; i < ctl->npages; i++) {
			const volatile uint64_t *p = (const volatile uint64_t *)
				(ctl->va + i * PAGE_SIZE_4K);
			int wrong = -1;
			uint64_t seen = 0, want = 0;

			for (int w = 0; w < (int)WORDS; w++) {
				uint64_t v = p[w];
				uint64_t e = w ? ctl->tag[w] : ctl->index[i];

				if (v != e && wrong < 0) {
					wrong = w;
					seen = v;
					want = e;
				}
			}
			if (wrong < 0)
				continue;
			atomic_fetch_add(&ctl->bad_reads, 1);
			if (!bad[i]) {
				bad[i] = true;
				report_violation(t, i, (uintptr_t)&p[wrong],
						 wrong * 8, want, seen);
			}
		}
		atomic_store_explicit(&ctl->passes, ++passes,
				      memory_order_release);
	}
	return NULL;
}

/* --- the helper process ---------------------------------------------------- */

static void helper_fail(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static void helper_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ctl->error, sizeof(ctl->error), fmt, ap);
	va_end(ap);
}

static void helper_trial(int pidfd, pid_t owner, int self_map, int owner_map,
			 char *canary, int ncanary)
{
	uintptr_t va = ctl->va;
	int n = ctl->npages;
	uint64_t word = (CANARY_MAGIC << 32) | (uint32_t)ctl->htrial;
	uint64_t canary_pfn[2 * MAX_PAGES + 8];

	/*
	 * Last trial's canary pages go back first: freed now, they lie under
	 * the reader's pages on the LIFO per-cpu list.
	 */
	madvise(canary, ncanary * PAGE_SIZE_4K, MADV_DONTNEED);

	if (mode == MIGRATE) {
		void *pages[MAX_PAGES];
		int nodes[MAX_PAGES], status[MAX_PAGES];

		for (int i = 0; i < n; i++) {
			pages[i] = (void *)(va + i * PAGE_SIZE_4K);
			nodes[i] = ctl->target_node;
		}
		if (syscall(SYS_move_pages, owner, n, pages, nodes, status,
			    MPOL_MF_MOVE) < 0) {
			helper_fail("move_pages: %s", strerror(errno));
			return;
		}
	} else {
		struct iovec iov = { (void *)va, n * PAGE_SIZE_4K };

		if (syscall(SYS_process_madvise, pidfd, &iov, 1, MADV_PAGEOUT,
			    0) < 0) {
			helper_fail("process_madvise(MADV_PAGEOUT): %s%s",
				    strerror(errno), errno == ENOSYS ?
				    " (kernel needs CONFIG_ADVISE_SYSCALLS)" : "");
			return;
		}
	}
	/* at once: the pages just freed are on top of this CPU's free list */
	for (int k = 0; k < ncanary; k++) {
		uint64_t *q = (uint64_t *)(canary + k * PAGE_SIZE_4K);

		for (int w = 0; w < (int)WORDS; w++)
			q[w] = word;
	}

	/* evidence, after the fact */
	for (int k = 0; k < ncanary; k++)
		canary_pfn[k] = present_pfn(pagemap_entry(self_map,
					(uintptr_t)canary + k * PAGE_SIZE_4K));
	ctl->taken = ctl->reused = 0;
	for (int i = 0; i < n; i++) {
		uint64_t now = present_pfn(pagemap_entry(owner_map,
						va + i * PAGE_SIZE_4K));

		if (now != ctl->victim_pfn[i])
			ctl->taken++;
		for (int k = 0; k < ncanary; k++)
			if (canary_pfn[k] == ctl->victim_pfn[i]) {
				ctl->reused++;
				break;
			}
	}
}

static void helper_main(int npages)
{
	pid_t owner = getppid();
	int ncanary = 2 * npages + 8, pidfd, self_map, owner_map;
	uint32_t last = 0;
	char path[64], *canary;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	pidfd = syscall(SYS_pidfd_open, owner, 0);
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)owner);
	owner_map = open(path, O_RDONLY);
	self_map = open("/proc/self/pagemap", O_RDONLY);
	canary = map_aligned(ncanary * PAGE_SIZE_4K, FOLIO_BYTES);
	if (pidfd < 0 || owner_map < 0 || self_map < 0)
		helper_fail("helper set-up: %s", strerror(errno));
	else
		/*
		 * anon-32k: the reader's folio goes to the per-cpu list of its
		 * order, so the canary asks for folios of that order too.
		 */
		madvise(canary, ncanary * PAGE_SIZE_4K, mode == ANON_32K ?
			MADV_HUGEPAGE : MADV_NOHUGEPAGE);

	for (;;) {
		uint32_t c;

		while ((c = atomic_load(&ctl->cmd)) == last)
			futex(&ctl->cmd, FUTEX_WAIT, last, 1.0);
		last = c;
		if (ctl->op == OP_EXIT)
			break;
		if (!ctl->error[0])
			helper_trial(pidfd, owner, self_map, owner_map, canary,
				     ncanary);
		atomic_store(&ctl->done, c);
		futex(&ctl->done, FUTEX_WAKE, 1, 0);
	}
	_exit(0);
}

/* --- main: the trials ------------------------------------------------------ */

struct datafile {
	const char *path;
	int fd;
	long pages;
	uint64_t tag[WORDS];	/* words 1..511 of every page of the file */
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
	uint64_t anon_tag[WORDS];
	char *va_next, *va_end;
	int self_map;
	int nodes[8], nnodes;
	/* tallies */
	long done, attempts, missed, taken, reused, wrapped, large;
};

static pid_t helper_pid;

static void helper_command(int op)
{
	uint32_t c = atomic_load(&ctl->cmd) + 1;
	double t0 = now_s();

	ctl->op = op;
	atomic_store(&ctl->cmd, c);
	futex(&ctl->cmd, FUTEX_WAKE, 1, 0);
	if (op == OP_EXIT)
		return;
	for (;;) {
		uint32_t d = atomic_load(&ctl->done);

		if (d == c)
			break;
		futex(&ctl->done, FUTEX_WAIT, d, 1.0);
		if (waitpid(helper_pid, NULL, WNOHANG) == helper_pid)
			die(1, "the helper process died during trial %ld",
			    ctl->htrial);
		if (now_s() - t0 > WAIT_S)
			die(1, "the helper did not finish trial %ld within %.0f s",
			    ctl->htrial, WAIT_S);
	}
	if (ctl->error[0])
		die(1, "%s", ctl->error);
}

/* Until the reader is on @trial and has made @passes full passes over it. */
static void wait_reader(long trial, long passes, const char *what)
{
	double t0 = now_s();

	while (atomic_load(&ctl->reader_trial) != trial ||
	       atomic_load(&ctl->passes) < passes) {
		if (now_s() - t0 > WAIT_S)
			die(1, "the reader did not %s within %.0f s (trial %ld)",
			    what, WAIT_S, trial);
		/* let anything this CPU owes the reader (I/O completion) run */
		sched_yield();
	}
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
	char *va = (char *)(((uintptr_t)r->va_next + trial_align() - 1) &
			    ~(uintptr_t)(trial_align() - 1));

	/* a guard between trials; no address is ever mapped twice */
	r->va_next = va + len + trial_align();
	if (r->va_next > r->va_end)
		die(1, "out of reserved address space after %ld trials",
		    r->attempts);

	if (mode >= ANON) {
		if (mmap(va, len, PROT_READ | PROT_WRITE, MAP_PRIVATE |
			 MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			die(1, "mmap: %s", strerror(errno));
		madvise(va, len, mode == ANON_32K ? MADV_HUGEPAGE :
			MADV_NOHUGEPAGE);
		memcpy(ctl->tag, r->anon_tag, sizeof(ctl->tag));
		for (int i = 0; i < r->npages; i++) {
			uint64_t *q = (uint64_t *)(va + i * PAGE_SIZE_4K);

			ctl->index[i] = r->serial++;
			memcpy(q, r->anon_tag, PAGE_SIZE_4K);
			q[0] = ctl->index[i];
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
			if (!(pagemap_entry(r->self_map, (uintptr_t)va +
					    i * PAGE_SIZE_4K) >> 62 & 1))
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
		memcpy(ctl->tag, s->tag, sizeof(ctl->tag));
		for (int i = 0; i < r->npages; i++)
			ctl->index[i] = r->page + i;
		r->page += r->npages;
	}
	/*
	 * Fault in on this CPU: the folios land on this CPU's LRU batch,
	 * which MADV_PAGEOUT drains (lru_add_drain() is CPU-local).
	 */
	for (int i = 0; i < r->npages; i++) {
		const volatile uint64_t *q = (const volatile uint64_t *)
			(va + i * PAGE_SIZE_4K);

		if (q[0] != ctl->index[i] || q[1] != ctl->tag[1])
			die(1, "page %d of trial %ld reads 0x%016" PRIx64 " before the trial, not 0x%016" PRIx64,
			    i, r->attempts, q[0], ctl->index[i]);
		ctl->victim_pfn[i] = present_pfn(pagemap_entry(r->self_map,
					(uintptr_t)va + i * PAGE_SIZE_4K));
		if (!ctl->victim_pfn[i])
			die(1, "no PFN in /proc/self/pagemap: run as root");
	}
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

	ctl->va = va;
	ctl->npages = r->npages;
	ctl->htrial = t;
	if (mode == MIGRATE)
		ctl->target_node = target_node(r, va);
	/* the reader reads every page once: its CPU caches the translations */
	atomic_store_explicit(&ctl->trial, t, memory_order_release);
	wait_reader(t, 1, "read the trial's pages");

	/* take them away, and hand them to the canary at once */
	helper_command(OP_TRIAL);

	/* the reader goes on reading: it must only ever see the pages' data */
	wait_reader(t, atomic_load(&ctl->passes) + r->linger,
		    "finish reading after the take-away");
	atomic_store(&ctl->trial, 0);
	wait_reader(0, 0, "stop");
	/* PROT_NONE again (merges with the reservation); never mapped again */
	if (mmap((void *)va, r->npages * PAGE_SIZE_4K, PROT_NONE, MAP_PRIVATE |
		 MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
		die(1, "mmap PROT_NONE: %s", strerror(errno));

	r->taken += ctl->taken;
	r->reused += ctl->reused;
	if (ctl->taken == r->npages)
		r->done++;
	else
		r->missed++;
}

/* voluntary and involuntary context switches of a thread of ours */
static void ctxt_switches(int tid, long long *vol, long long *invol)
{
	char path[64], line[256];
	FILE *f;

	*vol = *invol = -1;
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "voluntary_ctxt_switches: %lld", vol);
		sscanf(line, "nonvoluntary_ctxt_switches: %lld", invol);
	}
	fclose(f);
}

int main(int argc, char **argv)
{
	enum { OPT_TRIALS = 0x100, OPT_PAGES, OPT_FILE, OPT_LINGER,
	       OPT_KEEP_GOING, OPT_QUICK };
	static const struct option opts[] = {
		{ "trials", required_argument, NULL, OPT_TRIALS },
		{ "pages", required_argument, NULL, OPT_PAGES },
		{ "file", required_argument, NULL, OPT_FILE },
		{ "linger", required_argument, NULL, OPT_LINGER },
		{ "keep-going", no_argument, NULL, OPT_KEEP_GOING },
		{ "quick", no_argument, NULL, OPT_QUICK },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	static const char *const default_files[] = {
		"/data/model0", "/data/model1", "/data/model2" };
	struct fields extra = { 0 }, checks = { 0 };
	struct run r = { .linger = 20, .page = 1, .serial = 1 };
	long long vol0, invol0, vol1, invol1;
	int cpus[MAX_CPUS], ncpus, opt;
	bool quick = false;
	struct phase p = { 0 };
	pthread_t reader;
	size_t reserve;
	char name[64];
	long max_missed;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_TRIALS:
			r.trials = parse_count("--trials", optarg, 1);
			break;
		case OPT_PAGES:
			r.npages = parse_count("--pages", optarg, 1);
			if (r.npages > MAX_PAGES)
				usage_error("--pages %d: at most %d", r.npages,
					    MAX_PAGES);
			break;
		case OPT_FILE:
			if (r.nfiles == MAX_FILES)
				usage_error("at most %d --file", MAX_FILES);
			r.files[r.nfiles++].path = optarg;
			break;
		case OPT_LINGER:
			r.linger = parse_count("--linger", optarg, 1);
			break;
		case OPT_KEEP_GOING:
			r.keep_going = true;
			break;
		case OPT_QUICK:
			quick = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			bad_option(argv);
		}
	}
	if (optind >= argc)
		usage_error("say which mode: reclaim, migrate, anon or anon-32k");
	for (mode = RECLAIM; mode <= ANON_32K; mode++)
		if (!strcmp(argv[optind], mode_names[mode]))
			break;
	if (mode > ANON_32K)
		usage_error("unknown mode '%s': reclaim, migrate, anon or anon-32k",
			    argv[optind]);
	if (optind + 1 < argc)
		usage_error("unexpected argument '%s'", argv[optind + 1]);
	if (mode >= ANON && r.nfiles)
		usage_error("%s mode reads no file: drop --file",
			    mode_names[mode]);
	if (!r.npages)
		r.npages = mode == ANON_32K ? FOLIO_PAGES : 4;
	if (mode == ANON_32K && r.npages % FOLIO_PAGES)
		usage_error("--pages %d: anon-32k takes whole 32K folios, a multiple of %d",
			    r.npages, FOLIO_PAGES);
	if (!r.trials)
		r.trials = quick ? 300 : 3000;
	snprintf(name, sizeof(name), "stale-tlb/%s", mode_names[mode]);
	experiment = name;

	/* preconditions */
	if (geteuid() != 0)
		die(1, "needs root: process_madvise and move_pages on another process, PFNs in /proc/PID/pagemap");
	ncpus = online_cpus(cpus, MAX_CPUS);
	if (ncpus < 2)
		die(1, "needs 2 usable CPUs (the reader alone on one), found %d; boot the guest with -smp 2 or more",
		    ncpus);
	main_cpu = cpus[0];
	reader_cpu = cpus[ncpus - 1];
	if (mode == MIGRATE) {
		r.nnodes = node_list("has_memory", r.nodes, 8);
		if (r.nnodes < 2)
			die(1, "migrate needs 2 NUMA nodes with memory, this machine has %d; boot the guest with a second node (python3 -m lab run --node1 512M)",
			    r.nnodes < 0 ? 0 : r.nnodes);
	}
	if (mode >= ANON) {
		require_swap(2 * r.npages * PAGE_SIZE_4K);
		if (mode == ANON_32K)
			mthp_set_only(4 * FOLIO_PAGES);
	} else if (!r.nfiles) {
		for (int i = 0; i < 3; i++)
			if (!access(default_files[i], R_OK))
				r.files[r.nfiles++].path = default_files[i];
		if (!r.nfiles)
			die(1, "no file to read: give --file PATH (lab/datadisk.py's format, on a disk filesystem) or boot the guest with the lab's data disk at /data");
	}

	pin_main(main_cpu);
	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ctl == MAP_FAILED)
		die(1, "mmap: %s", strerror(errno));
	r.self_map = open("/proc/self/pagemap", O_RDONLY);
	if (r.self_map < 0)
		die(1, "cannot open /proc/self/pagemap: %s", strerror(errno));
	if (mode >= ANON) {
		uint64_t x = 0x5354414c45544c42ULL ^ (uint64_t)getpid() << 32;

		for (int w = 1; w < (int)WORDS; w++) {
			/* splitmix64: nothing like a canary or a zero page */
			uint64_t z = (x += 0x9e3779b97f4a7c15ULL);

			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
			z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
			r.anon_tag[w] = z ^ (z >> 31);
		}
	} else {
		open_files(&r);
	}
	/*
	 * A trial is missed when the reader, faulting right after a correct
	 * flush, finds the folio still in the swap cache (its zram write
	 * unlocks it for a while) and maps it again, so it is not freed.
	 * Writing a large folio takes longer: from 29 of 329 to 86 of 243
	 * anon-32k attempts missed on correct kernels, so there up to as
	 * many misses as trials are let through.
	 */
	max_missed = mode == ANON_32K ? r.trials + 10 : r.trials / 10 + 10;
	reserve = (size_t)(r.trials + max_missed + 1) *
		  (r.npages * PAGE_SIZE_4K + 2 * trial_align());
	r.va_next = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
			 MAP_NORESERVE, -1, 0);
	if (r.va_next == MAP_FAILED)
		die(1, "cannot reserve %zu MiB of address space", reserve / MiB);
	r.va_end = r.va_next + reserve;

	/* every fork before the reader starts: a fork flushes the whole mm */
	fflush(NULL);
	helper_pid = fork();
	if (helper_pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (helper_pid == 0)
		helper_main(r.npages);
	if (pthread_create(&reader, NULL, reader_main, NULL))
		die(1, "cannot start the reader thread");
	while (!atomic_load(&ctl->reader_tid))
		sched_yield();

	ctxt_switches(ctl->reader_tid, &vol0, &invol0);
	phase_begin(&p);
	while (r.done < r.trials) {
		one_trial(&r);
		if (atomic_load(&ctl->violations) && !r.keep_going)
			break;
		if (r.missed > max_missed)
			break;
	}
	phase_end(&p);
	ctxt_switches(ctl->reader_tid, &vol1, &invol1);

	atomic_store(&ctl->trial, -1);
	pthread_join(reader, NULL);
	helper_command(OP_EXIT);
	waitpid(helper_pid, NULL, 0);

	long violations = atomic_load(&ctl->violations);

	if (!violations && r.missed > max_missed)
		die(1, "in %ld of %ld trials the kernel did not take every page away (%ld of %ld pages taken): the test proves nothing; %s",
		    r.missed, r.attempts, r.taken, r.attempts * r.npages,
		    mode == MIGRATE ? "is the other node short of free memory?" :
		    mode >= ANON ? "is swap full?" :
		    "is the file on a disk filesystem (tmpfs pages need swap)?");
	if (!violations && r.reused * 2 < r.attempts * r.npages)
		die(1, "the canary process got only %ld of the %ld freed pages: the test proves little; is something else allocating on CPU %d?",
		    r.reused, r.attempts * r.npages, main_cpu);

	if (!violations && mode == ANON_32K && r.large * 2 < r.attempts)
		die(1, "only %ld of %ld trials had their pages in whole 32K folios: the batched path was hardly tried; is swap fragmented or memory short?",
		    r.large, r.attempts);

	field_int(&extra, "trials", r.done);
	field_int(&extra, "violations", violations);
	field_int(&extra, "bad_reads", atomic_load(&ctl->bad_reads));
	field_int(&extra, "pages_per_trial", r.npages);
	field_int(&extra, "linger_passes", r.linger);
	field_int(&extra, "cpu_reader", reader_cpu);
	field_int(&extra, "cpu_helper", main_cpu);
	field_str(&extra, "file", mode >= ANON ? "(anonymous)" : r.files[0].path);
	for (long i = 0; i < violations && i < MAX_DETAILS; i++) {
		struct violation *v = &ctl->v[i];
		char key[32], val[32];

		snprintf(key, sizeof(key), "v%ld_trial", i);
		field_int(&extra, key, v->trial);
		snprintf(key, sizeof(key), "v%ld_page", i);
		field_int(&extra, key, v->page);
		snprintf(key, sizeof(key), "v%ld_addr", i);
		snprintf(val, sizeof(val), "0x%" PRIxPTR, v->addr);
		field_str(&extra, key, val);
		snprintf(key, sizeof(key), "v%ld_offset", i);
		field_int(&extra, key, v->offset);
		snprintf(key, sizeof(key), "v%ld_expected", i);
		snprintf(val, sizeof(val), "0x%016" PRIx64, v->expected);
		field_str(&extra, key, val);
		snprintf(key, sizeof(key), "v%ld_seen", i);
		snprintf(val, sizeof(val), "0x%016" PRIx64, v->seen);
		field_str(&extra, key, val);
		snprintf(key, sizeof(key), "v%ld_kind", i);
		field_str(&extra, key, v->seen >> 32 == CANARY_MAGIC ?
			  "canary" : "foreign");
	}
	field_int(&checks, "attempts", r.attempts);
	field_int(&checks, "missed_trials", r.missed);
	field_int(&checks, "taken_pages", r.taken);
	field_int(&checks, "reused_pages", r.reused);
	field_int(&checks, "expected_pages", r.attempts * r.npages);
	field_int(&checks, "file_wraps", r.wrapped);
	if (mode == ANON_32K)
		field_int(&checks, "large_trials", r.large);
	field_int(&checks, "reader_voluntary_switches", vol1 - vol0);
	field_int(&checks, "reader_involuntary_switches", invol1 - invol0);
	report_result(experiment, "threads", 0, &p, &extra, &checks);
	phase_free(&p);
	fflush(stdout);
	return violations ? 1 : 0;
}
