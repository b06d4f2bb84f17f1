// SPDX-License-Identifier: GPL-2.0
/*
 * hugetlb-hvo: how long allocating and freeing hugetlb pages takes with and
 * without the vmemmap optimisation (seed 003, batched flushes in HVO).
 *
 * HVO frees most of the struct pages behind each huge page by remapping
 * their vmemmap, which flushes kernel address ranges on every CPU.  Done page
 * by page, that made allocation in a 252-vCPU VM 61x slower than without HVO;
 * batching splits and remaps many pages per flush.  The flushes are
 * function-call IPIs (irq/CAL), not TLB shootdowns.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unflush.h"

#define NR_HUGEPAGES "/proc/sys/vm/nr_hugepages"
#define HVO "/proc/sys/vm/hugetlb_optimize_vmemmap"

static const char usage[] =
"usage: hugetlb-hvo [--pages N] [--hvo 0|1] [--reps N] [--quick]\n"
"                   [--shape single|threads]\n"
"\n"
"Set vm.hugetlb_optimize_vmemmap, then time writing N to vm.nr_hugepages\n"
"(phase alloc) and writing 0 back (phase free): two UNFLUSH-RESULT lines per\n"
"repetition.  Both settings are restored at exit.\n"
"\n"
"  --pages N    huge pages of the default size (default 400, --quick 32)\n"
"  --hvo 0|1    vm.hugetlb_optimize_vmemmap during the run (default 1)\n"
"  --reps N     repetitions (default 3)\n"
"  --shape      single (default), or threads: a helper thread of this process\n"
"               busy on every other CPU\n"
"  --quick      fewer pages, for CI smoke runs\n"
"\n"
"Verifies HugePages_Total reached N (and 0 after freeing), else fails with\n"
"the number reached.  Experiment id: hugetlb-hvo/hvo=<0|1>, field \"phase\".\n"
"checks: hugepages_total, expected, hugetlb_optimize_vmemmap,\n"
"hugepagesize_kB, memmap_pages (net change of nr_memmap_pages +\n"
"nr_memmap_boot_pages: < 0 when HVO freed struct-page memory; absent on\n"
"kernels without those counters).  Refuses a --pages that does not fit in\n"
"90%% of MemAvailable: the OOM killer would end this program unrestored.\n";

static void timed_write(const char *path, long value, struct phase *p)
{
	char text[32];
	int fd = open(path, O_WRONLY);
	ssize_t n, len;

	if (fd < 0)
		die(1, "cannot open %s: %s", path, strerror(errno));
	len = snprintf(text, sizeof(text), "%ld", value);
	phase_begin(p);
	n = write(fd, text, len);
	phase_end(p);
	if (n != len)
		die(1, "writing %ld to %s: %s", value, path, strerror(errno));
	close(fd);
}

/*
 * The kernel takes all the memory it can when asked for too many huge pages,
 * and the OOM killer then picks this process: SIGKILL, no restore, a guest
 * left without memory.  So ask only for what fits.
 */
static void check_room(long pages)
{
	long long page_kb = meminfo_value("Hugepagesize");
	long long avail_kb = meminfo_value("MemAvailable");

	if (page_kb <= 0 || avail_kb < 0)
		die(1, "no Hugepagesize or MemAvailable in /proc/meminfo");
	if (pages * page_kb > avail_kb * 9 / 10)
		die(1, "%ld huge pages of %lld kB need %lld MiB, only %lld MiB is available; use fewer --pages",
		    pages, page_kb, pages * page_kb / 1024, avail_kb / 1024);
}

static void report_phase(const char *experiment, const char *shape, int rep,
			 const char *name, const struct phase *p, long expected,
			 long pages, int hvo)
{
	long long total = meminfo_value("HugePages_Total");
	struct fields extra = { 0 }, checks = { 0 };

	field_int(&checks, "hugepages_total", total);
	field_int(&checks, "expected", expected);
	field_int(&checks, "hugetlb_optimize_vmemmap", hvo);
	field_int(&checks, "hugepagesize_kB", meminfo_value("Hugepagesize"));
	/* HVO frees boot-time memmap first, later buddy-allocated memmap */
	if (phase_has(p, "nr_memmap_pages"))
		field_int(&checks, "memmap_pages",
			  phase_delta(p, "nr_memmap_pages") +
			  phase_delta(p, "nr_memmap_boot_pages"));
	if (total != expected)
		die(1, "%s: HugePages_Total reached %lld, not %ld; memory too small or fragmented (try fewer --pages, or echo 1 > /proc/sys/vm/compact_memory)",
		    name, total, expected);
	field_str(&extra, "phase", name);
	field_int(&extra, "ops", pages);	/* huge pages made or freed */
	report_result(experiment, shape, rep, p, &extra, &checks);
	free(extra.b.s);
	free(checks.b.s);
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "pages" }, { .name = "hvo" } };
	char experiment[64];
	struct run_opts o;
	long pages, hvo;
	int cpu;

	run_opts_init(&o, usage, false);
	parse_run_args(argc, argv, &o, args, 2);
	pages = arg_count(&args[0], 1, 0);
	hvo = arg_count(&args[1], 0, 1);
	if (hvo > 1)
		usage_error("bad --hvo '%s': use 0 or 1", args[1].value);
	if (!pages)
		pages = o.quick ? 32 : 400;
	snprintf(experiment, sizeof(experiment), "hugetlb-hvo/hvo=%ld", hvo);

	if (!path_exists(NR_HUGEPAGES))
		die(1, "no " NR_HUGEPAGES ": this kernel has no hugetlb pages (CONFIG_HUGETLBFS)");
	if (!path_exists(HVO) && hvo)
		die(1, "no " HVO ": this kernel cannot optimise vmemmap (CONFIG_HUGETLB_PAGE_OPTIMIZE_VMEMMAP); use --hvo 0");
	check_room(pages);
	online_cpus(&cpu, 1);
	pin_main(cpu);
	if (path_exists(HVO))
		setting_write(HVO, hvo ? "1" : "0");
	/* start from none, and have the old count restored at exit */
	setting_write(NR_HUGEPAGES, "0");

	for (int rep = 0; rep < o.reps; rep++) {
		struct phase alloc = { 0 }, release = { 0 };
		struct busy *busy = shape_start(&o, cpu, NULL, 0);

		timed_write(NR_HUGEPAGES, pages, &alloc);
		report_phase(experiment, shape_name(&o), rep, "alloc", &alloc,
			     pages, pages, hvo);
		timed_write(NR_HUGEPAGES, 0, &release);
		report_phase(experiment, shape_name(&o), rep, "free", &release,
			     0, pages, hvo);
		busy_stop(busy);
		phase_free(&alloc);
		phase_free(&release);
	}
	return 0;
}
