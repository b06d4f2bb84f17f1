// SPDX-License-Identifier: GPL-2.0
/*
 * luf-bound: how long LUF holds lazily unmapped pages while a real-time task
 * keeps the CPU that held them busy.
 *
 * Under LUF, reclaim unmaps a clean read-only file folio without a TLB
 * flush and holds the freed folio until a flush: every CPU that ran the mm
 * may keep a stale read-only entry to it until then.  Documentation/mm/
 * luf.rst ("Release") bounds that time: a delayed work item releases (flushes,
 * then frees) what is held a quarter second after it was held, and it runs
 * on an unbound workqueue, so a task busy on the holding CPU, a SCHED_FIFO
 * one included, does not delay it; only real-time tasks on every CPU do
 * (then the scheduler's real-time throttling bounds it, about a second).
 *
 * Each trial: main, on the first CPU, maps a file of clean page cache
 * MAP_SHARED PROT_READ at a fresh address and read-faults every page; a
 * thread of this process on the second CPU reads them too, so the mm has run
 * there and the flush of the take-away would be remote (LUF defers only
 * those); main takes the pages away with madvise(MADV_PAGEOUT), which must
 * have been lazy (nr_tlb_luf_folios moved by every page, nr_tlb_luf_held
 * rose), wakes a monitor, a SCHED_FIFO thread on the last CPU, and goes to
 * sleep; the monitor then starts a SCHED_FIFO thread of lower priority
 * pinned on the first CPU that busy-loops until --hog-ms after the
 * take-away, and reads /proc/vmstat about every millisecond until the
 * pages are released: LUF's release flush counted
 * (nr_tlb_flush_luf_release) and nr_tlb_luf_held back down.  The trial's
 * latency is that moment's distance from the start of the take-away.
 *
 * --hog-all hogs every CPU, the monitor's too (the monitor, of higher
 * priority, still runs): the case the documented bound excludes.  The
 * release's worker then waits for a turn the scheduler gives fair tasks
 * among real-time ones (real-time throttling, the fair server), which came
 * at several points a second: in a 2-CPU guest 26 of 70 such trials were
 * later than 500 ms (up to 1.2 s), the others not.
 *
 * Nothing in this process may fault a page in between the take-away and
 * the release: a write fault in an mm with a lazy unmap pending makes LUF
 * flush at once (rule R3) and release early, which would hide a late
 * release.  The threads are started, their stacks and every buffer touched,
 * before the first trial; /proc/vmstat is read with read(2) into those
 * buffers.  Any other LUF flush during the window (nr_tlb_flush_luf_mm,
 * _file, _inval, _special, _keep) makes the trial "disturbed": not counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: luf-bound [--trials N] [--pages N] [--hog-ms MS] [--bound-ms MS]\n"
"                 [--hog-all] [--dir DIR]\n"
"\n"
"How long LUF holds lazily unmapped pages while a SCHED_FIFO thread keeps\n"
"the CPU that held them busy.  Each trial maps a file's clean page cache\n"
"MAP_SHARED PROT_READ, reads every page on the first CPU and from a thread\n"
"on the second, takes the pages away lazily with madvise(MADV_PAGEOUT) on\n"
"the first, then busy-loops a SCHED_FIFO thread (priority 50) there for\n"
"--hog-ms while a monitor (SCHED_FIFO 60, last CPU) polls /proc/vmstat\n"
"about every millisecond until LUF released them: nr_tlb_flush_luf_release\n"
"moved and nr_tlb_luf_held fell back.  The latency is measured from the\n"
"start of the take-away.  A trial whose take-away was not lazy is missed,\n"
"one in which another LUF flush came first is disturbed; neither counts.\n"
"\n"
"  --trials N     trials whose take-away was lazy (default 10)\n"
"  --pages N      pages per trial (default 64, at most 512)\n"
"  --hog-ms MS    how long after the take-away the SCHED_FIFO thread spins\n"
"                 (default 1500); the monitor gives up 2 s after that\n"
"  --bound-ms MS  the latest release that passes (default 500: LUF's\n"
"                 quarter second plus slack for emulation)\n"
"  --hog-all      also hog every other CPU (SCHED_FIFO 50), the monitor's\n"
"                 too: the case the documented bound excludes\n"
"  --dir DIR      where to make the file: a disk filesystem, not tmpfs\n"
"                 (default /scratch: the lab's guest makes an ext2 there when\n"
"                 booted with unflush.scratch=SIZE); removed at exit\n"
"\n"
"Needs root, 2 usable CPUs and a kernel with LUF (" LUF_SWITCH ",\n"
"switched on here, and unmap_flush, both put back at exit).  The real-time\n"
"throttling settings are left as they are and reported.  One UNFLUSH-RESULT\n"
"line, experiment luf-bound: trials, missed, disturbed, latency_ms (one per\n"
"trial), latency_p50_ms, latency_max_ms, over_bound, bound_ms, hog_ms,\n"
"hog_all, rt_runtime_us, rt_period_us, poll_gap_max_ms (the monitor's\n"
"longest gap between two reads: the resolution), takeaway_ms_max (the\n"
"longest MADV_PAGEOUT); checks lazy_trials,\n"
"luf_folios, held_rise_min, released_trials.\n"
"KTAP (lib/ktap.h): one test after the result line, luf-bound/hog-one, or\n"
"luf-bound/hog-all with --hog-all.\n"
"Exit 0: every trial released within --bound-ms; 1: a trial was not (after\n"
"the result), or a precondition failed (no result line; the test's KTAP\n"
"line says why); 4: skipped, the kernel has no LUF or not its counters;\n"
"2: usage.\n";

#define HOG_PRIO	50
#define MONITOR_PRIO	60
#define POLL_NS		1000000L	/* the monitor's sleep between reads */
#define STACK_BYTES	(256 * KiB)
#define UNMAP_FLUSH	"/sys/kernel/mm/tlb_batching/unmap_flush"
#define MAX_TRIALS	1000
#define MAX_PAGES	512		/* one page table's worth */
/*
 * Each trial's pages within one page table: MADV_PAGEOUT reclaims a table
 * at a time, and the second finds the first one's batched flush pending
 * (flush_tlb_batched_pending(), on x86 a flush of the whole mm that also
 * reaches CPUs in lazy TLB mode, which then leave the mm); the rest of the
 * pages, mapped on no other CPU any more, were flushed at once, not lazily
 * (13 and 21 of 64 in 2 of 12 attempts before the trials were aligned).
 */
#define TRIAL_ALIGN	(2 * MiB)

/* --- /proc/vmstat without stdio: no allocation, no fault --- */

/*
 * A thread's own descriptor and buffer, touched before the trials: read()
 * writes to it through the kernel's copy, which would fault a page not
 * yet there.
 */
struct vmreader {
	int fd;
	char buf[32 * KiB];
};

/* What a trial watches, from one read. */
struct lufstat {
	long long held;		/* node stat: lags by per-CPU deltas */
	long long folios;	/* event: folios unmapped lazily */
	long long release;	/* event: the release's flush */
	long long other;	/* event: every other LUF flush */
};

static const char *const other_flushes[] = {
	"nr_tlb_flush_luf_special", "nr_tlb_flush_luf_keep",
	"nr_tlb_flush_luf_mm", "nr_tlb_flush_luf_file",
	"nr_tlb_flush_luf_inval", "nr_tlb_flush_luf_bbm",
	"nr_tlb_flush_luf_fill", NULL };

static void vmreader_open(struct vmreader *r)
{
	r->fd = open("/proc/vmstat", O_RDONLY | O_CLOEXEC);
	if (r->fd < 0)
		die(1, "cannot open /proc/vmstat: %s", strerror(errno));
	memset(r->buf, 0, sizeof(r->buf));
}

/* The value after "\n@key " in @text, -1 if absent. */
static long long key_value(const char *text, const char *key)
{
	size_t len = strlen(key);
	const char *p = text;

	while ((p = strstr(p, key))) {
		if ((p == text || p[-1] == '\n') && p[len] == ' ')
			return strtoll(p + len + 1, NULL, 10);
		p += len;
	}
	return -1;
}

static void vmreader_read(struct vmreader *r, struct lufstat *s)
{
	size_t have = 0;
	ssize_t n;

	if (lseek(r->fd, 0, SEEK_SET))
		die(1, "lseek /proc/vmstat: %s", strerror(errno));
	while ((n = read(r->fd, r->buf + have, sizeof(r->buf) - 1 - have)) > 0)
		have += n;
	if (n < 0)
		die(1, "read /proc/vmstat: %s", strerror(errno));
	if (have == sizeof(r->buf) - 1)
		die(1, "internal: /proc/vmstat is larger than %zu bytes",
		    sizeof(r->buf));
	r->buf[have] = 0;
	s->held = key_value(r->buf, "nr_tlb_luf_held");
	s->folios = key_value(r->buf, "nr_tlb_luf_folios");
	s->release = key_value(r->buf, "nr_tlb_flush_luf_release");
	s->other = 0;
	for (int i = 0; other_flushes[i]; i++)
		s->other += key_value(r->buf, other_flushes[i]);
}

/* --- the threads ----------------------------------------------------------- */

static long futex(_Atomic uint32_t *word, int op, uint32_t val)
{
	return syscall(SYS_futex, word, op | FUTEX_PRIVATE_FLAG, val, NULL,
		       NULL, 0);
}

/* Wait until *@word is no longer @old. */
static void wait_change(_Atomic uint32_t *word, uint32_t old)
{
	while (atomic_load(word) == old)
		futex(word, FUTEX_WAIT, old);
}

static void bump(_Atomic uint32_t *word)
{
	atomic_fetch_add(word, 1);
	futex(word, FUTEX_WAKE, INT_MAX);
}

/* Shared by main and its threads. */
static struct {
	/* main -> monitor: a trial begins (or, with stop, the end) */
	_Atomic uint32_t go;
	/* monitor -> hogs: main is asleep, hog */
	_Atomic uint32_t hog;
	_Atomic int stop;
	double t_take;		/* the take-away began (now_s()) */
	double hog_end, limit;	/* when the hogs stop, when the monitor does */
	struct lufstat base;	/* before the take-away */
	long long rise;		/* nr_tlb_luf_held after it, minus base */
	/* hogs and monitor -> main: each bumps it when done with the trial */
	_Atomic uint32_t finished;
	/* the monitor's findings */
	bool released, disturbed;
	double release_ms, gap_max_ms;
	/* main -> toucher: read every page of [va, va + pages) */
	_Atomic uint32_t touch, touched;
	const volatile char *va;
	long pages;
} sh;

static int ncpus, cpus[MAX_CPUS];
static int main_cpu, touch_cpu, monitor_cpu;
static int nhogs;		/* hog threads: 1, or one per CPU */
static int hog_cpus[MAX_CPUS];
static pthread_t hog_thread[MAX_CPUS], monitor_thread, touch_thread;

static void *toucher(void *arg)
{
	uint32_t seen = 0;

	(void)arg;
	for (;;) {
		wait_change(&sh.touch, seen);
		seen = atomic_load(&sh.touch);
		if (atomic_load(&sh.stop))
			return NULL;
		for (long i = 0; i < sh.pages; i++)
			(void)sh.va[i * PAGE_SIZE_4K];
		bump(&sh.touched);
	}
}

static void *hog(void *arg)
{
	uint32_t seen = 0;

	(void)arg;
	for (;;) {
		wait_change(&sh.hog, seen);
		seen = atomic_load(&sh.hog);
		if (atomic_load(&sh.stop))
			return NULL;
		/* no system call, no fault: the CPU is this thread's */
		while (now_s() < sh.hog_end)
			;
		bump(&sh.finished);
	}
}

static struct vmreader monitor_reader, main_reader;

/*
 * main's /proc/self/task/TID/stat, opened before the trials: the monitor
 * starts the hogs only once main sleeps.  Woken by main, the hog on main's
 * CPU would preempt it still runnable, and a fair task that a real-time one
 * keeps waiting makes the scheduler give that CPU's fair tasks a turn later
 * (the fair server, sched/deadline), the release's worker among them: no
 * thread of this program is to be one of the tasks that decide when.
 */
static int main_stat_fd = -1;
static char main_stat[512];

static bool main_asleep(void)
{
	ssize_t n = pread(main_stat_fd, main_stat, sizeof(main_stat) - 1, 0);
	char *p;

	if (n <= 0)
		die(1, "cannot read main's /proc/self/task/TID/stat: %s",
		    n ? strerror(errno) : "empty");
	main_stat[n] = 0;
	p = strrchr(main_stat, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

static void wait_main_asleep(void)
{
	const struct timespec nap = { .tv_nsec = 20000 };
	double give_up = now_s() + 10;

	while (!main_asleep()) {
		if (now_s() > give_up)
			die(1, "main did not go to sleep within 10 s of the take-away");
		clock_nanosleep(CLOCK_MONOTONIC, 0, &nap, NULL);
	}
}

static void monitor_trial(void)
{
	const struct timespec poll = { .tv_nsec = POLL_NS };
	double last = 0, t;
	struct lufstat s;

	sh.released = sh.disturbed = false;
	sh.release_ms = -1;
	sh.gap_max_ms = 0;
	wait_main_asleep();
	bump(&sh.hog);
	do {
		vmreader_read(&monitor_reader, &s);
		t = now_s();
		if (last && (t - last) * 1e3 > sh.gap_max_ms)
			sh.gap_max_ms = (t - last) * 1e3;
		last = t;
		if (s.other != sh.base.other)
			sh.disturbed = true;
		/*
		 * Released: flushed (by the release, or by anything else,
		 * which makes the trial disturbed) and freed: the held count
		 * is back down.  It lags by per-CPU deltas (of up to the
		 * vmstat threshold each), folded here by work that a hogged
		 * CPU does not run, so "back down" is: it lost more than
		 * half of what the take-away added.
		 */
		if ((s.release != sh.base.release || sh.disturbed) &&
		    s.held <= sh.base.held + sh.rise / 2) {
			sh.released = true;
			sh.release_ms = (t - sh.t_take) * 1e3;
			break;
		}
		clock_nanosleep(CLOCK_MONOTONIC, 0, &poll, NULL);
	} while (t < sh.limit);
}

static void *monitor(void *arg)
{
	uint32_t seen = 0;

	(void)arg;
	for (;;) {
		wait_change(&sh.go, seen);
		seen = atomic_load(&sh.go);
		if (atomic_load(&sh.stop))
			return NULL;
		monitor_trial();
		bump(&sh.finished);
	}
}

/*
 * A thread pinned on @cpu, SCHED_FIFO at @prio if @prio > 0, on a stack
 * that is all there before it starts (MAP_POPULATE).
 */
static void start_thread(pthread_t *t, void *(*fn)(void *), int cpu, int prio)
{
	struct sched_param sp = { .sched_priority = prio };
	pthread_attr_t attr;
	cpu_set_t set;
	void *stack;
	int err;

	stack = mmap(NULL, STACK_BYTES, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE | MAP_STACK,
		     -1, 0);
	if (stack == MAP_FAILED)
		die(1, "cannot map a thread's stack: %s", strerror(errno));
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_attr_init(&attr);
	pthread_attr_setstack(&attr, stack, STACK_BYTES);
	pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	if (prio > 0) {
		pthread_attr_setinheritsched(&attr, PTHREAD_EXPLICIT_SCHED);
		pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
		pthread_attr_setschedparam(&attr, &sp);
	}
	err = pthread_create(t, &attr, fn, NULL);
	if (err)
		die(1, "cannot start a thread on CPU %d%s: %s", cpu,
		    prio > 0 ? " at SCHED_FIFO" : "", strerror(err));
	pthread_attr_destroy(&attr);
}

static void stop_threads(void)
{
	atomic_store(&sh.stop, 1);
	bump(&sh.go);
	bump(&sh.hog);
	bump(&sh.touch);
	for (int i = 0; i < nhogs; i++)
		pthread_join(hog_thread[i], NULL);
	pthread_join(monitor_thread, NULL);
	pthread_join(touch_thread, NULL);
}

/* Touch @bytes of this thread's stack below here, so it is there later. */
static __attribute__((noinline)) void touch_stack(void)
{
	volatile char pad[64 * KiB];

	memset((char *)pad, 0, sizeof(pad));
}

/* --- set-up ---------------------------------------------------------------- */

static char path[PATH_MAX];

static void remove_file(void)
{
	if (path[0])
		unlink(path);
}

/*
 * @pages pages, written, on disk, dropped from the page cache and closed
 * for writing, so that each trial reads them in clean and nobody has the
 * file open for writing at the take-away (LUF's gate).  The descriptor
 * returned is read-only.
 */
static int make_file(const char *dir, long pages)
{
	static char page[PAGE_SIZE_4K];
	struct statvfs vfs;
	struct statfs fs;
	int fd;

	if (statfs(dir, &fs))
		die(1, "no %s (%s): LUF needs a disk filesystem to write a file on; boot the lab's guest with unflush.scratch=128M (python3 -m lab run --append unflush.scratch=128M) or give --dir DIR",
		    dir, strerror(errno));
	if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
		die(1, "%s is on tmpfs or ramfs, whose pages reclaim swaps out, not drops: give --dir on a disk filesystem (the lab: unflush.scratch=SIZE)",
		    dir);
	if (!statvfs(dir, &vfs) &&
	    (size_t)vfs.f_bavail * vfs.f_bsize < (size_t)pages * PAGE_SIZE_4K)
		die(1, "%s has too little room for %ld pages: fewer --pages, or a larger filesystem",
		    dir, pages);
	snprintf(path, sizeof(path), "%s/luf-bound-%d", dir, (int)getpid());
	cleanup_push_fn(remove_file);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die(1, "cannot make %s: %s%s", path, strerror(errno),
		    errno == EROFS ? " (a read-only mount: give --dir on a writable one)" : "");
	for (long p = 0; p < pages; p++) {
		memset(page, (int)(p % 251) + 1, sizeof(page));
		if (write(fd, page, sizeof(page)) != (ssize_t)sizeof(page))
			die(1, "cannot write %s: %s", path, strerror(errno));
	}
	/* dirty page cache is written back, not dropped, by MADV_PAGEOUT */
	if (fsync(fd))
		die(1, "fsync %s: %s", path, strerror(errno));
	close(fd);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(1, "cannot open %s: %s", path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return fd;
}

static long long setting_number(const char *p)
{
	long long v;

	return read_number(p, &v) ? v : -1;
}

/* --- the trials ------------------------------------------------------------ */

static double median(double *v, int n)
{
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double x = v[j];

			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Release whatever LUF holds now: the switch off (flush, free) and on. */
static void release_held(void)
{
	setting_write(LUF_SWITCH, "0");
	setting_write(LUF_SWITCH, "1");
}

int main(int argc, char **argv)
{
	enum { O_TRIALS = 0x100, O_PAGES, O_HOG_MS, O_BOUND_MS, O_HOG_ALL,
	       O_DIR };
	static const struct option opts[] = {
		{ "trials", required_argument, NULL, O_TRIALS },
		{ "pages", required_argument, NULL, O_PAGES },
		{ "hog-ms", required_argument, NULL, O_HOG_MS },
		{ "bound-ms", required_argument, NULL, O_BOUND_MS },
		{ "hog-all", no_argument, NULL, O_HOG_ALL },
		{ "dir", required_argument, NULL, O_DIR },
		{ "help", no_argument, NULL, 'h' },
		{ 0 } };
	long trials = 10, pages = 64, hog_ms = 1500, bound_ms = 500;
	long attempts = 0, missed = 0, disturbed = 0, max_missed, max_disturbed;
	long long held_rise_min = LLONG_MAX, luf_folios = 0;
	double lat[MAX_TRIALS], sorted[MAX_TRIALS], takeaway_max = 0;
	double gap_max = 0, p50, lat_max = 0;
	struct fields extra = { 0 }, checks = { 0 };
	const char *dir = "/scratch";
	struct phase p = { 0 };
	struct fresh_va fv;
	struct jbuf list = { 0 };
	bool hog_all = false;
	long over = 0, unreleased = 0, done = 0;
	size_t len;
	int opt, fd;

	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case O_TRIALS:
			trials = parse_count("--trials", optarg, 1);
			break;
		case O_PAGES:
			pages = parse_count("--pages", optarg, 1);
			break;
		case O_HOG_MS:
			hog_ms = parse_count("--hog-ms", optarg, 1);
			break;
		case O_BOUND_MS:
			bound_ms = parse_count("--bound-ms", optarg, 1);
			break;
		case O_HOG_ALL:
			hog_all = true;
			break;
		case O_DIR:
			dir = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			bad_option(argv);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (trials > MAX_TRIALS)
		usage_error("--trials %ld: at most %d", trials, MAX_TRIALS);
	if (pages > MAX_PAGES)
		usage_error("--pages %ld: at most %d", pages, MAX_PAGES);
	len = pages * PAGE_SIZE_4K;
	ktap_plan(1);
	ktap_test("luf-bound/%s", hog_all ? "hog-all" : "hog-one");

	/* preconditions: never a pass that was not measured */
	if (geteuid())
		die(1, "needs root: SCHED_FIFO threads, MADV_PAGEOUT of a file it does not own, and the luf switch");
	if (!path_exists(LUF_SWITCH))
		ktap_skip_exit("this kernel has no LUF (" LUF_SWITCH "): nothing to measure");
	if (vmstat_value("nr_tlb_luf_held") < 0 ||
	    vmstat_value("nr_tlb_luf_folios") < 0 ||
	    vmstat_value("nr_tlb_flush_luf_release") < 0)
		ktap_skip_exit("no nr_tlb_luf_held, nr_tlb_luf_folios or nr_tlb_flush_luf_release in /proc/vmstat (CONFIG_VM_EVENT_COUNTERS): a lazy take-away and its release could not be seen");
	ncpus = online_cpus(cpus, MAX_CPUS);
	if (ncpus < 2)
		die(1, "needs 2 usable CPUs, has %d: LUF defers only a flush that would reach another CPU (the lab: --cpus 2)",
		    ncpus);
	main_cpu = cpus[0];
	touch_cpu = cpus[1];
	monitor_cpu = cpus[ncpus - 1];
	nhogs = hog_all ? ncpus : 1;
	for (int i = 0; i < nhogs; i++)
		hog_cpus[i] = cpus[i];

	pin_main(main_cpu);
	setting_write(LUF_SWITCH, "1");
	/* without the deferred flush there is nothing to make lazy */
	if (path_exists(UNMAP_FLUSH))
		setting_write(UNMAP_FLUSH, "1");
	fd = make_file(dir, pages);
	/* no readahead: each page is read by the fault that needs it */
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	max_missed = trials / 10 + 10;
	max_disturbed = trials;
	fresh_va_reserve(&fv, trials + max_missed + max_disturbed + 1, len,
			 TRIAL_ALIGN);

	/* everything the trials write to is there before the first one */
	vmreader_open(&main_reader);
	vmreader_open(&monitor_reader);
	snprintf(main_stat, sizeof(main_stat), "/proc/self/task/%ld/stat",
		 (long)syscall(SYS_gettid));
	main_stat_fd = open(main_stat, O_RDONLY | O_CLOEXEC);
	if (main_stat_fd < 0)
		die(1, "cannot open %s: %s", main_stat, strerror(errno));
	memset(main_stat, 0, sizeof(main_stat));
	memset(lat, 0, sizeof(lat));
	memset(sorted, 0, sizeof(sorted));
	touch_stack();
	start_thread(&touch_thread, toucher, touch_cpu, 0);
	start_thread(&monitor_thread, monitor, monitor_cpu, MONITOR_PRIO);
	for (int i = 0; i < nhogs; i++)
		start_thread(&hog_thread[i], hog, hog_cpus[i], HOG_PRIO);

	phase_begin(&p);
	while (done < trials) {
		struct lufstat after;
		uint32_t fin;
		double t1;
		char *va;

		if (missed > max_missed)
			die(1, "in %ld of %ld attempts the take-away was not lazy (nr_tlb_luf_folios did not move by every page, or nr_tlb_luf_held did not rise): nothing to measure; is the file's filesystem one LUF takes (a regular file on a block device), and did the mm run on CPU %d?",
			    missed, attempts, touch_cpu);
		if (disturbed > max_disturbed)
			die(1, "in %ld of %ld attempts another LUF flush (nr_tlb_flush_luf_mm, _file, _inval, _special or _keep) released the pages before the release did: the trials prove nothing; is something else running?",
			    disturbed, attempts);
		attempts++;
		va = fresh_va(&fv, len, TRIAL_ALIGN, attempts);
		if (mmap(va, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) ==
		    MAP_FAILED)
			die(1, "cannot map %s: %s", path, strerror(errno));
		/* per-CPU deltas folded: nr_tlb_luf_held is exact from here */
		write_text("/proc/sys/vm/stat_refresh", "1");
		/* here first: onto this CPU's LRU batch, which the take-away drains */
		for (long i = 0; i < pages; i++)
			(void)((const volatile char *)va)[i * PAGE_SIZE_4K];
		sh.va = va;
		sh.pages = pages;
		fin = atomic_load(&sh.touched);
		bump(&sh.touch);
		wait_change(&sh.touched, fin);

		vmreader_read(&main_reader, &sh.base);
		sh.t_take = now_s();
		if (madvise(va, len, MADV_PAGEOUT))
			die(1, "madvise(MADV_PAGEOUT): %s", strerror(errno));
		t1 = now_s();
		vmreader_read(&main_reader, &after);
		sh.rise = after.held - sh.base.held;
		if (after.folios - sh.base.folios < pages || sh.rise <= 0) {
			missed++;
			munmap(va, len);
			release_held();
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			continue;
		}
		sh.hog_end = sh.t_take + hog_ms / 1e3;
		sh.limit = sh.hog_end + 2.0;
		if (sh.limit < sh.t_take + bound_ms / 1e3 + 2.0)
			sh.limit = sh.t_take + bound_ms / 1e3 + 2.0;
		fin = atomic_load(&sh.finished);
		/* the monitor starts the hogs once this thread sleeps below */
		bump(&sh.go);
		for (uint32_t f; (f = atomic_load(&sh.finished)) - fin <
				 (uint32_t)nhogs + 1;)
			futex(&sh.finished, FUTEX_WAIT, f);
		munmap(va, len);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);

		if (sh.disturbed) {
			disturbed++;
			release_held();
			continue;
		}
		if (!sh.released)
			release_held();
		luf_folios += after.folios - sh.base.folios;
		if (sh.rise < held_rise_min)
			held_rise_min = sh.rise;
		if ((t1 - sh.t_take) * 1e3 > takeaway_max)
			takeaway_max = (t1 - sh.t_take) * 1e3;
		if (sh.gap_max_ms > gap_max)
			gap_max = sh.gap_max_ms;
		lat[done] = sh.released ? sh.release_ms : -1;
		if (!sh.released)
			unreleased++;
		else if (lat[done] > bound_ms)
			over++;
		done++;
	}
	phase_end(&p);
	stop_threads();

	jb_printf(&list, "[");
	for (long i = 0, n = 0; i < done; i++) {
		jb_printf(&list, "%s%.1f", i ? "," : "", lat[i]);
		if (lat[i] >= 0)
			sorted[n++] = lat[i];
		if (lat[i] > lat_max)
			lat_max = lat[i];
	}
	jb_printf(&list, "]");
	p50 = done - unreleased ? median(sorted, done - unreleased) : -1;

	field_int(&extra, "trials", done);
	field_int(&extra, "missed", missed);
	field_int(&extra, "disturbed", disturbed);
	field_int(&extra, "pages_per_trial", pages);
	field_raw(&extra, "latency_ms", list.s);
	field_real(&extra, "latency_p50_ms", p50);
	field_real(&extra, "latency_max_ms", lat_max);
	field_int(&extra, "over_bound", over + unreleased);
	field_int(&extra, "unreleased", unreleased);
	field_int(&extra, "bound_ms", bound_ms);
	field_int(&extra, "hog_ms", hog_ms);
	field_int(&extra, "hog_all", hog_all);
	field_int(&extra, "hog_cpus", nhogs);
	field_int(&extra, "hog_prio", HOG_PRIO);
	field_int(&extra, "monitor_prio", MONITOR_PRIO);
	field_int(&extra, "cpu_hog", main_cpu);
	field_int(&extra, "cpu_toucher", touch_cpu);
	field_int(&extra, "cpu_monitor", monitor_cpu);
	field_int(&extra, "rt_runtime_us",
		  setting_number("/proc/sys/kernel/sched_rt_runtime_us"));
	field_int(&extra, "rt_period_us",
		  setting_number("/proc/sys/kernel/sched_rt_period_us"));
	field_real(&extra, "poll_gap_max_ms", gap_max);
	field_real(&extra, "takeaway_ms_max", takeaway_max);
	field_str(&extra, "file", path);
	field_int(&checks, "attempts", attempts);
	field_int(&checks, "lazy_trials", done);
	field_int(&checks, "luf_folios", luf_folios);
	field_int(&checks, "held_rise_min",
		  held_rise_min == LLONG_MAX ? 0 : held_rise_min);
	field_int(&checks, "released_trials", done - unreleased);
	report_result("luf-bound", "threads", 0, &p, &extra, &checks);
	phase_free(&p);

	/* a late release fails the test, its KTAP line saying how late */
	if (unreleased)
		die(1, "in %ld of %ld trials LUF had not released the pages %ld ms after the hog stopped (p50 of the others %.0f ms): held pages, and stale TLB entries, outlive the documented bound",
		    unreleased, done, (long)((sh.limit - sh.hog_end) * 1e3), p50);
	if (over)
		die(1, "in %ld of %ld trials LUF released the pages later than --bound-ms %ld (p50 %.0f ms, max %.0f ms)%s",
		    over, done, bound_ms, p50, lat_max,
		    hog_all ? ": every CPU was hogged, the case the bound excludes" : "");
	ktap_result(true);
	return ktap_status();
}
