// SPDX-License-Identifier: GPL-2.0
/*
 * luf-cost: what LUF costs work that has nothing to do with it (seed 001).
 *
 * LUF leaves the TLB flushes of clean, read-only page cache pending when
 * reclaim or migration unmaps it, and pays for that elsewhere: a check of
 * the mm's note before a fault makes a PTE writable (R3), a check of the
 * file's note when a file is opened for writing (R4), and freed pages held
 * back from the allocator until their flush.  That must keep writes, page
 * faults and unrelated allocations within the run-to-run spread of LUF
 * switched off while a load makes LUF work.  This program runs that
 * load in the background (lib/roload.c: seed 001's read-only streaming in a
 * memory cgroup too small for it, with demotion to a CPU-less node if there
 * is one) and measures each of those operations in the foreground, outside
 * the cgroup.  It never touches the luf switch: the lab runs it once with
 * the switch on and once with it off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "roload.h"

#define SWITCH_LUF	"/sys/kernel/mm/tlb_batching/luf"
#define WARMUP_S	120.0

static const char usage[] =
"usage: luf-cost write|fault|alloc-latency --files F1,F2,... [--threads T]\n"
"                [--memcg-limit M] [--load-rate P] [--ops N] [--size S]\n"
"                [--tmpfs-dir DIR] [--disk-dir DIR] [--reps N] [--quick]\n"
"                [--shape threads|single]\n"
"\n"
"Start a background load that keeps reclaim unmapping clean read-only page\n"
"cache (what LUF defers): one process per file (name a file twice for two)\n"
"in a cgroup v2 memory cgroup with memory.max = M, each mapping its file\n"
"MAP_SHARED PROT_READ and reading one byte per 4K page, pass after pass,\n"
"with T threads, thread t on the (t+1) mod ncpus-th usable CPU; wait until\n"
"reclaim runs; then, in this process, outside the cgroup, pinned to the\n"
"first usable CPU (which it shares with the load), measure per repetition\n"
"(one UNFLUSH-RESULT per phase):\n"
"\n"
"  write          pwrite() of 4 KiB, --ops times, cycling over a file of\n"
"                 --size (default 4M) written in full beforehand, so every\n"
"                 write overwrites page cache: phase tmpfs (a file in\n"
"                 --tmpfs-dir), then phase disk (in --disk-dir).  Fields\n"
"                 write_ops_per_s, write_ops_per_cpu_s.  --ops default\n"
"                 500000, --quick 100000.\n"
"  fault          phase anon: first touch (a write) of every page of --size\n"
"                 of private anonymous memory, MADV_NOHUGEPAGE; phase\n"
"                 file-read: a read of every page of a file of --size in\n"
"                 --disk-dir mapped MAP_SHARED PROT_READ, its page cache\n"
"                 dropped first, MADV_RANDOM (no readahead, no fault-around:\n"
"                 each fault reads its page); phase cow: a write to every\n"
"                 page of the same file mapped MAP_PRIVATE, read into the\n"
"                 page cache first, so every fault copies.  Fields faults\n"
"                 (this process's minor + major faults, getrusage),\n"
"                 faults_per_s, faults_per_cpu_s, pages_per_s.  --size\n"
"                 default 256M, --quick 64M.\n"
"  (both)         phase cpu, after the others: 200 million rounds of\n"
"                 register arithmetic (--quick 100 million), no system\n"
"                 call, no fault, no memory: a control LUF cannot touch.\n"
"                 Field cpu_ops_per_cpu_s.\n"
"  alloc-latency  --ops times: mmap() --size (default 64K) of anonymous\n"
"                 memory, write every page, munmap(), each timed with\n"
"                 clock_gettime(CLOCK_MONOTONIC) and with\n"
"                 CLOCK_THREAD_CPUTIME_ID.  Fields alloc_ops_per_s,\n"
"                 alloc_ops_per_cpu_s, alloc_lat_p50_ns, _p90_ns, _p99_ns,\n"
"                 _max_ns, _mean_ns (wall time), alloc_cpu_mean_ns (CPU\n"
"                 time per op over the phase), alloc_lat_cpu_p50_ns,\n"
"                 _p99_ns, _max_ns (per-op thread CPU time),\n"
"                 alloc_offcpu_p50_ns, _p99_ns, _max_ns (per-op wall minus\n"
"                 CPU time: the task off its CPU), alloc_slow_lat_mean_ns\n"
"                 and alloc_slow_offcpu_mean_ns (mean wall and off-CPU\n"
"                 time of the ops at or above the wall p99),\n"
"                 alloc_cpu_stretched_ops and _mean_ns (the ops whose CPU\n"
"                 time is over twice its median, and their mean CPU time).\n"
"                 Each op is also marked for the lab's instruction plugin\n"
"                 (under `lab bench --icount`: insns/vcpu0_op_p50, _p90,\n"
"                 _p99, _max, the instructions the op ran on its CPU).\n"
"                 --ops default 30000, --quick 5000.\n"
"\n"
"  --files      comma-separated files for the load, e.g. on the lab's\n"
"               read-only data disk\n"
"  --threads T  threads per load process (default: every usable CPU; 1 with\n"
"               --shape single)\n"
"  --memcg-limit M  memory.max of the load's cgroup (default 64M)\n"
"  --load-rate P    at most P pages a second read by the whole load (default\n"
"               0: as fast as it can; LUF on makes that faster, and the\n"
"               measured work then competes with more reclaim)\n"
"  --tmpfs-dir  a tmpfs directory (default /dev/shm, else /tmp)\n"
"  --disk-dir   a writable directory on a disk filesystem (default\n"
"               /scratch, the lab's ext2 on zram, else the directory of the\n"
"               first --files file)\n"
"  --reps N     repetitions (default 3)\n"
"  --quick      fewer operations, for CI smoke runs\n"
"\n"
"Rates are per second of wall time (*_per_s) and per second of this\n"
"process's CPU time (*_per_cpu_s, CLOCK_PROCESS_CPUTIME_ID, which includes\n"
"the interrupts it took): the load has its share of the first CPU, and the\n"
"wall time shows that share as much as the work.\n"
"\n"
"The files it makes are removed at exit; if a node has memory but no CPU,\n"
"sets /sys/kernel/mm/numa/demotion_enabled to 1 and kernel.numa_balancing to\n"
"2 (restored at exit).  Verifies that the load reclaimed during every\n"
"measured phase (pgsteal > 0) and that at least 90% of the pages faulted.\n"
"Experiment ids luf-cost/write, luf-cost/fault (field phase) and\n"
"luf-cost/alloc-latency.  Fields also: ops (what the phase did: faults,\n"
"writes, rounds, allocations), cpu_s, cpu_share, load_procs,\n"
"load_threads, memcg_limit_bytes, load_rate, load_pages (read by the load\n"
"during the phase), load_pages_per_s.  checks: pgsteal, pgdemote,\n"
"load_pages, luf_switch (the switch's value, -1 if absent), and for faults\n"
"faults, min_faults, resident_pages_before (file-read).\n";

enum mode { WRITE, FAULT, ALLOC_LATENCY, NR_MODES };
static const char *const mode_names[NR_MODES] = {
	"write", "fault", "alloc-latency" };

struct cost {
	struct run_opts o;
	enum mode mode;
	char experiment[64];
	struct roload *load;
	size_t limit, size;
	long ops, cpu_ops, load_rate;
	int rep;
};

/* A measured phase: the counters, the load's progress, our own faults. */
struct measure {
	struct phase p;
	long long ops;		/* operations the phase did: field ops */
	long long load0, load1;
	long long faults0, faults1, major0, major1;
	double cpu0, cpu1;	/* this process's CPU time */
};

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* @n per second of this process's CPU time in the phase */
static double per_cpu_s(const struct measure *m, double n)
{
	return m->cpu1 > m->cpu0 ? n / (m->cpu1 - m->cpu0) : 0;
}

static void own_faults(long long *all, long long *major)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*all = ru.ru_minflt + ru.ru_majflt;
	*major = ru.ru_majflt;
}

static void measure_begin(struct cost *c, struct measure *m)
{
	memset(m, 0, sizeof(*m));
	phase_begin(&m->p);
	/*
	 * The load's count inside the phase's clock, not around the
	 * snapshots: it reads on while they are taken, which made a short
	 * phase's load_pages_per_s overstate a paced load's rate.
	 */
	m->load0 = roload_pages(c->load);
	own_faults(&m->faults0, &m->major0);
	m->cpu0 = cpu_now();
}

static void measure_end(struct cost *c, struct measure *m)
{
	m->cpu1 = cpu_now();
	own_faults(&m->faults1, &m->major1);
	m->load1 = roload_pages(c->load);
	phase_end(&m->p);
}

static long long measured_faults(const struct measure *m)
{
	return m->faults1 - m->faults0;
}

/* The result line, with the load's fields and checks; @phase may be NULL. */
static void report(struct cost *c, const char *phase, struct measure *m,
		   struct fields *extra, struct fields *checks)
{
	long long pgsteal = phase_pgsteal(&m->p);
	long long luf = -1, load = m->load1 - m->load0;
	double s = phase_elapsed(&m->p);

	read_number(SWITCH_LUF, &luf);
	if (pgsteal <= 0)
		die(1, "%s%s%s: the load reclaimed nothing during the measured phase (%lld pages read in %.2f s); lower --memcg-limit or give more --ops/--size",
		    c->experiment, phase ? "/" : "", phase ? phase : "", load,
		    s);
	if (phase)
		field_str(extra, "phase", phase);
	field_int(extra, "ops", m->ops);
	field_int(extra, "load_procs", c->load->nprocs);
	field_int(extra, "load_threads", c->load->threads);
	field_int(extra, "memcg_limit_bytes", c->limit);
	field_int(extra, "load_rate", c->load_rate);
	field_int(extra, "load_pages", load);
	field_real(extra, "load_pages_per_s", s > 0 ? load / s : 0);
	field_real(extra, "cpu_s", m->cpu1 - m->cpu0);
	field_real(extra, "cpu_share", s > 0 ? (m->cpu1 - m->cpu0) / s : 0);
	field_int(checks, "pgsteal", pgsteal);
	field_int(checks, "pgdemote", phase_delta_prefix(&m->p, "pgdemote_"));
	field_int(checks, "load_pages", load);
	field_int(checks, "luf_switch", luf);
	report_result(c->experiment, c->load->threads > 1 ? "threads" : "single",
		      c->rep, &m->p, extra, checks);
	phase_free(&m->p);
	free(extra->b.s);
	free(checks->b.s);
	*extra = (struct fields){ 0 };
	*checks = (struct fields){ 0 };
}

/* --- the files this program makes, removed at exit --- */

static char made[3][PATH_MAX];

static void remove_made(void)
{
	for (int i = 0; i < 3; i++)
		if (made[i][0] && unlink(made[i]) && errno != ENOENT)
			fprintf(stderr, "%s: cannot remove %s: %s\n",
				program_invocation_short_name, made[i],
				strerror(errno));
}

/* A new file @dir/luf-cost-<pid>.@what, open read-write, removed at exit. */
static int make_file(int slot, const char *dir, const char *what)
{
	int fd;

	if (!made[0][0] && !made[1][0] && !made[2][0])
		cleanup_push_fn(remove_made);
	snprintf(made[slot], PATH_MAX, "%s/luf-cost-%d.%s", dir, getpid(), what);
	fd = open(made[slot], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(1, "cannot create %s: %s", made[slot], strerror(errno));
	return fd;
}

/* Every page of @len bytes of @fd written: page i holds i in every word. */
static void fill_file(int fd, const char *path, size_t len)
{
	static uint64_t page[PAGE_SIZE_4K / 8];

	for (size_t off = 0; off < len; off += PAGE_SIZE_4K) {
		for (size_t w = 0; w < PAGE_SIZE_4K / 8; w++)
			page[w] = off / PAGE_SIZE_4K;
		if (pwrite(fd, page, PAGE_SIZE_4K, off) != PAGE_SIZE_4K)
			die(1, "cannot write %s: %s", path, strerror(errno));
	}
}

static long fs_type(const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf))
		return -1;
	return sf.f_type;
}

static const char *fs_name(long type, char *buf, size_t len)
{
	if (type == TMPFS_MAGIC)
		return "tmpfs";
	if (type == EXT2_SUPER_MAGIC)
		return "ext2/3/4";
	snprintf(buf, len, "0x%lx", type);
	return buf;
}

static bool writable_dir(const char *dir)
{
	struct stat st;

	return !stat(dir, &st) && S_ISDIR(st.st_mode) && !access(dir, W_OK);
}

/* --- write --- */

static void measure_write(struct cost *c, int slot, const char *dir,
			  const char *phase)
{
	static char buf[PAGE_SIZE_4K] __attribute__((aligned(4096)));
	struct fields extra = { 0 }, checks = { 0 };
	size_t pages = c->size / PAGE_SIZE_4K;
	int fd = make_file(slot, dir, "write");
	const char *path = made[slot];
	struct measure m;
	char type[32];

	fill_file(fd, path, c->size);
	measure_begin(c, &m);
	for (long i = 0; i < c->ops; i++) {
		memcpy(buf, &i, sizeof(i));
		if (pwrite(fd, buf, PAGE_SIZE_4K,
			   (i % pages) * PAGE_SIZE_4K) != PAGE_SIZE_4K)
			die(1, "pwrite to %s: %s", path, strerror(errno));
	}
	measure_end(c, &m);
	m.ops = c->ops;
	close(fd);
	unlink(path);
	field_int(&extra, "write_ops", c->ops);
	field_real(&extra, "write_ops_per_s", c->ops / phase_elapsed(&m.p));
	field_real(&extra, "write_ops_per_cpu_s", per_cpu_s(&m, c->ops));
	field_int(&extra, "write_bytes", PAGE_SIZE_4K);
	field_int(&extra, "span_bytes", c->size);
	field_str(&extra, "dir", dir);
	field_str(&extra, "fs", fs_name(fs_type(dir), type, sizeof(type)));
	report(c, phase, &m, &extra, &checks);
}

/* --- fault --- */

static void fault_fields(struct cost *c, struct measure *m,
			 struct fields *extra, struct fields *checks,
			 long long min_faults)
{
	long long faults = measured_faults(m);
	double s = phase_elapsed(&m->p);
	size_t pages = c->size / PAGE_SIZE_4K;

	m->ops = faults;
	field_int(checks, "faults", faults);
	field_int(checks, "min_faults", min_faults);
	if (faults < min_faults)
		die(1, "only %lld page faults for %zu pages, expected at least %lld (huge pages?)",
		    faults, pages, min_faults);
	field_int(extra, "pages", pages);
	field_int(extra, "faults", faults);
	field_int(extra, "major_faults", m->major1 - m->major0);
	field_real(extra, "faults_per_s", faults / s);
	field_real(extra, "faults_per_cpu_s", per_cpu_s(m, faults));
	field_real(extra, "pages_per_s", pages / s);
	field_int(extra, "mem_bytes", c->size);
}

static void touch_pages(volatile char *mem, size_t len, bool write)
{
	unsigned int sum = 0;

	for (size_t off = 0; off < len; off += PAGE_SIZE_4K) {
		if (write)
			mem[off] = 1;
		else
			sum += mem[off];
	}
	(void)sum;
}

/* The faults of one pass over @mem (unmapped afterwards), as @phase. */
static void measure_faults(struct cost *c, char *mem, bool write,
			   const char *phase, struct fields *checks)
{
	struct fields extra = { 0 };
	struct measure m;

	measure_begin(c, &m);
	touch_pages(mem, c->size, write);
	measure_end(c, &m);
	munmap(mem, c->size);
	fault_fields(c, &m, &extra, checks, c->size / PAGE_SIZE_4K * 9 / 10);
	report(c, phase, &m, &extra, checks);
}

static void measure_anon(struct cost *c)
{
	struct fields checks = { 0 };
	char *mem;

	mem = mmap(NULL, c->size, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		die(1, "mmap of %zu bytes: %s", c->size, strerror(errno));
	/* 4K faults, one a page, on any THP setting */
	madvise(mem, c->size, MADV_NOHUGEPAGE);
	measure_faults(c, mem, true, "anon", &checks);
}

static void measure_file_read(struct cost *c, const char *path)
{
	long long resident = evict_file(path);
	struct fields checks = { 0 };
	char *mem;

	if (resident > (long long)(c->size / PAGE_SIZE_4K / 10))
		die(1, "%lld pages of %s stayed in the page cache after POSIX_FADV_DONTNEED; --disk-dir must be a disk filesystem",
		    resident, path);
	mem = map_file(path, PROT_READ, MAP_SHARED, NULL);
	/* no readahead, no fault-around: each fault reads its own page */
	if (madvise(mem, c->size, MADV_RANDOM))
		die(1, "madvise(MADV_RANDOM): %s", strerror(errno));
	field_int(&checks, "resident_pages_before", resident);
	measure_faults(c, mem, false, "file-read", &checks);
}

static void measure_cow(struct cost *c, const char *path)
{
	static char buf[64 * KiB];
	struct fields checks = { 0 };
	int fd = open(path, O_RDONLY);

	/* the page cache first: the faults copy, they do not read the disk */
	for (size_t off = 0; off < c->size; off += sizeof(buf))
		if (fd < 0 || pread(fd, buf, sizeof(buf), off) <= 0)
			die(1, "cannot read %s: %s", path, strerror(errno));
	close(fd);
	measure_faults(c, map_file(path, PROT_READ | PROT_WRITE, MAP_PRIVATE,
				   NULL), true, "cow", &checks);
}

/* --- cpu: the control --- */

/*
 * Arithmetic in registers: no system call, no fault, no memory, so LUF
 * cannot change what it costs.  Its rate beside the load, on and off, shows
 * how far the measurement itself moves them: CPU time under TCG's
 * round-robin -icount also runs while the other vCPU executes.
 */
static void measure_cpu(struct cost *c, const char *phase)
{
	struct fields extra = { 0 }, checks = { 0 };
	uint64_t x = c->rep;
	struct measure m;

	measure_begin(c, &m);
	for (long i = 0; i < c->cpu_ops; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		/* keeps the compiler from folding the loop away */
		__asm__ volatile("" : "+r" (x));
	}
	measure_end(c, &m);
	m.ops = c->cpu_ops;
	field_int(&extra, "cpu_ops", c->cpu_ops);
	field_real(&extra, "cpu_ops_per_cpu_s", per_cpu_s(&m, c->cpu_ops));
	report(c, phase, &m, &extra, &checks);
}

/* --- alloc-latency --- */

static long long ns_of(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/*
 * One operation's times: wall (CLOCK_MONOTONIC) and this thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID) across the same mmap+touch+munmap.
 */
struct op_time {
	long long wall;
	long long cpu;
};

static int by_wall(const void *a, const void *b)
{
	return by_value(&((const struct op_time *)a)->wall,
			&((const struct op_time *)b)->wall);
}

/*
 * Each operation is timed twice: wall time, and the thread's CPU time as
 * the guest's scheduler accounts it.  Their difference is time the task
 * was off its CPU (asleep, or runnable behind another task).  A slow
 * operation whose CPU time is as long as its wall time never left the CPU
 * as far as the guest can tell; under -icount that is what QEMU's vCPU
 * turns look like from inside (the guest clock runs on the other vCPUs'
 * instructions while this one waits for its turn, docs/insn-profile.md).
 * A slow operation whose wall time is mostly off-CPU time waited for
 * something in the guest.
 *
 * @ops: c->ops entries, filled here; @tmp: as many, for the sorts.
 */
static void measure_alloc(struct cost *c, struct op_time *ops, long long *tmp)
{
	struct fields extra = { 0 }, checks = { 0 };
	long long sum = 0, slow_wall = 0, slow_off = 0, stretched = 0, p99;
	long nslow = 0, nstretched = 0;
	struct measure m;

	measure_begin(c, &m);
	for (long i = 0; i < c->ops; i++) {
		/*
		 * The wall interval encloses the CPU one, so wall - CPU
		 * is the time off the CPU plus two clock reads.  The two
		 * CLOCK_THREAD_CPUTIME_ID reads are system calls (no vDSO):
		 * under --icount they moved the median from 128,374 ns to
		 * 129,677 ns.
		 */
		long long t0 = ns_of(CLOCK_MONOTONIC);
		long long c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
		char *mem;

		op_begin();
		mem = mmap(NULL, c->size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			die(1, "mmap of %zu bytes: %s", c->size,
			    strerror(errno));
		touch_pages(mem, c->size, true);
		munmap(mem, c->size);
		op_end();
		ops[i].cpu = ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
		ops[i].wall = ns_of(CLOCK_MONOTONIC) - t0;
	}
	measure_end(c, &m);
	m.ops = c->ops;

	/* the slowest 1 % by wall time: how much of it was off the CPU? */
	qsort(ops, c->ops, sizeof(*ops), by_wall);
	p99 = ops[c->ops * 99 / 100].wall;
	for (long i = 0; i < c->ops; i++) {
		sum += ops[i].wall;
		if (ops[i].wall < p99)
			continue;
		nslow++;
		slow_wall += ops[i].wall;
		slow_off += ops[i].wall - ops[i].cpu;
	}
	field_int(&checks, "faults", measured_faults(&m));
	field_int(&extra, "alloc_ops", c->ops);
	field_int(&extra, "alloc_bytes", c->size);
	field_real(&extra, "alloc_ops_per_s", c->ops / phase_elapsed(&m.p));
	field_real(&extra, "alloc_ops_per_cpu_s", per_cpu_s(&m, c->ops));
	field_int(&extra, "alloc_lat_p50_ns", ops[c->ops / 2].wall);
	field_int(&extra, "alloc_lat_p90_ns", ops[c->ops * 9 / 10].wall);
	field_int(&extra, "alloc_lat_p99_ns", p99);
	field_int(&extra, "alloc_lat_max_ns", ops[c->ops - 1].wall);
	field_int(&extra, "alloc_lat_mean_ns", sum / c->ops);
	field_int(&extra, "alloc_cpu_mean_ns",
		  (m.cpu1 - m.cpu0) * 1e9 / c->ops);
	field_int(&extra, "alloc_slow_lat_mean_ns", slow_wall / nslow);
	field_int(&extra, "alloc_slow_offcpu_mean_ns", slow_off / nslow);

	/* each distribution on its own: per-op CPU time, then off-CPU time */
	for (long i = 0; i < c->ops; i++)
		tmp[i] = ops[i].cpu;
	qsort(tmp, c->ops, sizeof(*tmp), by_value);
	/*
	 * The same work costs about the same CPU time every time, so an
	 * operation whose CPU time is over twice the median was stretched:
	 * how many were, and by how much on average, tells many short
	 * stretches from a few long ones.
	 */
	for (long i = 0; i < c->ops; i++) {
		if (tmp[i] <= 2 * tmp[c->ops / 2])
			continue;
		nstretched++;
		stretched += tmp[i];
	}
	field_int(&extra, "alloc_cpu_stretched_ops", nstretched);
	field_int(&extra, "alloc_cpu_stretched_mean_ns",
		  nstretched ? stretched / nstretched : 0);
	field_int(&extra, "alloc_lat_cpu_p50_ns", tmp[c->ops / 2]);
	field_int(&extra, "alloc_lat_cpu_p99_ns", tmp[c->ops * 99 / 100]);
	field_int(&extra, "alloc_lat_cpu_max_ns", tmp[c->ops - 1]);
	for (long i = 0; i < c->ops; i++)
		tmp[i] = ops[i].wall - ops[i].cpu;
	qsort(tmp, c->ops, sizeof(*tmp), by_value);
	field_int(&extra, "alloc_offcpu_p50_ns", tmp[c->ops / 2]);
	field_int(&extra, "alloc_offcpu_p99_ns", tmp[c->ops * 99 / 100]);
	field_int(&extra, "alloc_offcpu_max_ns", tmp[c->ops - 1]);
	report(c, NULL, &m, &extra, &checks);
}

/* --- set-up --- */

static const char *tmpfs_dir(const char *given)
{
	if (given) {
		if (!writable_dir(given) || fs_type(given) != TMPFS_MAGIC)
			die(1, "--tmpfs-dir %s is not a writable tmpfs directory",
			    given);
		return given;
	}
	if (writable_dir("/dev/shm") && fs_type("/dev/shm") == TMPFS_MAGIC)
		return "/dev/shm";
	if (writable_dir("/tmp") && fs_type("/tmp") == TMPFS_MAGIC)
		return "/tmp";
	die(1, "neither /dev/shm nor /tmp is a writable tmpfs: give --tmpfs-dir");
}

static const char *disk_dir(const char *given, const char *first_file)
{
	static char parent[PATH_MAX];
	const char *dir = given;

	if (!dir && writable_dir("/scratch"))
		dir = "/scratch";
	if (!dir) {
		snprintf(parent, sizeof(parent), "%s", first_file);
		dir = strrchr(parent, '/') ? dirname(parent) : ".";
		if (!writable_dir(dir))
			die(1, "no writable disk filesystem: %s is read-only and there is no /scratch (the lab makes it with unflush.scratch=SIZE); give --disk-dir",
			    dir);
	}
	if (!writable_dir(dir))
		die(1, "--disk-dir %s is not a writable directory", dir);
	if (fs_type(dir) == TMPFS_MAGIC)
		die(1, "--disk-dir %s is on tmpfs: give a directory on a disk filesystem",
		    dir);
	return dir;
}

static int split_files(char *list, char **files)
{
	struct stat st;
	int n = 0;

	for (char *f = strtok(list, ","); f; f = strtok(NULL, ",")) {
		if (n == ROLOAD_MAX_PROCS)
			usage_error("at most %d files", ROLOAD_MAX_PROCS);
		if (stat(f, &st) || !S_ISREG(st.st_mode) ||
		    st.st_size < (off_t)PAGE_SIZE_4K)
			usage_error("--files: '%s' is not a readable file of 4K or more",
				    f);
		files[n++] = f;
	}
	return n;
}

/* "write", "fault" or "alloc-latency" first, the options after it. */
static enum mode take_mode(int *argc, char ***argv)
{
	const char *word = *argc > 1 ? (*argv)[1] : NULL;

	if (!word || word[0] == '-')
		return NR_MODES;
	for (int m = 0; m < NR_MODES; m++) {
		if (strcmp(word, mode_names[m]))
			continue;
		(*argv)[1] = (*argv)[0];
		--*argc;
		++*argv;
		return m;
	}
	usage_error("unknown measurement '%s': write, fault or alloc-latency",
		    word);
}

int main(int argc, char **argv)
{
	struct own_arg args[] = {
		{ .name = "files" }, { .name = "load-rate" }, { .name = "threads" },
		{ .name = "memcg-limit" }, { .name = "ops" }, { .name = "size" },
		{ .name = "tmpfs-dir" }, { .name = "disk-dir" },
	};
	static const long full_ops[] = { 500000, 0, 30000 };
	static const long quick_ops[] = { 100000, 0, 5000 };
	static const size_t full_size[] = { 4 * MiB, 256 * MiB, 64 * KiB };
	static const size_t quick_size[] = { 4 * MiB, 64 * MiB, 64 * KiB };
	struct cost c = { 0 };
	const char *tmpfs = NULL, *disk = NULL;
	char *files[ROLOAD_MAX_PROCS], fault_path[PATH_MAX];
	struct op_time *ops = NULL;
	long long *tmp = NULL;
	long threads;
	int nfiles = 0, cpus[MAX_CPUS], ncpus;

	c.mode = take_mode(&argc, &argv);
	run_opts_init(&c.o, usage, true);
	parse_run_args(argc, argv, &c.o, args, 8);
	if (c.mode == NR_MODES)
		usage_error("say what to measure: write, fault or alloc-latency");
	if (args[0].value)
		nfiles = split_files(args[0].value, files);
	if (!nfiles)
		usage_error("--files is required, e.g. --files /data/model0,/data/model1");
	c.load_rate = arg_count(&args[1], 0, 0);
	threads = arg_count(&args[2], 1, 0);
	c.limit = arg_size(&args[3], 64 * MiB);
	if (c.mode == FAULT && args[4].value)
		usage_error("--ops does not apply to fault: --size sets how much is faulted");
	c.ops = arg_count(&args[4], 1,
			  (c.o.quick ? quick_ops : full_ops)[c.mode]);
	/*
	 * --quick: 100 million, a tenth of a second or more under TCG.  At 20
	 * million (a few hundredths) a paced load could read too few pages in
	 * the phase to reclaim any, and the phase failed its check.
	 */
	c.cpu_ops = c.o.quick ? 100000000 : 200000000;
	c.size = arg_size(&args[5], (c.o.quick ? quick_size : full_size)[c.mode]);
	if (c.size % PAGE_SIZE_4K)
		usage_error("--size must be a multiple of 4K");
	ncpus = online_cpus(cpus, MAX_CPUS);
	if (!threads)
		threads = c.o.threads ? ncpus : 1;
	if (threads > MAX_CPUS)
		usage_error("at most %d --threads", MAX_CPUS);
	snprintf(c.experiment, sizeof(c.experiment), "luf-cost/%s",
		 mode_names[c.mode]);
	if (c.mode == WRITE)
		tmpfs = tmpfs_dir(args[6].value);
	if (c.mode != ALLOC_LATENCY)
		disk = disk_dir(args[7].value, files[0]);

	pin_main(cpus[0]);
	if (c.mode == FAULT) {
		int fd = make_file(2, disk, "fault");

		snprintf(fault_path, sizeof(fault_path), "%s", made[2]);
		fill_file(fd, fault_path, c.size);
		if (fsync(fd))
			die(1, "fsync %s: %s", fault_path, strerror(errno));
		close(fd);
	}
	if (c.mode == ALLOC_LATENCY) {
		ops = malloc(c.ops * sizeof(*ops));
		tmp = malloc(c.ops * sizeof(*tmp));
		if (!ops || !tmp)
			die(1, "no memory for %ld latencies", c.ops);
		/* faulted in now, not during the measurement */
		memset(ops, 0, c.ops * sizeof(*ops));
		memset(tmp, 0, c.ops * sizeof(*tmp));
	}
	tiering_enable();
	c.load = roload_start(files, nfiles, threads, c.limit, c.load_rate,
			      WARMUP_S);
	for (c.rep = 0; c.rep < c.o.reps; c.rep++) {
		switch (c.mode) {
		case WRITE:
			measure_write(&c, 0, tmpfs, "tmpfs");
			measure_write(&c, 1, disk, "disk");
			measure_cpu(&c, "cpu");
			break;
		case FAULT:
			measure_anon(&c);
			measure_file_read(&c, fault_path);
			measure_cow(&c, fault_path);
			measure_cpu(&c, "cpu");
			break;
		default:
			measure_alloc(&c, ops, tmp);
		}
	}
	roload_stop(c.load);
	free(ops);
	free(tmp);
	return 0;
}
