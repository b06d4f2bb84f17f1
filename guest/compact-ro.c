// SPDX-License-Identifier: GPL-2.0
/*
 * compact-ro: memory compaction migrating read-only mapped page cache
 * (seed 001's LUF, applied to the migration compaction does).
 *
 * Compaction migrates the movable pages of a block so that the block comes
 * free for a larger allocation.  It migrates at most 32 pages at a time,
 * and each batch ends in one round of TLB shootdowns to every CPU the
 * pages' processes run on, although a page that was only ever mapped
 * read-only keeps its bytes and could be flushed later, once for many
 * batches.  Here one process maps a file read-only, with its threads busy
 * on every other CPU, and the node holding the file is compacted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "roload.h"

static const char usage[] =
"usage: compact-ro --file F [--mem M] [--fill M] [--thp M] [--reps N]\n"
"                  [--quick] [--shape threads|single]\n"
"\n"
"Map the first --mem of F (a file on a disk filesystem, such as the lab's\n"
"/data/model0) MAP_SHARED PROT_READ and read one byte of each page.  The\n"
"measured phase is one compaction of the node holding it.  Before that, a\n"
"child process fills most of that node's free memory in 64 steps, reading\n"
"a 64th of the file into the page cache after each, and then frees every\n"
"other 128K of its own: compaction finds the file's pages among partly used\n"
"blocks and moves some of them into the holes.  The node is the first\n"
"CPU-less one (the lab's node 1: /sys/devices/system/node/nodeN/compact),\n"
"else every node is used and compacted (/proc/sys/vm/compact_memory).\n"
"With --thp, the measured phase instead faults M of MADV_HUGEPAGE memory\n"
"bound to that node: each 2M page the node has no free block for is made by\n"
"compaction at order 9, in the fault and in kcompactd, which the faults\n"
"wake; it releases what it moved block by block.\n"
"Before each repetition the file's page cache is dropped\n"
"(POSIX_FADV_DONTNEED), so that it is read into new pages.\n"
"\n"
"  --file F     the file to map (required)\n"
"  --mem M      how much of it (default 64M, --quick 16M)\n"
"  --fill M     the child fills at most M (default 2G): on a large machine\n"
"               the free memory less 96M would be all of it\n"
"  --thp M      fault M of transparent huge pages on the node instead of\n"
"               compacting all of it (experiment compact-ro/thp)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --shape      threads (default): a helper thread of this process busy on\n"
"               every other CPU, so that unmapping the file needs\n"
"               shootdowns; or single\n"
"  --quick      16M, for CI smoke runs\n"
"\n"
"Needs root (PFNs in /proc/self/pagemap) and CONFIG_COMPACTION.  Verifies\n"
"from pagemap that compaction moved some of the file's pages, else fails\n"
"without a result line.  Only 2M pages of anonymous memory are enabled, and\n"
"only during --thp's phase: the child's fill is 4K pages.  Experiment id:\n"
"compact-ro.  checks: file_pages, file_pages_moved, file_pages_dropped,\n"
"pgmigrate_success, pgsteal, compact_stall, compact_success, and with --thp\n"
"thp_fault_alloc, thp_fault_fallback.  ops: the file's pages compaction\n"
"moved.\n";

/* The PFN of each page of @map, 0 where none is present. */
static void read_pfns(int pagemap, const char *map, size_t pages,
		      uint64_t *pfn)
{
	for (size_t i = 0; i < pages; i++)
		pfn[i] = present_pfn(pagemap_read(pagemap, (uintptr_t)map +
						  i * PAGE_SIZE_4K));
}

/*
 * Compaction's free scanner takes free pages only from partly used blocks,
 * going down from the top of a zone, and its migration scanner goes up
 * from the bottom until they meet.  So that the file's pages are among
 * what it moves, wherever the allocator puts them, a child process fills
 * most of @node's free memory in 64 steps and reads a 64th of the file into
 * the page cache after each, then frees every other 128K of its own: the
 * file is spread over the filled memory, and the holes are where
 * compaction moves what it finds below them.  The child is single-threaded
 * and sleeps on this CPU, so moving its pages needs no shootdown.  Returns
 * it; it waits for SIGKILL.  @node -1: any node, the machine's free memory.
 */
#define FILL_STEPS	64
/*
 * Freed, then kept, in turn.  Once a block gives it nothing, compaction's
 * free scanner samples blocks at strides that double up to 32 pages: with
 * runs of 16 its samples would all land in kept runs in some boots.
 */
#define HOLE		(32 * PAGE_SIZE_4K)

static void fill_and_read(const char *path, size_t len, size_t fill)
{
	size_t step = fill / FILL_STEPS, part = len / FILL_STEPS;
	char *bufs[FILL_STEPS], chunk[64 * 1024];
	int fd = open(path, O_RDONLY);

	step -= step % PAGE_SIZE_4K;
	if (fd < 0)
		_exit(1);
	for (int i = 0; i < FILL_STEPS; i++) {
		bufs[i] = mmap(NULL, step, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
			       -1, 0);
		if (bufs[i] == MAP_FAILED)
			_exit(1);
		for (size_t off = 0; off < part; off += sizeof(chunk))
			if (pread(fd, chunk, sizeof(chunk),
				  i * part + off) <= 0)
				_exit(1);
	}
	for (int i = 0; i < FILL_STEPS; i++)
		for (size_t off = 0; off + HOLE <= step; off += 2 * HOLE)
			madvise(bufs[i] + off, HOLE, MADV_DONTNEED);
	close(fd);
}

static pid_t fragment(const char *path, size_t len, int node, size_t most)
{
	long long spare = (node < 0 ? meminfo_value("MemFree") * 1024LL :
			   node_free_bytes(node)) - (long long)len;
	size_t fill = spare > (long long)(128 * MiB) ? spare - (long long)(96 * MiB) : 0;

	if (fill > most)
		fill = most;
	int ready[2];
	char c = 0;
	pid_t pid;

	if (!fill)
		die(1, "%lld MiB free is too little to fragment around %zu MiB of the file",
		    (spare + (long long)len) >> 20, len >> 20);
	if (pipe(ready))
		die(1, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		bind_memory(node);
		fill_and_read(path, len, fill);
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	if (read(ready[0], &c, 1) != 1)
		die(1, "the child filling %zu bytes of memory and reading %s failed",
		    fill, path);
	close(ready[0]);
	close(ready[1]);
	return pid;
}

#define THP_SIZE	(2 * MiB)

/*
 * @len of MADV_HUGEPAGE memory, not yet faulted.  Only 2M anonymous pages
 * are enabled, with direct compaction for MADV_HUGEPAGE regions
 * ("madvise"), until huge_pages_off().
 */
static char *huge_pages_on(size_t len)
{
	char *thp = map_aligned(len, THP_SIZE);

	if (madvise(thp, len, MADV_HUGEPAGE))
		die(1, "madvise(MADV_HUGEPAGE): %s (needs CONFIG_TRANSPARENT_HUGEPAGE)",
		    strerror(errno));
	mthp_set_only(THP_SIZE / 1024);
	setting_write("/sys/kernel/mm/transparent_hugepage/defrag", "madvise");
	return thp;
}

/* The next repetition's fill must be 4K pages again. */
static void huge_pages_off(char *thp, size_t len)
{
	munmap(thp, len);
	mthp_set_only(4);
}

/*
 * One write per 2M of @thp, on @node: where the node has no free 2M block,
 * the fault compacts it (order 9) to make one, and wakes kcompactd, which
 * compacts it beside the faults.
 */
static void fault_huge_pages(char *thp, size_t len, int node)
{
	bind_memory(node);
	for (size_t off = 0; off < len; off += THP_SIZE)
		thp[off] = 1;
	bind_memory(-1);
}

int main(int argc, char **argv)
{
	struct own_arg args[] = { { .name = "file" }, { .name = "mem" },
				  { .name = "fill" }, { .name = "thp" } };
	struct fields checks = { 0 }, extra = { 0 };
	uint64_t *before, *after;
	struct run_opts o;
	size_t len, mem, pages, most, thp_len;
	int cpu, pagemap, node;
	char compact[64];
	char *map;

	run_opts_init(&o, usage, true);
	parse_run_args(argc, argv, &o, args, 4);
	if (!args[0].value)
		usage_error("--file is required");
	mem = arg_size(&args[1], o.quick ? 16 * MiB : 64 * MiB);
	if (!mem || mem % PAGE_SIZE_4K)
		usage_error("--mem must be a positive multiple of 4K");
	most = arg_size(&args[2], 2 * GiB);
	if (most < 128 * MiB)
		usage_error("--fill must be 128M or more: the file's pages go between what it fills");
	thp_len = arg_size(&args[3], 0);
	if (thp_len % THP_SIZE)
		usage_error("--thp must be a multiple of 2M");
	if (!path_exists("/proc/sys/vm/compact_memory"))
		die(1, "/proc/sys/vm/compact_memory is missing: the kernel needs CONFIG_COMPACTION");
	node = cpuless_node();
	if (node < 0)
		snprintf(compact, sizeof(compact), "/proc/sys/vm/compact_memory");
	else
		snprintf(compact, sizeof(compact),
			 "/sys/devices/system/node/node%d/compact", node);

	/* the child's fill must be 4K pages, which MADV_DONTNEED can free */
	mthp_set_only(4);
	online_cpus(&cpu, 1);
	pin_main(cpu);
	pagemap = pagemap_open(0);
	pages = mem / PAGE_SIZE_4K;
	before = calloc(pages, sizeof(*before));
	after = calloc(pages, sizeof(*after));
	if (!before || !after)
		die(1, "out of memory for %zu PFNs", pages);
	for (int rep = 0; rep < o.reps; rep++) {
		struct phase p = { 0 };
		struct busy *busy;
		long long moved = 0, dropped = 0, stalls, huge;
		char *thp = NULL;
		pid_t filler;

		fields_clear(&checks);
		fields_clear(&extra);
		evict_file(args[0].value);
		map = map_file(args[0].value, PROT_READ, MAP_SHARED, &len);
		if (len < mem)
			die(1, "%s has %zu bytes, fewer than --mem %zu",
			    args[0].value, len, mem);
		filler = fragment(args[0].value, mem, node, most);
		for (size_t off = 0; off < mem; off += PAGE_SIZE_4K)
			(void)((volatile char *)map)[off];
		read_pfns(pagemap, map, pages, before);
		if (!before[0])
			die(1, "pagemap shows no PFN: run as root");
		busy = shape_start(&o, cpu, NULL, 0);
		if (thp_len)
			thp = huge_pages_on(thp_len);
		phase_begin(&p);
		if (thp)
			fault_huge_pages(thp, thp_len, node);
		else if (!write_text(compact, "1"))
			die(1, "writing 1 to %s: %s", compact, strerror(errno));
		phase_end(&p);
		if (thp)
			huge_pages_off(thp, thp_len);
		busy_stop(busy);
		read_pfns(pagemap, map, pages, after);
		munmap(map, len);
		kill(filler, SIGKILL);
		waitpid(filler, NULL, 0);

		stalls = phase_delta(&p, "compact_stall");
		huge = phase_delta(&p, "thp_fault_alloc");
		for (size_t i = 0; i < pages; i++) {
			moved += before[i] && after[i] && before[i] != after[i];
			dropped += before[i] && !after[i];
		}
		field_int(&checks, "file_pages", pages);
		field_int(&checks, "file_pages_moved", moved);
		/* reclaimed, not compacted: direct reclaim may run for --thp */
		field_int(&checks, "file_pages_dropped", dropped);
		field_int(&checks, "pgmigrate_success",
			  phase_delta(&p, "pgmigrate_success"));
		field_int(&checks, "pgsteal", phase_pgsteal(&p));
		field_int(&checks, "compact_stall", stalls);
		field_int(&checks, "compact_success",
			  phase_delta(&p, "compact_success"));
		if (thp_len) {
			field_int(&checks, "thp_fault_alloc", huge);
			field_int(&checks, "thp_fault_fallback",
				  phase_delta(&p, "thp_fault_fallback"));
		}
		if (!moved)
			die(1, "compaction moved none of the %zu pages of %s (pagemap; %lld compaction stalls, %lld huge pages faulted); is memory too full to compact, or (--thp) too free to need it?",
			    pages, args[0].value, stalls, huge);
		if (thp_len && !stalls)
			die(1, "no huge page fault needed compaction: the node had a free 2M block for each; use a larger --thp");
		field_int(&extra, "mem_bytes", mem);
		field_int(&extra, "ops", moved);
		report_result("compact-ro", shape_name(&o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
