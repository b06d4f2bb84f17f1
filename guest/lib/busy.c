// SPDX-License-Identifier: GPL-2.0
/*
 * Helper threads that keep the process running on the other CPUs.
 *
 * x86 sends a shootdown IPI only to CPUs in the mm's cpumask.  A
 * single-threaded benchmark therefore never sends one, whatever the kernel
 * does: to see shootdowns, other threads of the same mm must be running
 * elsewhere while the measured work happens, as in any real multi-threaded
 * program.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "unflush.h"

#define OWN_PAGES 16

struct helper {
	pthread_t tid;
	int cpu;
	struct busy *busy;
};

struct busy {
	volatile char *region;
	size_t len;
	atomic_int running;
	atomic_bool stop;
	int n;
	struct helper h[];
};

/* Writes, so the CPU caches writable translations the kernel must drop. */
static void touch(volatile char *mem, size_t len, atomic_bool *stop)
{
	for (size_t off = 0; off < len; off += PAGE_SIZE_4K) {
		if (atomic_load_explicit(stop, memory_order_relaxed))
			return;
		mem[off]++;
	}
}

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	struct busy *b = h->busy;
	volatile char *mem = b->region;
	size_t len = b->len;

	pin_to_cpu(h->cpu);
	if (!mem) {
		len = OWN_PAGES * PAGE_SIZE_4K;
		mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED)
			die(1, "busy thread: mmap of %zu bytes failed", len);
		/* fault it in now, so the loop below never faults */
		touch(mem, len, &b->stop);
	}
	atomic_fetch_add(&b->running, 1);
	while (!atomic_load_explicit(&b->stop, memory_order_relaxed))
		touch(mem, len, &b->stop);
	if (!b->region)
		munmap((void *)mem, len);
	return NULL;
}

struct busy *busy_start(int skip_cpu, volatile char *region, size_t len)
{
	int cpus[MAX_CPUS], ncpus = online_cpus(cpus, MAX_CPUS);
	struct busy *b = calloc(1, sizeof(*b) + ncpus * sizeof(b->h[0]));

	if (!b)
		die(1, "out of memory");
	b->region = region;
	b->len = len;
	for (int i = 0; i < ncpus; i++) {
		struct helper *h = &b->h[b->n];

		if (cpus[i] == skip_cpu)
			continue;
		h->cpu = cpus[i];
		h->busy = b;
		if (pthread_create(&h->tid, NULL, helper_main, h))
			die(1, "cannot start a helper thread for CPU %d",
			    cpus[i]);
		b->n++;
	}
	while (atomic_load(&b->running) < b->n)
		usleep(100);
	return b;
}

void busy_stop(struct busy *b)
{
	if (!b)
		return;
	atomic_store(&b->stop, true);
	for (int i = 0; i < b->n; i++)
		pthread_join(b->h[i].tid, NULL);
	free(b);
}

struct busy *shape_start(const struct run_opts *o, int main_cpu,
			 volatile char *region, size_t len)
{
	int cpus[2];

	if (!o->threads)
		return NULL;
	if (online_cpus(cpus, 2) < 2)
		die(1, "--shape threads needs at least 2 usable CPUs; use --shape single");
	return busy_start(main_cpu, region, len);
}
