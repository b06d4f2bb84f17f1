// SPDX-License-Identifier: GPL-2.0
/*
 * ptrace-poke: a debugger at work on a program short of memory.
 *
 * A target process maps a file of its own PROT_READ and MAP_PRIVATE (as a
 * loader maps text and read-only data) and reads pages of it at random in
 * several threads, inside a memory cgroup smaller than the file, so that
 * reclaim keeps taking the mapped pages away.  Its parent, the debugger,
 * stops it now and then (PTRACE_INTERRUPT), changes a word of a page it has
 * not changed before (PTRACE_POKEDATA, as gdb plants a breakpoint or sets a
 * variable), reads it back (PTRACE_PEEKDATA) and lets it go on.  Every
 * half second the target drops the pages it got that way (MADV_DONTNEED),
 * as a program that maps its data again would, so that its memory stays
 * bounded.
 *
 * Nothing here knows about lazy TLB flushes.  The program checks only what
 * a debugger would: the word reads back as poked.  It is a workload for the
 * debug kernel's LUF checker (CONFIG_DEBUG_LUF), which must notice a poke
 * into a page whose lazy unmap was not flushed first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: ptrace-poke [--seconds N] [--mib N] [--limit-mib N] [--threads N]\n"
"                   [--dir DIR]\n"
"\n"
"A debugger pokes words into a program that reads its file mapping\n"
"(PROT_READ, MAP_PRIVATE) in N threads inside a memory cgroup smaller than\n"
"the file, so that reclaim keeps taking the mapped pages away.\n"
"\n"
"  --seconds N    how long the debugger pokes (default 60)\n"
"  --mib N        the file's size (default 32)\n"
"  --limit-mib N  the target's memory cgroup, memory.max (default 16)\n"
"  --threads N    reading threads of the target (default 2)\n"
"  --dir DIR      where to make the file, on a disk filesystem (default\n"
"                 /scratch, the lab's ext2 with unflush.scratch=SIZE);\n"
"                 removed at exit\n"
"\n"
"Prints 'ptrace-poke: P pokes into P pages of N in S s'.  Needs root\n"
"(cgroup v2's memory controller).\n"
"KTAP (lib/ktap.h): one test, ptrace-poke, after that line.\n"
"Exit 0: every poked word read back; 1: one did not, or a set-up error (no\n"
"pokes line; the test's KTAP line says which); 2: usage.\n";

static char path[256];
static long npages;
static volatile uint64_t sink;

static void remove_file(void)
{
	unlink(path);
}

/* Page p holds p in every word: any page can be told from the others. */
static void make_file(const char *dir)
{
	static uint64_t page[PAGE_SIZE_4K / 8];
	int fd;

	snprintf(path, sizeof(path), "%s/ptrace-poke-%d", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(1, "cannot make %s: %s (give --dir on a writable disk filesystem)",
		    path, strerror(errno));
	cleanup_push_fn(remove_file);
	for (long p = 0; p < npages; p++) {
		for (size_t w = 0; w < PAGE_SIZE_4K / 8; w++)
			page[w] = p;
		if (write(fd, page, PAGE_SIZE_4K) != PAGE_SIZE_4K)
			die(1, "cannot write %s: %s", path, strerror(errno));
	}
	/* clean, and not cached: the target's faults read it in its cgroup */
	if (fsync(fd))
		die(1, "fsync %s: %s", path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

static uint64_t next_random(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static const char *map;

static void *reader(void *arg)
{
	uint64_t s = 0x9E3779B97F4A7C15ULL ^ (uintptr_t)arg;

	for (;;) {
		const uint64_t *q = (const uint64_t *)
			(map + (next_random(&s) % npages) * PAGE_SIZE_4K);

		sink += q[0] + q[PAGE_SIZE_4K / 16];
	}
	return NULL;
}

/* The target: map, say where, read until killed. */
static void target(int ready, int nthreads)
{
	size_t len = npages * PAGE_SIZE_4K;
	int fd = open(path, O_RDONLY);
	pthread_t t;

	memcg_join();
	if (fd < 0)
		die(1, "cannot open %s: %s", path, strerror(errno));
	map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		die(1, "mmap of %s: %s", path, strerror(errno));
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (long i = 0; i < nthreads; i++)
		if (pthread_create(&t, NULL, reader, (void *)i))
			die(1, "cannot start a reading thread");
	if (write(ready, &map, sizeof(map)) != sizeof(map))
		die(1, "cannot tell the debugger where the mapping is");
	for (;;) {
		struct timespec half = { 0, 500 * 1000 * 1000 };

		nanosleep(&half, NULL);
		/* the poked copies go; the file's pages fault in again */
		madvise((void *)map, len, MADV_DONTNEED);
	}
}

static void wait_stop(pid_t pid)
{
	int status;

	if (waitpid(pid, &status, __WALL) != pid || !WIFSTOPPED(status))
		die(1, "the target did not stop for the debugger (status 0x%x)",
		    status);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "mib", required_argument, NULL, 'm' },
		{ "limit-mib", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	long seconds = 60, mib = 32, limit = 16, nthreads = 2, pokes = 0;
	const char *dir = "/scratch";
	uint64_t s = 0x2545F4914F6CDD1DULL;
	unsigned char *poked;
	int pipefd[2], opt;
	uintptr_t va;
	double end;
	pid_t pid;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 's': seconds = parse_count("--seconds", optarg, 1); break;
		case 'm': mib = parse_count("--mib", optarg, 1); break;
		case 'l': limit = parse_count("--limit-mib", optarg, 4); break;
		case 't': nthreads = parse_count("--threads", optarg, 1); break;
		case 'd': dir = optarg; break;
		case 'h': fputs(usage, stdout); return 0;
		default: bad_option(argv);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (limit >= mib)
		usage_error("--limit-mib %ld must be below --mib %ld, or reclaim never takes the mapped pages",
			    limit, mib);
	npages = mib * MiB / PAGE_SIZE_4K;
	ktap_plan(1);
	ktap_test("ptrace-poke");
	poked = calloc(npages, 1);
	if (!poked)
		die(1, "out of memory");

	make_file(dir);
	memcg_create("ptrace-poke", limit * MiB);
	if (pipe(pipefd))
		die(1, "pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(pipefd[0]);
		target(pipefd[1], nthreads);
	}
	close(pipefd[1]);
	if (read(pipefd[0], &va, sizeof(va)) != sizeof(va))
		die(1, "the target did not start");
	if (ptrace(PTRACE_SEIZE, pid, NULL, NULL))
		die(1, "PTRACE_SEIZE of the target: %s", strerror(errno));

	end = now_s() + seconds;
	while (now_s() < end && pokes < npages) {
		struct timespec gap = { 0, 2 * 1000 * 1000 };
		long p = next_random(&s) % npages;
		uintptr_t at;
		long word, back;

		if (poked[p])
			continue;
		poked[p] = 1;
		at = va + p * PAGE_SIZE_4K + 8 * (next_random(&s) % 512);
		word = (long)(0xB0B0000000000000ULL | (uint64_t)pokes);
		if (ptrace(PTRACE_INTERRUPT, pid, NULL, NULL))
			die(1, "PTRACE_INTERRUPT: %s", strerror(errno));
		wait_stop(pid);
		if (ptrace(PTRACE_POKEDATA, pid, (void *)at, (void *)word))
			die(1, "PTRACE_POKEDATA at 0x%lx: %s",
			    (unsigned long)at, strerror(errno));
		errno = 0;
		back = ptrace(PTRACE_PEEKDATA, pid, (void *)at, NULL);
		if (errno)
			die(1, "PTRACE_PEEKDATA at 0x%lx: %s",
			    (unsigned long)at, strerror(errno));
		if (back != word)
			die(1, "the word poked at 0x%lx reads back 0x%lx, not 0x%lx",
			    (unsigned long)at, back, word);
		if (ptrace(PTRACE_CONT, pid, NULL, NULL))
			die(1, "PTRACE_CONT: %s", strerror(errno));
		pokes++;
		nanosleep(&gap, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, __WALL);
	printf("ptrace-poke: %ld pokes into %ld pages of %ld in %ld s\n",
	       pokes, pokes, npages, seconds);
	/* a word that did not read back died, its KTAP line saying where */
	ktap_result(true);
	return ktap_status();
}
