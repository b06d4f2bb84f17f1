// SPDX-License-Identifier: GPL-2.0
/*
 * ro-reclaim-tiering: several multi-threaded processes stream through
 * read-only file mappings inside a memory cgroup too small for them (seed
 * 001, LUF).
 *
 * The seed ran three llama.cpp instances over 70 GB of model files: the
 * pages are only ever read, yet reclaim and demotion unmap them again and
 * again, each unmap a shootdown to every CPU the process runs on.  LUF skips
 * those flushes while every mapping is read-only and does them, at most once
 * per batch, before the page is handed out again.  This is the same
 * workload scaled to a VM: the cgroup's limit supplies the memory pressure,
 * and a CPU-less node, if there is one, the demotion target.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "roload.h"

#define CHUNK_PAGES	16	/* threads take turns by 64 KiB chunks */
#define MAX_PROCS	64
#define MAX_FILES	64

static const char usage[] =
"usage: ro-reclaim-tiering --files F1,F2,... [--procs N] [--threads T]\n"
"                          [--passes P] [--memcg-limit M] [--reps N]\n"
"                          [--quick] [--shape threads|single]\n"
"\n"
"Fork N reader processes (file i%%files to process i), each mapping its file\n"
"MAP_SHARED PROT_READ and streaming through it with T threads pinned to\n"
"different CPUs, one byte per 4K page, P passes; the threads of a process\n"
"take turns by 64 KiB chunks, so together they read each page once a pass.\n"
"All readers run in a cgroup v2 memory cgroup with memory.max = M.  The\n"
"measured phase is the streaming of all processes.\n"
"\n"
"  --files      comma-separated files, e.g. on the lab's read-only data disk\n"
"  --procs N    reader processes (default: one per file)\n"
"  --threads T  threads per process (default: every usable CPU; 1 with\n"
"               --shape single)\n"
"  --passes P   passes over each file (default 3, --quick 1)\n"
"  --memcg-limit M  memory.max of the cgroup (default 200M)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --quick      one pass, for CI smoke runs\n"
"\n"
"Before each repetition the files' clean page cache is dropped\n"
"(POSIX_FADV_DONTNEED) so it is read, and charged, inside the cgroup; tmpfs\n"
"files cannot be dropped: create them from inside a cgroup instead.  If a\n"
"CPU-less node with memory exists, sets /sys/kernel/mm/numa/demotion_enabled\n"
"to 1 and kernel.numa_balancing to 2 (tiering); everything is restored and\n"
"the cgroup removed at exit.  Verifies that reclaim happened (pgsteal > 0).\n"
"Experiment id: ro-reclaim-tiering.  Fields: procs, threads, passes,\n"
"pages_touched, pages_per_s.  checks: pgsteal, pgdemote, pgpromote_success,\n"
"resident_pages_before, demotion.\n";

static pid_t children[MAX_PROCS];
static int nchildren;

/* --- the reader processes, from the parent's side --- */

/* The normal end: the children exit once @quit_fd is closed. */
static void reap_children(int quit_fd)
{
	int status, failed = 0;

	close(quit_fd);
	for (int i = 0; i < nchildren; i++)
		if (waitpid(children[i], &status, 0) < 0 || status)
			failed++;
	nchildren = 0;
	if (failed)
		die(1, "%d reader processes failed at exit", failed);
}

/* On error or a signal: no waiting for anyone. */
static void kill_children(void)
{
	for (int i = 0; i < nchildren; i++)
		kill(children[i], SIGKILL);
	for (int i = 0; i < nchildren; i++)
		waitpid(children[i], NULL, 0);
	nchildren = 0;
}

/* --- the readers --- */

struct reader {
	const volatile char *map;
	size_t pages;
	int threads, index, cpu, passes;
	long long touched;
	pthread_barrier_t *start;
};

static void *stream(void *arg)
{
	struct reader *r = arg;
	size_t chunks = (r->pages + CHUNK_PAGES - 1) / CHUNK_PAGES;
	unsigned int sum = 0;

	pin_to_cpu(r->cpu);
	pthread_barrier_wait(r->start);
	for (int pass = 0; pass < r->passes; pass++) {
		for (size_t c = r->index; c < chunks; c += r->threads) {
			size_t end = (c + 1) * CHUNK_PAGES;

			for (size_t pg = c * CHUNK_PAGES; pg < end && pg < r->pages; pg++) {
				sum += r->map[pg * PAGE_SIZE_4K];
				r->touched++;
			}
		}
	}
	return (void *)(uintptr_t)sum;
}

static void write_byte(int fd)
{
	if (write(fd, "x", 1) != 1)
		_exit(1);
}

static void wait_eof(int fd)
{
	char c;

	while (read(fd, &c, 1) > 0)
		;
}

/*
 * One reader process: join the cgroup, map the file, start the threads, say
 * ready, wait for the go (EOF on @go), stream, say done, then wait for EOF on
 * @quit: the parent takes its snapshot first, so the teardown of the
 * mappings at exit is not measured.
 */
static void reader_process(const char *file, int threads, int passes,
			   int ready, int go, int quit, long long *touched)
{
	int cpus[MAX_CPUS], ncpus = online_cpus(cpus, MAX_CPUS);
	struct reader r[MAX_CPUS];
	pthread_t tid[MAX_CPUS];
	pthread_barrier_t start;
	size_t len;
	void *map;

	memcg_join();
	map = map_file(file, PROT_READ, MAP_SHARED, &len);
	pthread_barrier_init(&start, NULL, threads + 1);
	for (int t = 0; t < threads; t++) {
		r[t] = (struct reader){ .map = map, .threads = threads,
			.pages = len / PAGE_SIZE_4K, .index = t,
			.cpu = cpus[t % ncpus], .passes = passes,
			.start = &start };
		if (pthread_create(&tid[t], NULL, stream, &r[t]))
			die(1, "cannot start reader thread %d", t);
	}
	write_byte(ready);
	wait_eof(go);
	pthread_barrier_wait(&start);
	for (int t = 0; t < threads; t++) {
		pthread_join(tid[t], NULL);
		*touched += r[t].touched;
	}
	write_byte(ready);
	wait_eof(quit);
	_exit(0);
}

static void wait_bytes(int fd, int n, const char *what)
{
	char c;

	for (int i = 0; i < n; i++)
		if (read(fd, &c, 1) != 1)
			die(1, "a reader process failed before it was %s", what);
}

#define SAMPLE_MS	500

/*
 * wait_bytes() for the end of the measured phase, sampling the shootdown
 * count every SAMPLE_MS meanwhile: the report plots shootdowns over time.
 * @series gets a JSON array of [seconds, TLB shootdowns so far] pairs.
 */
static void wait_done_sampling(int fd, int n, double t0, struct jbuf *series)
{
	long long base = irq_total("TLB");
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	jb_printf(series, "[[0,0]");
	while (n > 0) {
		int ready = poll(&pfd, 1, SAMPLE_MS);

		if (ready < 0 && errno != EINTR)
			die(1, "poll: %s", strerror(errno));
		if (ready > 0) {
			if (read(fd, &c, 1) != 1)
				die(1, "a reader process failed before it was done");
			n--;
			continue;
		}
		if (base >= 0)
			jb_printf(series, ",[%.3f,%lld]", now_s() - t0,
				  irq_total("TLB") - base);
	}
	jb_printf(series, "]");
}

/* Drop the files' clean page cache; returns the pages still resident. */
static long long evict(char **files, int nfiles)
{
	long long resident = 0;

	for (int i = 0; i < nfiles; i++)
		resident += evict_file(files[i]);
	return resident;
}

int main(int argc, char **argv)
{
	struct own_arg args[] = {
		{ .name = "files" }, { .name = "procs" }, { .name = "threads" },
		{ .name = "passes" }, { .name = "memcg-limit" },
	};
	struct fields checks = { 0 }, extra = { 0 };
	struct jbuf series = { 0 };
	int cpus[MAX_CPUS], ncpus, nfiles = 0;
	long procs, threads, passes;
	size_t limit, total = 0;
	char *files[MAX_FILES];
	long long *touched;
	struct run_opts o;
	bool tiering;

	run_opts_init(&o, usage, true);
	parse_run_args(argc, argv, &o, args, 5);
	if (args[0].value)
		nfiles = split_file_list("--files", args[0].value, files, MAX_FILES, &total);
	procs = arg_count(&args[1], 1, 0);
	threads = arg_count(&args[2], 1, 0);
	passes = arg_count(&args[3], 1, 0);
	limit = arg_size(&args[4], 200 * MiB);
	if (!nfiles)
		usage_error("--files is required, e.g. --files /data/a,/data/b");
	ncpus = online_cpus(cpus, MAX_CPUS);
	if (!procs)
		procs = nfiles;
	if (!threads)
		threads = o.threads ? ncpus : 1;
	if (!passes)
		passes = o.quick ? 1 : 3;
	if (procs > MAX_PROCS || threads > MAX_CPUS)
		usage_error("at most %d --procs and %d --threads", MAX_PROCS,
			    MAX_CPUS);

	memcg_create("unflush-ro", limit);
	/* runs before the cgroup's removal: it must be empty by then */
	cleanup_push_fn(kill_children);
	tiering = tiering_enable();
	touched = mmap(NULL, procs * sizeof(*touched), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (touched == MAP_FAILED)
		die(1, "mmap: %s", strerror(errno));

	for (int rep = 0; rep < o.reps; rep++) {
		long long resident = evict(files, nfiles), pages = 0, pgsteal;
		int ready[2], go[2], quit[2];
		struct phase p = { 0 };

		fields_clear(&checks);
		fields_clear(&extra);
		memset(touched, 0, procs * sizeof(*touched));
		if (pipe(ready) || pipe(go) || pipe(quit))
			die(1, "pipe: %s", strerror(errno));
		fflush(NULL);
		for (int i = 0; i < procs; i++) {
			pid_t pid = fork();

			if (pid < 0)
				die(1, "fork: %s", strerror(errno));
			if (pid == 0) {
				close(ready[0]);
				close(go[1]);
				close(quit[1]);
				reader_process(files[i % nfiles], threads,
					       passes, ready[1], go[0], quit[0],
					       &touched[i]);
			}
			children[nchildren++] = pid;
		}
		close(ready[1]);
		close(go[0]);
		close(quit[0]);
		wait_bytes(ready[0], procs, "ready");
		phase_begin(&p);
		close(go[1]);	/* EOF: go */
		series.len = 0;
		wait_done_sampling(ready[0], procs, p.t0, &series);
		phase_end(&p);
		close(ready[0]);
		reap_children(quit[1]);
		for (int i = 0; i < procs; i++)
			pages += touched[i];

		pgsteal = phase_pgsteal(&p);
		field_int(&checks, "pgsteal", pgsteal);
		field_int(&checks, "pgdemote", phase_delta_prefix(&p, "pgdemote_"));
		field_int(&checks, "pgpromote_success",
			  phase_delta(&p, "pgpromote_success"));
		field_int(&checks, "resident_pages_before", resident);
		field_int(&checks, "demotion", tiering);
		if (pgsteal <= 0)
			die(1, "no reclaim: memory limit too large for the files (%zu MiB of files, --memcg-limit %zu MiB); lower the limit or add files",
			    total / MiB, limit / MiB);
		field_int(&extra, "procs", procs);
		field_int(&extra, "threads", threads);
		field_int(&extra, "passes", passes);
		field_int(&extra, "files_bytes", total);
		field_int(&extra, "memcg_limit_bytes", limit);
		field_int(&extra, "pages_touched", pages);
		field_int(&extra, "ops", pages);
		field_real(&extra, "pages_per_s", pages / phase_elapsed(&p));
		field_raw(&extra, "tlb_irq_series", series.s);
		report_result("ro-reclaim-tiering",
			      threads > 1 ? "threads" : "single", rep, &p,
			      &extra, &checks);
		phase_free(&p);
	}
	return 0;
}
