// SPDX-License-Identifier: GPL-2.0
/*
 * The stale-translation attack of luf-hazards: the reader, the helper
 * process, fresh addresses and the PFNs that show what happened
 * (docs/stale-tlb.md, the API in unflush.h).
 *
 * Traps avoided (lab-notes.md): every fork happens before the reader thread
 * starts (a fork flushes the mm on every CPU); nothing but the reader runs on
 * its CPU, and the reader makes no system call while it reads (a CR3 write
 * or a return from lazy TLB mode empties the TLB); a freed page is
 * reallocated on the helper's CPU, not the reader's (a refault on the freeing
 * CPU would get the same page back and look right); no virtual address is
 * mapped twice except where a program means to (a stale entry would then look
 * right too).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
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

#define MAX_PRINTED	8	/* violations of each kind printed as they happen */
#define WAIT_S		30.0
#define TAKE_TRIES	8	/* requests to take a trial's pages away */

struct attack *ctl;

static const char *experiment;
static int reader_cpu, main_cpu, self_map = -1;
static pid_t helper_pid;
static pthread_t reader;
static long long vol0, invol0, vol1, invol1;

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

uint64_t pagemap_self(uintptr_t addr)
{
	return pagemap_read(self_map, addr);
}

void random_tag(uint64_t *tag, uint64_t seed)
{
	uint64_t x = seed;

	for (int w = 1; w < (int)PAGE_WORDS; w++) {
		/* splitmix64: nothing like a canary or a zero page */
		uint64_t z = (x += 0x9e3779b97f4a7c15ULL);

		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		tag[w] = z ^ (z >> 31);
	}
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

/* --- the reader ------------------------------------------------------------ */

static uint64_t image_word(const struct page_image *m, int page, int w)
{
	return w ? m->tag[w] : m->index[page];
}

/*
 * Is every byte of @v the byte of @a or of @b?  A word read while another
 * CPU copies over it (copy_from_user in pwrite, which TCG runs byte by
 * byte) can be torn.
 */
static bool bytes_of_either(uint64_t v, uint64_t a, uint64_t b)
{
	for (int k = 0; k < 64; k += 8) {
		uint64_t m = 0xffULL << k;

		if ((v & m) != (a & m) && (v & m) != (b & m))
			return false;
	}
	return true;
}

/*
 * What a wrong word is.  old: the page's data before the take-away, seen
 * where it must not be; canary: the helper's data, in a page the reader
 * lost; foreign: anything else (on a kernel that skips a flush, mostly the
 * zeroes the allocator wrote for the page's next owner).
 */
static const char *const kind_name[NR_VIOLATION_KINDS] = {
	[KIND_OLD] = "old", [KIND_CANARY] = "canary", [KIND_FOREIGN] = "foreign",
};

static enum violation_kind violation_kind(int page, int w, uint64_t seen)
{
	if (ctl->after != AFTER_SAME && seen == image_word(&ctl->old, page, w))
		return KIND_OLD;
	return seen >> 32 == CANARY_MAGIC ? KIND_CANARY : KIND_FOREIGN;
}

/*
 * @first: the page's first wrong read of the trial, which counts it as a
 * violation; later kinds are printed only (see check_page()).
 */
static void report_violation(long trial, int page, int w, uintptr_t addr,
			     uint64_t expected, uint64_t seen,
			     enum violation_kind k, bool first)
{
	const char *kind = kind_name[k];
	char line[512];
	int len;

	if (first) {
		long n = atomic_fetch_add(&ctl->violations, 1);

		if (n < MAX_DETAILS)
			ctl->v[n] = (struct violation){ trial, page, addr,
							w * 8, expected, seen,
							kind };
	}
	if (atomic_fetch_add(&ctl->printed[k], 1) >= MAX_PRINTED)
		return;
	/* straight to fd 1 from this thread: the kernel may not last long */
	len = snprintf(line, sizeof(line),
		       "UNFLUSH-VIOLATION {\"experiment\":\"%s\",\"trial\":%ld,"
		       "\"page\":%d,\"addr\":\"0x%" PRIxPTR "\",\"offset\":%d,"
		       "\"expected\":\"0x%016" PRIx64 "\",\"seen\":\"0x%016" PRIx64
		       "\",\"kind\":\"%s\"}\n",
		       experiment, trial, page, addr, w * 8, expected, seen, kind);
	if (write(1, line, len) < 0)
		return;
}

/*
 * The first word of page @i from @w on (whose value @v was read already)
 * that is neither @want's nor @alt's, nor a byte-wise mix of the two (torn
 * by a concurrent copy); -1 if none.  Each word is read once.
 */
static int first_foreign(const volatile uint64_t *p, int i, int w, uint64_t v,
			 const struct page_image *want,
			 const struct page_image *alt, uint64_t *seen,
			 uint64_t *expected)
{
	for (;;) {
		uint64_t e = image_word(want, i, w);

		if (v != e && !bytes_of_either(v, e, image_word(alt, i, w))) {
			*seen = v;
			*expected = e;
			return w;
		}
		if (++w == (int)PAGE_WORDS)
			return -1;
		v = p[w];
	}
}

/*
 * Read every word of page @i once.  Before "done" (@done false) a word may
 * be the old or, with AFTER_NEW, the new data (or a mix, see
 * first_foreign()); after it only what ctl->after says.  A page's first
 * wrong word of each kind is reported once per trial (@seen_kinds, a bit
 * per kind): a reader that first catches a lost page zeroed for its next
 * owner says so, and again when that owner's data shows through.
 */
static void check_page(long t, int i, uint8_t *seen_kinds, bool done)
{
	const volatile uint64_t *p = (const volatile uint64_t *)
		(ctl->va + i * PAGE_SIZE_4K);
	const struct page_image *want = &ctl->old, *alt = NULL;
	int wrong = -1;
	uint64_t seen = 0, expected = 0;
	enum violation_kind k;

	if (ctl->after == AFTER_NEW) {
		if (done)
			want = &ctl->new;
		else
			alt = &ctl->new;
	}
	/*
	 * The hot loop is kept as it was measured (docs/stale-tlb.md): how
	 * soon the reader touches a page again after a flush decides how
	 * often it refaults in time to keep the page.
	 */
	for (int w = 0; w < (int)PAGE_WORDS; w++) {
		uint64_t v = p[w];
		uint64_t e = w ? want->tag[w] : want->index[i];

		if (v != e && wrong < 0) {
			wrong = w;
			seen = v;
			expected = e;
			if (alt)
				break;
		}
	}
	if (wrong >= 0 && alt)
		wrong = first_foreign(p, i, wrong, seen, want, alt, &seen,
				      &expected);
	if (wrong < 0)
		return;
	atomic_fetch_add(&ctl->bad_reads, 1);
	k = violation_kind(i, wrong, seen);
	if (!(seen_kinds[i] & 1U << k)) {
		bool first = !seen_kinds[i];

		seen_kinds[i] |= 1U << k;
		report_violation(t, i, wrong, (uintptr_t)&p[wrong], expected,
				 seen, k, first);
	}
}

static void *reader_main(void *arg)
{
	uint8_t seen_kinds[TRIAL_MAX_PAGES];
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
			memset(seen_kinds, 0, sizeof(seen_kinds));
			atomic_store(&ctl->passes, 0);
			atomic_store(&ctl->reader_trial, t);
		}
		if (t == 0) {
			cpu_relax();
			continue;
		}
		for (int i = 0; i < ctl->npages; i++) {
			bool done = atomic_load_explicit(&ctl->done,
							 memory_order_acquire);

			check_page(t, i, seen_kinds, done);
		}
		atomic_store_explicit(&ctl->passes, ++passes,
				      memory_order_release);
	}
	return NULL;
}

/* --- the helper process ---------------------------------------------------- */

/* the helper's own state, after the fork */
static struct {
	pid_t owner;
	int pidfd, self_map, owner_map, ncanary;
	char *canary;
} hs;

void helper_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ctl->error, sizeof(ctl->error), fmt, ap);
	va_end(ap);
}

/*
 * The PFN @addr maps in the pagemap @fd, 0 if none; false after
 * helper_fail() if the entry cannot be read.  Not pagemap_read(): the
 * helper reports through ctl->error, and a guessed entry would count a
 * page as taken away or reused that may not have been.
 */
static bool helper_pfn(int fd, uintptr_t addr, uint64_t *pfn)
{
	uint64_t e;

	if (!pagemap_try(fd, addr, &e)) {
		helper_fail("read of a pagemap entry failed: %s",
			    errno ? strerror(errno) : "short read");
		return false;
	}
	*pfn = present_pfn(e);
	return true;
}

/*
 * Pages of the trial whose PTE in main's mm no longer maps the old PFN;
 * -1 after helper_fail().
 */
static int pages_moved(void)
{
	int moved = 0;

	for (int i = 0; i < ctl->npages; i++) {
		uint64_t pfn;

		if (!helper_pfn(hs.owner_map, ctl->va + i * PAGE_SIZE_4K, &pfn))
			return -1;
		moved += pfn != ctl->victim_pfn[i];
	}
	return moved;
}

/*
 * One request to take the trial's pages away: proactive reclaim of the
 * cgroup they are charged to, compaction or process_madvise(MADV_PAGEOUT).
 * False after helper_fail().
 */
static bool ask_once(void)
{
	uintptr_t va = ctl->va;
	int n = ctl->npages;

	if (ctl->reclaim[0]) {
		/* EAGAIN only says less than asked was reclaimed */
		if (write_text(ctl->reclaim, ctl->reclaim_arg) ||
		    errno == EAGAIN)
			return true;
		helper_fail("cannot write '%s' to %s: %s", ctl->reclaim_arg,
			    ctl->reclaim, strerror(errno));
		return false;
	}
	if (ctl->compact[0]) {
		if (write_text(ctl->compact, "1"))
			return true;
		helper_fail("cannot write 1 to %s: %s", ctl->compact,
			    strerror(errno));
		return false;
	}
	struct iovec iov = { (void *)va, n * PAGE_SIZE_4K };

	if (syscall(SYS_process_madvise, hs.pidfd, &iov, 1, MADV_PAGEOUT,
		    0) < 0) {
		helper_fail("process_madvise(MADV_PAGEOUT): %s%s",
			    strerror(errno), errno == ENOSYS ?
			    " (kernel needs CONFIG_ADVISE_SYSCALLS)" : "");
		return false;
	}
	return true;
}

/*
 * Every way of taking pages away passes over a folio it cannot take at that
 * moment and says little or nothing: reclaim keeps a folio whose PTE was
 * young the first time it meets it (and clears the bit) and takes the
 * cgroup's older pages first; reclaim and migration skip a folio that is
 * locked or whose reference count someone raised for a moment.  So look,
 * and ask again while pages are still there, up to TAKE_TRIES requests;
 * the trial shows what is left.  Compaction is asked once: it picks its
 * own pages.
 */
static bool take_away(void)
{
	for (int k = 0; k < TAKE_TRIES; k++) {
		int moved = pages_moved();

		if (moved < 0)
			return false;
		if (moved == ctl->npages)
			break;
		if (!ask_once())
			return false;
		if (ctl->compact[0])
			break;
	}
	return true;
}

/*
 * Evidence, after the fact: ctl->taken, pages whose PTE no longer maps the
 * old PFN; ctl->reused, old PFNs now among the @n canary PFNs.
 */
static void count_taken(const uint64_t *canary_pfn, int n)
{
	ctl->taken = pages_moved();
	ctl->reused = 0;
	if (ctl->taken < 0) {
		ctl->taken = 0;
		return;
	}
	for (int i = 0; i < ctl->npages; i++)
		for (int k = 0; k < n; k++)
			if (canary_pfn[k] == ctl->victim_pfn[i]) {
				ctl->reused++;
				break;
			}
}

void helper_take_away(void)
{
	if (take_away())
		count_taken(NULL, 0);
}

static bool luf_switch(const char *value)
{
	if (write_text(LUF_SWITCH, value))
		return true;
	helper_fail("cannot write %s to " LUF_SWITCH ": %s", value,
		    strerror(errno));
	return false;
}

void helper_reuse_trial(void)
{
	uint64_t word = (CANARY_MAGIC << 32) | (uint32_t)ctl->htrial;
	uint64_t canary_pfn[2 * TRIAL_MAX_PAGES + 8];

	/*
	 * Last trial's canary pages go back first: freed now, they lie under
	 * the reader's pages on the LIFO per-cpu list.
	 */
	madvise(hs.canary, hs.ncanary * PAGE_SIZE_4K, MADV_DONTNEED);
	if (!take_away())
		return;
	/* LUF holds the pages: switching it off flushes, then frees them here */
	if (ctl->luf_release && !luf_switch("0"))
		return;
	/* at once: the pages just freed are on top of this CPU's free list */
	for (int k = 0; k < hs.ncanary; k++) {
		uint64_t *q = (uint64_t *)(hs.canary + k * PAGE_SIZE_4K);

		for (int w = 0; w < (int)PAGE_WORDS; w++)
			q[w] = word;
	}
	if (ctl->luf_release && !luf_switch("1"))
		return;

	for (int k = 0; k < hs.ncanary; k++)
		if (!helper_pfn(hs.self_map, (uintptr_t)hs.canary +
				k * PAGE_SIZE_4K, &canary_pfn[k]))
			return;
	count_taken(canary_pfn, hs.ncanary);
}

static void helper_main(int npages, void (*op)(int op))
{
	uint32_t last = 0;
	char path[64];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	hs.owner = getppid();
	hs.ncanary = 2 * npages + 8;
	hs.pidfd = syscall(SYS_pidfd_open, hs.owner, 0);
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)hs.owner);
	hs.owner_map = open(path, O_RDONLY);
	hs.self_map = open("/proc/self/pagemap", O_RDONLY);
	hs.canary = map_aligned(hs.ncanary * PAGE_SIZE_4K, 8 * PAGE_SIZE_4K);
	/* where the freed pages are: the canary's come from their node */
	if (ctl->canary_bound)
		bind_memory(ctl->canary_node);
	if (hs.pidfd < 0 || hs.owner_map < 0 || hs.self_map < 0)
		helper_fail("helper set-up: %s", strerror(errno));
	else
		madvise(hs.canary, hs.ncanary * PAGE_SIZE_4K, MADV_NOHUGEPAGE);

	for (;;) {
		uint32_t c;

		while ((c = atomic_load(&ctl->cmd)) == last)
			futex(&ctl->cmd, FUTEX_WAIT, last, 1.0);
		last = c;
		if (!ctl->op)
			break;
		if (!ctl->error[0])
			op(ctl->op);
		atomic_store(&ctl->finished, c);
		futex(&ctl->finished, FUTEX_WAKE, 1, 0);
	}
	_exit(0);
}

static void send_command(int op)
{
	ctl->op = op;
	atomic_store(&ctl->cmd, atomic_load(&ctl->cmd) + 1);
	futex(&ctl->cmd, FUTEX_WAKE, 1, 0);
}

void helper_command(int op)
{
	double t0 = now_s();
	uint32_t c;

	send_command(op);
	c = atomic_load(&ctl->cmd);
	for (;;) {
		uint32_t d = atomic_load(&ctl->finished);

		if (d == c)
			break;
		futex(&ctl->finished, FUTEX_WAIT, d, 1.0);
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

/* --- main's side ----------------------------------------------------------- */

/* "a, b, c or d" */
static void list_modes(char *buf, size_t len, const char *const *modes)
{
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; modes[i] && n < len; i++)
		n += snprintf(buf + n, len - n, "%s%s", i == 0 ? "" :
			      modes[i + 1] ? ", " : " or ", modes[i]);
}

void parse_attack_args(int argc, char **argv, struct attack_args *a)
{
	enum { OPT_TRIALS = 0x100, OPT_PAGES, OPT_LINGER, OPT_KEEP_GOING,
	       OPT_QUICK, OPT_OWN };
	static const struct option common[] = {
		{ "trials", required_argument, NULL, OPT_TRIALS },
		{ "pages", required_argument, NULL, OPT_PAGES },
		{ "linger", required_argument, NULL, OPT_LINGER },
		{ "keep-going", no_argument, NULL, OPT_KEEP_GOING },
		{ "quick", no_argument, NULL, OPT_QUICK },
		{ "help", no_argument, NULL, 'h' },
	};
	struct option opts[MAX_OWN_ARGS + sizeof(common) / sizeof(common[0]) + 1];
	int n = 0, opt;
	char names[256];

	for (int i = 0; a->own && a->own[i]; i++) {
		if (i == MAX_OWN_ARGS)
			die(1, "internal error: more than %d own options",
			    MAX_OWN_ARGS);
		opts[n++] = (struct option){ a->own[i], required_argument,
					     NULL, OPT_OWN + i };
	}
	for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
		opts[n++] = common[i];
	opts[n] = (struct option){ 0 };
	a->linger = 20;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_TRIALS:
			a->trials = parse_count("--trials", optarg, 1);
			break;
		case OPT_PAGES:
			a->npages = parse_count("--pages", optarg, 1);
			if (a->npages > TRIAL_MAX_PAGES)
				usage_error("--pages %d: at most %d", a->npages,
					    TRIAL_MAX_PAGES);
			break;
		case OPT_LINGER:
			a->linger = parse_count("--linger", optarg, 1);
			break;
		case OPT_KEEP_GOING:
			a->keep_going = true;
			break;
		case OPT_QUICK:
			a->quick = true;
			break;
		case 'h':
			fputs(a->usage, stdout);
			exit(0);
		case '?':
			bad_option(argv);
		default:
			a->own_arg(opt - OPT_OWN, optarg);
		}
	}
	list_modes(names, sizeof(names), a->modes);
	if (optind >= argc)
		usage_error("say which mode: %s", names);
	for (a->mode = 0; a->modes[a->mode]; a->mode++)
		if (!strcmp(argv[optind], a->modes[a->mode]))
			break;
	if (!a->modes[a->mode])
		usage_error("unknown mode '%s': %s", argv[optind], names);
	if (optind + 1 < argc)
		usage_error("unexpected argument '%s'", argv[optind + 1]);
}

void attack_cpus(int *first, int *last)
{
	int cpus[MAX_CPUS], ncpus;

	if (geteuid() != 0)
		die(1, "needs root: process_madvise on another process, PFNs in /proc/PID/pagemap");
	ncpus = online_cpus(cpus, MAX_CPUS);
	if (ncpus < 2)
		die(1, "needs 2 usable CPUs (the reader alone on one), found %d; boot the guest with -smp 2 or more",
		    ncpus);
	*first = cpus[0];
	*last = cpus[ncpus - 1];
}

void attack_init(const char *name, int first, int last)
{
	experiment = name;
	main_cpu = first;
	reader_cpu = last;
	ctl = mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ctl == MAP_FAILED)
		die(1, "mmap: %s", strerror(errno));
	self_map = pagemap_open(0);
}

void attack_start(int npages, void (*op)(int op))
{
	/* every fork before the reader starts: a fork flushes the whole mm */
	fflush(NULL);
	helper_pid = fork();
	if (helper_pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (helper_pid == 0)
		helper_main(npages, op);
	if (pthread_create(&reader, NULL, reader_main, NULL))
		die(1, "cannot start the reader thread");
	while (!atomic_load(&ctl->reader_tid))
		sched_yield();
}

void attack_begin(struct phase *p)
{
	ctxt_switches(ctl->reader_tid, &vol0, &invol0);
	phase_begin(p);
}

void attack_end(struct phase *p)
{
	phase_end(p);
	ctxt_switches(ctl->reader_tid, &vol1, &invol1);

	atomic_store(&ctl->trial, -1);
	pthread_join(reader, NULL);
	send_command(0);
	waitpid(helper_pid, NULL, 0);
}

void fresh_va_reserve(struct fresh_va *f, long slices, size_t len,
		      size_t align)
{
	size_t reserve = (size_t)slices * (len + 2 * align);

	f->next = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
		       MAP_NORESERVE, -1, 0);
	if (f->next == MAP_FAILED)
		die(1, "cannot reserve %zu MiB of address space", reserve / MiB);
	f->end = f->next + reserve;
}

char *fresh_va(struct fresh_va *f, size_t len, size_t align, long attempts)
{
	char *va = (char *)(((uintptr_t)f->next + align - 1) &
			    ~(uintptr_t)(align - 1));

	/* a guard between trials; no address is ever mapped twice */
	f->next = va + len + align;
	if (f->next > f->end)
		die(1, "out of reserved address space after %ld trials",
		    attempts);
	return va;
}

void trial_fault_in(uintptr_t va, int npages, long attempt)
{
	for (int i = 0; i < npages; i++) {
		const volatile uint64_t *q = (const volatile uint64_t *)
			(va + i * PAGE_SIZE_4K);

		if (q[0] != ctl->old.index[i] || q[1] != ctl->old.tag[1])
			die(1, "page %d of trial %ld reads 0x%016" PRIx64 " before the trial, not 0x%016" PRIx64,
			    i, attempt, q[0], ctl->old.index[i]);
		ctl->victim_pfn[i] = present_pfn(pagemap_self(va +
							i * PAGE_SIZE_4K));
		if (!ctl->victim_pfn[i])
			die(1, "no PFN in /proc/self/pagemap: run as root");
	}
}

void wait_reader(long trial, long passes, const char *what)
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

void trial_start(uintptr_t va, int npages, long t, enum after_done after)
{
	ctl->va = va;
	ctl->npages = npages;
	ctl->htrial = t;
	ctl->after = after;
	atomic_store(&ctl->done, 0);
	/* the reader reads every page once: its CPU caches the translations */
	atomic_store_explicit(&ctl->trial, t, memory_order_release);
	wait_reader(t, 1, "read the trial's pages");
}

void trial_done(void)
{
	atomic_store_explicit(&ctl->done, 1, memory_order_release);
}

void trial_stop(void)
{
	atomic_store(&ctl->trial, 0);
	wait_reader(0, 0, "stop");
	/* PROT_NONE again (merges with the reservation); never mapped again */
	if (mmap((void *)ctl->va, ctl->npages * PAGE_SIZE_4K, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
		 0) == MAP_FAILED)
		die(1, "mmap PROT_NONE: %s", strerror(errno));
}

/* --- the result ------------------------------------------------------------ */

void attack_fields(struct fields *extra, long trials, int npages,
		   long linger, const char *file)
{
	long violations = atomic_load(&ctl->violations);

	field_int(extra, "trials", trials);
	field_int(extra, "violations", violations);
	field_int(extra, "bad_reads", atomic_load(&ctl->bad_reads));
	field_int(extra, "pages_per_trial", npages);
	field_int(extra, "linger_passes", linger);
	field_int(extra, "cpu_reader", reader_cpu);
	field_int(extra, "cpu_helper", main_cpu);
	field_str(extra, "file", file);
	for (long i = 0; i < violations && i < MAX_DETAILS; i++) {
		struct violation *v = &ctl->v[i];
		char key[32], val[32];

		snprintf(key, sizeof(key), "v%ld_trial", i);
		field_int(extra, key, v->trial);
		snprintf(key, sizeof(key), "v%ld_page", i);
		field_int(extra, key, v->page);
		snprintf(key, sizeof(key), "v%ld_addr", i);
		snprintf(val, sizeof(val), "0x%" PRIxPTR, v->addr);
		field_str(extra, key, val);
		snprintf(key, sizeof(key), "v%ld_offset", i);
		field_int(extra, key, v->offset);
		snprintf(key, sizeof(key), "v%ld_expected", i);
		snprintf(val, sizeof(val), "0x%016" PRIx64, v->expected);
		field_str(extra, key, val);
		snprintf(key, sizeof(key), "v%ld_seen", i);
		snprintf(val, sizeof(val), "0x%016" PRIx64, v->seen);
		field_str(extra, key, val);
		snprintf(key, sizeof(key), "v%ld_kind", i);
		field_str(extra, key, v->kind);
	}
}

long long reader_preemptions(void)
{
	long long vol, invol;

	ctxt_switches(ctl->reader_tid, &vol, &invol);
	return invol;
}

void attack_switch_checks(struct fields *checks)
{
	field_int(checks, "reader_voluntary_switches", vol1 - vol0);
	field_int(checks, "reader_involuntary_switches", invol1 - invol0);
}
