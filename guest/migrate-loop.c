// SPDX-License-Identifier: GPL-2.0
/*
 * migrate-loop: move a working set back and forth between two NUMA nodes
 * while another thread keeps using it (seed 004: batched TLB flush in
 * migration).
 *
 * migrate_pages() unmaps a batch of folios, queues their TLB flushes and
 * sends them once before copying.  The seed moved 1 GiB of a running
 * benchmark between node 0 and 1, 100 times; here a helper thread on every
 * other CPU writes to the working set while move_pages(2) moves it, so each
 * move has translations cached elsewhere to shoot down.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "unflush.h"

static const char usage[] =
"usage: migrate-loop [--mem M] [--rounds N] [--reps N] [--quick]\n"
"                    [--shape threads|single]\n"
"\n"
"Write --mem of anonymous memory, place it on the first node with memory,\n"
"then move it to the second node and back, --rounds moves in all, with\n"
"move_pages(2).  The measured phase is all the moves.  Needs 2 NUMA nodes\n"
"with memory (a CPU-less node will do).\n"
"\n"
"  --mem M      working set (default 1G, --quick 64M)\n"
"  --rounds N   moves per repetition (default 10, --quick 4; the seed did 100)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --shape      threads (default, the seed's shape): a helper thread on every\n"
"               other CPU keeps writing to the working set; single: none\n"
"  --quick      smaller and fewer, for CI smoke runs\n"
"\n"
"Verifies pgmigrate_success grew by at least 90%% of rounds * mem/4K.\n"
"Experiment id: migrate-loop.  checks: pgmigrate_success, expected,\n"
"pages_moved (move_pages status on target), pgmigrate_fail.\n";

struct working_set {
	char *mem;
	size_t len;
	struct mover mover;
};

static void working_set_init(struct working_set *ws, size_t len)
{
	ws->len = len;
	ws->mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ws->mem == MAP_FAILED)
		die(1, "cannot allocate a %zu MiB working set; use a smaller --mem",
		    len / MiB);
	for (size_t off = 0; off < len; off += PAGE_SIZE_4K)
		ws->mem[off] = 1;
	mover_init(&ws->mover, ws->mem, len);
}

static void working_set_free(struct working_set *ws)
{
	munmap(ws->mem, ws->len);
	mover_free(&ws->mover);
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "mem" }, { .name = "rounds" } };
	struct fields checks = { 0 }, extra = { 0 };
	int cpu, nodes[2], nnodes;
	struct run_opts o;
	size_t mem;
	long rounds;

	run_opts_init(&o, usage, true);
	parse_run_args(argc, argv, &o, args, 2);
	mem = arg_size(&args[0], 0);
	rounds = arg_count(&args[1], 1, 0);
	if (!mem)
		mem = o.quick ? 64 * MiB : 1 * GiB;
	if (!rounds)
		rounds = o.quick ? 4 : 10;
	if (mem % PAGE_SIZE_4K)
		usage_error("--mem must be a multiple of 4K");

	nnodes = node_list("has_memory", nodes, 2);
	if (nnodes < 0)
		die(1, "no /sys/devices/system/node/has_memory: this kernel has no NUMA (CONFIG_NUMA)");
	if (nnodes < 2)
		die(1, "needs 2 NUMA nodes with memory, this machine has %d; run it on a machine with two, or in the lab's guest with a second node (python3 -m lab run --node1 1G)",
		    nnodes);
	online_cpus(&cpu, 1);
	pin_main(cpu);

	for (int rep = 0; rep < o.reps; rep++) {
		long long expected = rounds * (long long)(mem / PAGE_SIZE_4K);
		struct working_set ws;
		struct phase p = { 0 };
		struct busy *busy;
		long moved = 0;

		fields_clear(&checks);
		fields_clear(&extra);
		working_set_init(&ws, mem);
		/* start from a known place, outside the measurement */
		mover_move(&ws.mover, nodes[0]);
		busy = shape_start(&o, cpu, ws.mem, ws.len);
		phase_begin(&p);
		for (long r = 0; r < rounds; r++)
			moved += mover_move(&ws.mover, nodes[(r + 1) % 2]);
		phase_end(&p);
		busy_stop(busy);
		working_set_free(&ws);

		field_int(&checks, "pgmigrate_success",
			  phase_delta(&p, "pgmigrate_success"));
		field_int(&checks, "expected", expected);
		field_int(&checks, "pages_moved", moved);
		field_int(&checks, "pgmigrate_fail",
			  phase_delta(&p, "pgmigrate_fail"));
		if (phase_delta(&p, "pgmigrate_success") < expected * 9 / 10)
			die(1, "only %lld of %lld page migrations succeeded (pgmigrate_success; move_pages put %ld pages on target); is node %d short of free memory?",
			    phase_delta(&p, "pgmigrate_success"), expected,
			    moved, nodes[1]);
		field_int(&extra, "rounds", rounds);
		field_int(&extra, "mem_bytes", mem);
		field_int(&extra, "ops", expected);	/* page migrations */
		field_int(&extra, "node_a", nodes[0]);
		field_int(&extra, "node_b", nodes[1]);
		report_result("migrate-loop", shape_name(&o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
