// SPDX-License-Identifier: GPL-2.0
/*
 * swap-loop: swap the same small buffer in and out, over and over (seed 004,
 * batched TLB flush in reclaim).
 *
 * Each round reads every page back in, then MADV_PAGEOUT reclaims them all
 * again; reclaim can queue the TLB flushes of a whole batch of pages and send
 * them once.  The buffer is shared anonymous memory, as in the seed: its
 * pages lose their swap copy when read back, so every round writes them all
 * out again.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/mman.h>

#include "unflush.h"

static const char usage[] =
"usage: swap-loop [--rounds N] [--mem M] [--reps N] [--quick]\n"
"                 [--shape single|threads]\n"
"\n"
"Write --mem of shared anonymous memory once; then, --rounds times, read\n"
"every page (swap-in) and madvise(MADV_PAGEOUT) it all (swap-out).  The\n"
"measured phase is the whole loop.  Needs swap (zram in the lab).\n"
"\n"
"  --rounds N   rounds per repetition (default 10000, --quick 300)\n"
"  --mem M      buffer size (default 1M)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --shape      single (default), or threads: a helper thread of this process\n"
"               busy on every other CPU, so shootdowns become visible\n"
"  --quick      300 rounds, for CI smoke runs\n"
"\n"
"Verifies pswpout grew by at least 90%% of rounds * mem/4K.\n"
"Experiment id: swap-loop.  checks: pswpout, expected_pswpout, pswpin.\n";

/*
 * Shared anonymous memory starting at a 2M boundary.  MADV_PAGEOUT reclaims
 * one page table at a time, and each table after the first finds the
 * previous table's batched flush pending (flush_tlb_batched_pending()) and
 * flushes the whole mm: a 1M buffer that ASLR placed across a boundary made
 * two such flushes a round instead of one, in some boots of every kernel.
 */
static char *map_buffer(size_t mem)
{
	char *buf = map_aligned(mem, 2 * MiB);

	if (mmap(buf, mem, PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		die(1, "mmap of %zu bytes of shared memory failed: %s", mem,
		    strerror(errno));
	return buf;
}

static void swap_rounds(volatile char *buf, size_t mem, long rounds)
{
	for (long r = 0; r < rounds; r++) {
		for (size_t off = 0; off < mem; off += PAGE_SIZE_4K)
			(void)buf[off];
		if (madvise((void *)buf, mem, MADV_PAGEOUT))
			die(1, "madvise(MADV_PAGEOUT): %s (needs Linux >= 5.4 with CONFIG_ADVISE_SYSCALLS)",
			    strerror(errno));
	}
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "rounds" }, { .name = "mem" } };
	struct fields checks = { 0 }, extra = { 0 };
	struct run_opts o;
	size_t mem;
	long rounds;
	int cpu;

	run_opts_init(&o, usage, false);
	parse_run_args(argc, argv, &o, args, 2);
	rounds = arg_count(&args[0], 1, 0);
	mem = arg_size(&args[1], 1 * MiB);
	if (!rounds)
		rounds = o.quick ? 300 : 10000;
	if (mem % PAGE_SIZE_4K)
		usage_error("--mem must be a multiple of 4K");

	require_swap(mem);
	online_cpus(&cpu, 1);
	pin_main(cpu);
	for (int rep = 0; rep < o.reps; rep++) {
		long long expected = rounds * (long long)(mem / PAGE_SIZE_4K);
		struct phase p = { 0 };
		struct busy *busy;
		char *buf;

		fields_clear(&checks);
		fields_clear(&extra);
		buf = map_buffer(mem);
		/* not zeroes: zero-filled pages skip swap I/O since 6.12 */
		memset(buf, 0x88, mem);
		busy = shape_start(&o, cpu, NULL, 0);
		phase_begin(&p);
		swap_rounds(buf, mem, rounds);
		phase_end(&p);
		busy_stop(busy);
		munmap(buf, mem);

		field_int(&checks, "pswpout", phase_delta(&p, "pswpout"));
		field_int(&checks, "expected_pswpout", expected);
		field_int(&checks, "pswpin", phase_delta(&p, "pswpin"));
		if (phase_delta(&p, "pswpout") < expected * 9 / 10)
			die(1, "only %lld of %lld page swap-outs happened (pswpout); is swap full or too slow to accept them?",
			    phase_delta(&p, "pswpout"), expected);
		field_int(&extra, "rounds", rounds);
		field_int(&extra, "mem_bytes", mem);
		field_int(&extra, "ops", expected);	/* page swap-outs */
		report_result("swap-loop", shape_name(&o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
