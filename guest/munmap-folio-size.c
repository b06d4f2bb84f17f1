// SPDX-License-Identifier: GPL-2.0
/*
 * munmap-folio-size: how long munmap() takes by the size of the folios
 * behind the memory (seed 000, PTE batching on zap).
 *
 * With batching, the PTEs of one large folio are cleared, counted and queued
 * for flushing together, so the cost per byte should fall as folios grow;
 * without it, every size costs about what 4K pages do.  Only munmap() is
 * timed and counted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/mman.h>

#include "unflush.h"

static const char usage[] =
"usage: munmap-folio-size --size S [--mem M] [--reps N] [--quick]\n"
"                         [--shape single|threads]\n"
"\n"
"Back --mem of anonymous memory with folios of one size, touch every page,\n"
"then time munmap() of all of it.\n"
"\n"
"  --size S     folio size: 4K 16K 32K 64K 128K 256K 512K 1024K (any size\n"
"               the kernel lists under /sys/kernel/mm/transparent_hugepage)\n"
"  --mem M      memory per repetition (default 1G, --quick 64M)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --shape      single (default), or threads: a helper thread of this process\n"
"               busy on every other CPU, so shootdowns become visible\n"
"  --quick      smaller memory, for CI smoke runs\n"
"\n"
"Sets hugepages-<S>kB/enabled to always and every other size to never\n"
"(4K: all never), restored at exit.  Verifies from mthp/<S>kB/anon_fault_alloc\n"
"that every folio was of that size, else fails without a result line.\n"
"Experiment id: munmap-folio-size/<S>.  checks: mthp_alloc_<S>kB,\n"
"mthp_fallback_<S>kB, expected (mem/S; for 4K mthp_alloc_any, expected 0).\n";

int main(int argc, char **argv)
{
	struct fields checks = { 0 }, extra = { 0 };
	struct folio_args a;
	int cpu;

	parse_folio_args(argc, argv, "munmap-folio-size", usage, 64 * MiB,
			 1 * GiB, &a);

	online_cpus(&cpu, 1);
	pin_main(cpu);
	mthp_set_only(a.folio_kb);
	for (int rep = 0; rep < a.o.reps; rep++) {
		struct phase p = { 0 };
		struct busy *busy;
		char *mapping;

		fields_clear(&checks);
		fields_clear(&extra);
		mapping = map_anon_folios(a.mem, a.folio_kb, &checks);
		busy = shape_start(&a.o, cpu, NULL, 0);
		phase_begin(&p);
		if (munmap(mapping, a.mem))
			die(1, "munmap: %s", strerror(errno));
		phase_end(&p);
		busy_stop(busy);
		field_int(&extra, "mem_bytes", a.mem);
		field_int(&extra, "ops", a.mem / PAGE_SIZE_4K);	/* pages */
		report_result(a.experiment, shape_name(&a.o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
