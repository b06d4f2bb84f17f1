// SPDX-License-Identifier: GPL-2.0
/*
 * A read-only streaming load that keeps reclaim, and so LUF, busy without
 * end: reader processes in a memory cgroup too small for their files.
 * Every page they read was dropped by reclaim (or demoted) since their last
 * pass, so every pass unmaps clean, read-only page cache again: the folios
 * LUF leaves unflushed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
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

#define COUNT_EVERY	16	/* pages between updates of the shared count */

long long evict_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	long long resident = 0;
	unsigned char *vec;
	struct stat st;
	size_t pages;
	void *map;

	if (fd < 0 || fstat(fd, &st))
		die(1, "cannot open %s: %s", path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	pages = (st.st_size + PAGE_SIZE_4K - 1) / PAGE_SIZE_4K;
	map = st.st_size ? mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0)
			 : MAP_FAILED;
	vec = malloc(pages + 1);
	if (map != MAP_FAILED && vec && !mincore(map, st.st_size, vec))
		for (size_t p = 0; p < pages; p++)
			resident += vec[p] & 1;
	free(vec);
	if (map != MAP_FAILED)
		munmap(map, st.st_size);
	close(fd);
	return resident;
}

void *map_file(const char *path, int prot, int flags, size_t *len)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	void *map;

	if (fd < 0 || fstat(fd, &st))
		die(1, "cannot open %s: %s", path, strerror(errno));
	map = mmap(NULL, st.st_size, prot, flags, fd, 0);
	if (map == MAP_FAILED)
		die(1, "cannot map %s: %s", path, strerror(errno));
	close(fd);
	if (len)
		*len = st.st_size;
	return map;
}

/* --- in a reader process --- */

struct slice {
	struct roload *load;
	const volatile char *first;	/* this thread's pages */
	size_t pages;
	int cpu;
};

/*
 * With a rate limit, sleep until @done pages are due since @t0.  A cap,
 * not a quota: a reader more than MAX_LAG_S behind (its first pass read
 * from disk, its CPU was busy) moves @t0 on instead of reading flat out to
 * catch up, which would put that burst into whatever phase is measured
 * (luf-cost's shortest phases last under half a second).
 */
#define MAX_LAG_S	0.02

static void keep_rate(double rate, double *t0, long long done)
{
	double behind;

	if (rate <= 0)
		return;
	behind = now_s() - *t0 - done / rate;
	if (behind > MAX_LAG_S)
		*t0 += behind - MAX_LAG_S;
	else if (behind < 0)
		usleep(-behind * 1e6);
}

static void *read_slice(void *arg)
{
	struct slice *s = arg;
	unsigned int sum = 0;
	long long done = 0;
	double t0;

	pin_to_cpu(s->cpu);
	t0 = now_s();
	while (!atomic_load_explicit(&s->load->stop, memory_order_relaxed)) {
		for (size_t pg = 0; pg < s->pages; pg += COUNT_EVERY) {
			size_t end = pg + COUNT_EVERY < s->pages ?
				     pg + COUNT_EVERY : s->pages;

			for (size_t i = pg; i < end; i++)
				sum += s->first[i * PAGE_SIZE_4K];
			atomic_fetch_add_explicit(&s->load->pages, end - pg,
						  memory_order_relaxed);
			done += end - pg;
			keep_rate(s->load->thread_rate, &t0, done);
			if (atomic_load_explicit(&s->load->stop,
						 memory_order_relaxed))
				break;
		}
	}
	return (void *)(uintptr_t)sum;
}

static void __attribute__((noreturn))
reader_main(struct roload *l, const char *file)
{
	int cpus[MAX_CPUS], ncpus = online_cpus(cpus, MAX_CPUS);
	struct slice s[MAX_CPUS];
	pthread_t tid[MAX_CPUS];
	size_t pages, len;
	char *map;

	memcg_join();
	map = map_file(file, PROT_READ, MAP_SHARED, &len);
	pages = len / PAGE_SIZE_4K;
	for (int t = 0; t < l->threads; t++) {
		size_t from = pages * t / l->threads;

		s[t] = (struct slice){ .load = l,
			.cpu = cpus[(t + 1) % ncpus],
			.first = map + from * PAGE_SIZE_4K,
			.pages = pages * (t + 1) / l->threads - from };
		if (pthread_create(&tid[t], NULL, read_slice, &s[t]))
			die(1, "cannot start reader thread %d", t);
	}
	atomic_fetch_add(&l->streaming, 1);
	for (int t = 0; t < l->threads; t++)
		pthread_join(tid[t], NULL);
	_exit(0);
}

/* --- in the main process --- */

static struct roload *running;

/* On error or a signal: before the cgroup is removed, no waiting for them. */
static void kill_readers(void)
{
	if (!running)
		return;
	for (int i = 0; i < running->nprocs; i++)
		kill(running->pids[i], SIGKILL);
	for (int i = 0; i < running->nprocs; i++)
		waitpid(running->pids[i], NULL, 0);
	running = NULL;
}

/* Exit 1 if a reader has already exited: it failed. */
static void check_readers(struct roload *l)
{
	int status;

	for (int i = 0; i < l->nprocs; i++)
		if (waitpid(l->pids[i], &status, WNOHANG) == l->pids[i]) {
			l->pids[i] = l->pids[--l->nprocs];
			die(1, "a load process failed (exit status %d, signal %d)",
			    WIFEXITED(status) ? WEXITSTATUS(status) : -1,
			    WIFSIGNALED(status) ? WTERMSIG(status) : 0);
		}
}

static long long pgsteal_now(void)
{
	return vmstat_value("pgsteal_anon") + vmstat_value("pgsteal_file");
}

struct roload *roload_start(char **files, int nfiles, int threads,
			    size_t limit, double rate, double warmup_s)
{
	struct roload *l;
	long long steal0;
	double t0;

	if (nfiles < 1 || nfiles > ROLOAD_MAX_PROCS || threads < 1 ||
	    threads > MAX_CPUS)
		die(1, "internal: %d load processes of %d threads", nfiles,
		    threads);
	l = mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (l == MAP_FAILED)
		die(1, "mmap: %s", strerror(errno));
	l->threads = threads;
	l->thread_rate = rate / nfiles / threads;
	memcg_create("unflush-load", limit);
	/* pushed after the cgroup's removal, so it runs before it */
	cleanup_push_fn(kill_readers);
	for (int i = 0; i < nfiles; i++)
		evict_file(files[i]);
	running = l;
	steal0 = pgsteal_now();
	fflush(NULL);
	for (int i = 0; i < nfiles; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die(1, "fork: %s", strerror(errno));
		if (pid == 0)
			reader_main(l, files[i]);
		l->pids[l->nprocs++] = pid;
	}
	t0 = now_s();
	while (atomic_load(&l->streaming) < nfiles || pgsteal_now() == steal0) {
		check_readers(l);
		if (now_s() - t0 > warmup_s)
			die(1, "the load started no reclaim within %.0f s (%lld pages read): its memory cgroup's limit is too large for the files",
			    warmup_s, roload_pages(l));
		usleep(10000);
	}
	return l;
}

long long roload_pages(const struct roload *l)
{
	return atomic_load(&l->pages);
}

void roload_stop(struct roload *l)
{
	int status, failed = 0;

	check_readers(l);
	atomic_store(&l->stop, 1);
	for (int i = 0; i < l->nprocs; i++)
		if (waitpid(l->pids[i], &status, 0) < 0 || status)
			failed++;
	l->nprocs = 0;
	running = NULL;
	if (failed)
		die(1, "%d load processes failed at exit", failed);
}
