// SPDX-License-Identifier: GPL-2.0
/*
 * pageout-mthp: how long MADV_PAGEOUT takes to swap out memory backed by
 * large folios (seed 002, batched unmap of anonymous large folios).
 *
 * try_to_unmap_one() handles an mTHP page by page in 6.12; the series clears
 * all its PTEs and installs its swap entries as one batch.  4K folios are the
 * control: they must not get slower.  The swap-out itself is verified, since
 * a folio split or a missing swap device would time something else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/mman.h>

#include "unflush.h"

static const char usage[] =
"usage: pageout-mthp --size S [--mem M] [--reps N] [--quick]\n"
"                    [--shape single|threads]\n"
"\n"
"Back --mem of anonymous memory with folios of one size, write every page,\n"
"then time madvise(MADV_PAGEOUT) over all of it.  Needs swap.\n"
"\n"
"  --size S     folio size: 64K or 4K (the control); any size the kernel\n"
"               lists under /sys/kernel/mm/transparent_hugepage works\n"
"  --mem M      memory per repetition (default 256M, --quick 32M)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --shape      single (default), or threads: a helper thread of this process\n"
"               busy on every other CPU, so shootdowns become visible\n"
"  --quick      smaller memory, for CI smoke runs\n"
"\n"
"mTHP settings as in munmap-folio-size (restored at exit), with the same\n"
"check that every folio was of size S.  Then verifies that pswpout grew by\n"
"at least mem/4K and, for S > 4K, that mthp/<S>kB/swpout grew by exactly\n"
"mem/S (every folio swapped out whole); fails without a result line\n"
"otherwise.  Experiment id: pageout-mthp/<S>.\n";

static void check_swapout(const struct phase *p, size_t mem,
			  unsigned long folio_kb, struct fields *checks)
{
	long long pages = mem / PAGE_SIZE_4K;
	long long pswpout = phase_delta(p, "pswpout");
	long long folios = mem / (folio_kb * KiB), swpout, fallback;
	char name[64];

	field_int(checks, "pswpout", pswpout);
	field_int(checks, "expected_pswpout", pages);
	if (pswpout < pages)
		die(1, "only %lld of %lld pages were swapped out (pswpout); is swap full, or the memory mlocked?",
		    pswpout, pages);
	if (folio_kb == 4)
		return;
	snprintf(name, sizeof(name), "mthp/%lukB/swpout", folio_kb);
	swpout = phase_delta(p, name);
	snprintf(name, sizeof(name), "mthp/%lukB/swpout_fallback", folio_kb);
	fallback = phase_delta(p, name);
	snprintf(name, sizeof(name), "mthp_swpout_%lukB", folio_kb);
	field_int(checks, name, swpout);
	field_int(checks, "expected_swpout", folios);
	if (swpout != folios)
		die(1, "%lld of %lld %s folios were swapped out whole (swpout_fallback %lld: split first); does the swap device take large folios? (zram does)",
		    swpout, folios, folio_size_name(folio_kb), fallback);
}

int main(int argc, char **argv)
{
	struct fields checks = { 0 }, extra = { 0 };
	struct folio_args a;
	int cpu;

	parse_folio_args(argc, argv, "pageout-mthp", usage, 32 * MiB,
			 256 * MiB, &a);

	require_swap(a.mem);
	online_cpus(&cpu, 1);
	pin_main(cpu);
	mthp_set_only(a.folio_kb);
	for (int rep = 0; rep < a.o.reps; rep++) {
		struct phase p = { 0 };
		struct busy *busy;
		char *mapping;
		int ret;

		fields_clear(&checks);
		fields_clear(&extra);
		mapping = map_anon_folios(a.mem, a.folio_kb, &checks);
		busy = shape_start(&a.o, cpu, NULL, 0);
		phase_begin(&p);
		ret = madvise(mapping, a.mem, MADV_PAGEOUT);
		phase_end(&p);
		busy_stop(busy);
		if (ret)
			die(1, "madvise(MADV_PAGEOUT): %s (needs Linux >= 5.4 with CONFIG_ADVISE_SYSCALLS)",
			    strerror(errno));
		check_swapout(&p, a.mem, a.folio_kb, &checks);
		/* frees the swap slots too, ready for the next repetition */
		munmap(mapping, a.mem);
		field_int(&extra, "mem_bytes", a.mem);
		field_int(&extra, "ops", a.mem / PAGE_SIZE_4K);	/* pages */
		report_result(a.experiment, shape_name(&a.o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
