/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers shared by the unflush guest programs.
 *
 * Every program measures one phase of kernel work and reports what it cost
 * in TLB flushes.  The shape is always the same:
 *
 *	set up (configure, map, touch)		not measured
 *	phase_begin(&p)				snapshot every counter, start clock
 *	the work under test
 *	phase_end(&p)				stop clock, snapshot again
 *	check the preconditions, report_result()
 *
 * A snapshot reads four sources, each parsed in exactly one place:
 * /proc/vmstat (every key, so counters a patched kernel adds show up without
 * a change here), the TLB and CAL rows of /proc/interrupts, the tlb:tlb_flush
 * tracepoint counted by reason through a hist trigger, and the per-size mTHP
 * stats.  A source this kernel lacks is named in "missing" instead of being
 * reported as zero: a zero must mean "did not happen".
 *
 * Anything a program changes in sysfs or /proc/sys goes through
 * setting_write(), which remembers the old value; the cleanup stack puts it
 * back at exit, after die() and on SIGINT/SIGTERM/SIGHUP.
 */
#ifndef UNFLUSH_H
#define UNFLUSH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define PAGE_SIZE_4K	4096UL
#define KiB		((size_t)1024)
#define MiB		(1024 * KiB)
#define GiB		(1024 * MiB)
#define MAX_CPUS	1024

/* --- pagemap.c: /proc/PID/pagemap (admin-guide/mm/pagemap.rst) --- */

#define PM_PFN		((1ULL << 55) - 1)	/* bits 0-54, root only */
#define PM_SOFT_DIRTY	(1ULL << 55)
#define PM_EXCLUSIVE	(1ULL << 56)	/* page exclusively mapped */
#define PM_UFFD_WP	(1ULL << 57)
#define PM_SWAP		(1ULL << 62)
#define PM_PRESENT	(1ULL << 63)

/* /proc/@pid/pagemap, or /proc/self/pagemap for 0; dies if it cannot. */
int pagemap_open(pid_t pid);
/* The entry of @addr; dies, naming the reason, if it cannot be read. */
uint64_t pagemap_read(int fd, uintptr_t addr);
/* The same for callers that report failure their own way (errno; 0: short). */
bool pagemap_try(int fd, uintptr_t addr, uint64_t *e);
/* The PFN of a present entry, 0 if not present (or not root). */
uint64_t present_pfn(uint64_t e);
bool swapped_entry(uint64_t e);

/* --- util.c: errors, time, argument parsing --- */

/* "<prog>: <message>" on stderr, then exit(code): 2 for usage, 1 otherwise;
 * a KTAP test running (ktap.h) gets "not ok" with the message first. */
void die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
double now_s(void);
/* "64K", "1G", "4096" -> bytes; dies with a usage error naming @opt. */
unsigned long long parse_size(const char *opt, const char *arg);
/* Splits @list ("a,b,c", modified) into @paths, at most @max; each must be
 * a non-empty regular file, else a usage error naming @opt.  Returns how
 * many, their sizes summed into @total. */
int split_file_list(const char *opt, char *list, char **paths, int max,
		    size_t *total);
/* For getopt's '?': names the offending argument, exits 2. */
void bad_option(char **argv) __attribute__((noreturn));
long parse_count(const char *opt, const char *arg, long min);

/* Options every experiment takes: --reps, --quick, --shape, --help. */
enum { OPT_REPS = 0x100, OPT_QUICK, OPT_SHAPE, OPT_FIRST_PRIVATE };
#define RUN_LONG_OPTIONS						\
	{ "reps", required_argument, NULL, OPT_REPS },			\
	{ "quick", no_argument, NULL, OPT_QUICK },			\
	{ "shape", required_argument, NULL, OPT_SHAPE },		\
	{ "help", no_argument, NULL, 'h' }

struct run_opts {
	const char *usage;	/* printed by --help */
	int reps;
	bool quick;
	bool threads;		/* --shape threads */
};
/* @threads: the default shape of this experiment. */
void run_opts_init(struct run_opts *o, const char *usage, bool threads);
/* Handles a common option or '?'; false if @opt is the program's own. */
bool run_option(struct run_opts *o, int opt, char **argv);
const char *shape_name(const struct run_opts *o);

/*
 * A program's own "--name VALUE" option.  parse_run_args() sets .value to
 * the last VALUE given, or leaves it NULL; the program converts it with
 * arg_size()/arg_count(), whose messages name the option.
 */
struct own_arg {
	const char *name;
	char *value;
};
#define MAX_OWN_ARGS	8
/* Common options into @o, the rest into @own; any other argument exits 2. */
void parse_run_args(int argc, char **argv, struct run_opts *o,
		    struct own_arg *own, int nown);
size_t arg_size(const struct own_arg *a, size_t dflt);
long arg_count(const struct own_arg *a, long min, long dflt);

/* --- cleanup.c: undo what a program changed, whatever way it ends --- */

void cleanup_push_fn(void (*fn)(void));
void cleanup_run(void);
/* Write @value to @path; the first change of @path is undone at exit. */
void setting_write(const char *path, const char *value);
/* The current value: the [selected] word of a sysfs choice, else the text. */
bool setting_read(const char *path, char *buf, size_t len);
/* Plain write, no restore; false with errno set. */
bool write_text(const char *path, const char *value);
bool read_number(const char *path, long long *value);
bool path_exists(const char *path);
/* Mount debugfs at /sys/kernel/debug unless @path exists; unmounted at exit. */
void need_debugfs(const char *path);

/* --- topology.c: CPUs and NUMA nodes --- */

/* CPUs online and allowed for this process, ascending; returns the count. */
int online_cpus(int *cpus, int max);
void pin_to_cpu(int cpu);
/*
 * Pin the main thread to @cpu and carry on in a forked child.  exec may have
 * started the process on any CPU, and x86 keeps a CPU that ran the mm in its
 * cpumask while it idles in lazy TLB mode, so a single-threaded first
 * repetition could still send shootdown IPIs.  The child's fresh mm only
 * ever runs on @cpu; the parent forwards signals, waits and exits with the
 * child's status.  Call it before changing any setting.
 */
void pin_main(int cpu);
/* Nodes in a /sys/devices/system/node list file (has_memory, has_cpu...). */
int node_list(const char *name, int *nodes, int max);
/*
 * The first node with memory and no CPU (the lab's slower node 1, which
 * HMAT puts in a lower memory tier: reclaim's demotion target), or -1.
 */
int cpuless_node(void);
/*
 * From now on this thread allocates memory only on @node (set_mempolicy()
 * MPOL_BIND), or as the default policy says for -1; dies if refused.
 */
void bind_memory(int node);
/* MemFree of @node in bytes (its sysfs meminfo); dies if unreadable. */
long long node_free_bytes(int node);
/* Parse a kernel list ("0-3,8"); false on malformed input. */
bool parse_list(const char *text, bool *set, int max);

/*
 * Device mapper (lib/dm.c): a device @name of one target @type ("linear")
 * with @params ("7:0 0") over @sectors, @read_only or not, its number
 * returned; a new table made live (load, suspend, resume), or each step
 * alone; the live target's status text; the device removed.  Each dies on
 * an error.
 */
dev_t dm_create(const char *name, const char *type, const char *params,
		unsigned long long sectors, bool read_only);
void dm_reload(const char *name, const char *type, const char *params,
	       unsigned long long sectors, bool read_only);
void dm_load(const char *name, const char *type, const char *params,
	     unsigned long long sectors, bool read_only);
void dm_suspend(const char *name);
dev_t dm_resume(const char *name);
void dm_status(const char *name, char *status, size_t len);
void dm_remove(const char *name);
/* @message sent to the target of device @name at @sector (DM_TARGET_MSG). */
void dm_message(const char *name, unsigned long long sector,
		const char *message);

/*
 * md (lib/md.c), each dying on an error but md_stop(), which says so: a
 * raid1 array of @member[0] and @member[1] with no superblock, as
 * /dev/md@minor (its path in @path), marked clean; the array stopped.
 */
void md_build_raid1(const char *const member[2], unsigned int minor,
		    char *path, size_t len);
void md_stop(const char *path);

/*
 * SCSI (lib/scsi.c): scsi_debug's RAM disk, made (dying on an error) and
 * removed again, with the nodes of its block device, sg and bsg devices
 * (these two named after @tag); scsi_write() sends @len bytes of @buf at
 * byte @at (both whole sectors) to the disk through @fd, an open node of
 * any of the three, by @route: -1 with errno set on an error (EIO for a
 * SCSI status that is not GOOD).  SCSI_WRITE_SAME writes zeroes.
 */
struct scsi_disk {
	char disk[64], sg[64], bsg[64];
	bool added;
};
enum scsi_route { SCSI_SG_IO, SCSI_WRITE_SAME, SCSI_BSG };
void scsi_debug_add(struct scsi_disk *d, const char *tag);
void scsi_debug_remove(struct scsi_disk *d);
int scsi_write(int fd, enum scsi_route route, off_t at, const void *buf,
	       size_t len);

/*
 * NVMe (lib/nvme.c): the nodes of the first NVMe namespace that is
 * @zoned (ZNS) or not, its block device and its generic character device,
 * found with its zone size (dying if there is none).  nvme_write() writes
 * @len bytes of @buf (or zeroes: Write Zeroes) at byte @at (both whole
 * sectors) on @fd, by @route: NVME_IOCTL_IO_CMD on either node, or
 * io_uring's IORING_OP_URING_CMD on the generic node.  nvme_zone_reset()
 * resets the zone that starts at byte @zone by NVME_IOCTL_IO_CMD.  Both
 * return -1 with errno set on an error (EIO for an NVMe status).
 */
struct nvme_disk {
	char disk[64], generic[64];
	unsigned long long zone_bytes;	/* zoned */
};
enum nvme_route { NVME_WRITE_IOCTL, NVME_WRITE_ZEROES_IOCTL,
		  NVME_WRITE_URING };
void nvme_find(struct nvme_disk *d, bool zoned);
int nvme_zone_reset(int fd, off_t zone);
int nvme_write(int fd, enum nvme_route route, off_t at, const void *buf,
	       size_t len);

/*
 * Block-device stacks (lib/stack.c), each dying on an error: the node in
 * /dev of block device @sysname ("loop0p1"), made if missing; a free loop
 * device over @image, its node's path in @path; @loop given another
 * backing file (it must be read-only), or another window of its file
 * (LOOP_SET_STATUS64: @offset and @sizelimit in bytes), or detached; an
 * MS-DOS partition
 * table on @dev with one partition of @sectors from sector @start, read
 * by the kernel (BLKRRPART); partition @partno of @dev added or resized
 * (@op BLKPG_ADD_PARTITION or BLKPG_RESIZE_PARTITION) while the disk is in
 * use; the size of @dev in 512-byte sectors.
 */
void blk_node(const char *sysname, char *path, size_t len);
/* The control device @path, misc minor @minor, opened; made if missing. */
int misc_open(const char *path, unsigned int minor, const char *option);
void loop_attach(const char *image, bool read_only, bool partscan,
		 char *path, size_t len);
void loop_change_fd(const char *loop, const char *image);
void loop_set_offset(const char *loop, unsigned long long offset,
		     unsigned long long sizelimit);
void loop_detach(const char *loop);
void mbr_write(const char *dev, unsigned int start, unsigned int sectors);
void part_change(const char *dev, int op, int partno,
		 unsigned long long start, unsigned long long sectors);
unsigned long long dev_sectors(const char *dev);
/* "major:minor" of block device @dev, in a static buffer. */
const char *dev_numbers(const char *dev);

/* --- migrate.c: move_pages(2) of a whole range --- */

/* The arrays move_pages(2) takes, made once so a move allocates nothing. */
struct mover {
	long n;			/* pages */
	void **pages;
	int *nodes, *status;
};
void mover_init(struct mover *m, char *mem, size_t len);
/* Move every page to @node; returns how many are there afterwards. */
long mover_move(struct mover *m, int node);
void mover_free(struct mover *m);

/* --- busy.c: --shape threads --- */

/*
 * One helper thread pinned on every online CPU except @skip_cpu, writing to
 * one byte per page of @region (or, if NULL, of a few pages of its own) until
 * busy_stop().  They keep the process running on those CPUs, so the mm's
 * cpumask spans them and the kernel has to shoot their TLBs down, as it does
 * for real multi-threaded applications.  Returns once every helper runs.
 */
struct busy;
struct busy *busy_start(int skip_cpu, volatile char *region, size_t len);
void busy_stop(struct busy *b);
/* busy_start() for --shape threads (dies on one CPU), NULL for single. */
struct busy *shape_start(const struct run_opts *o, int main_cpu,
			 volatile char *region, size_t len);

/* --- instruction-count windows (lab/plugin/insnprof.c) --- */

/*
 * Open and close a window for the lab's instruction-counting QEMU plugin
 * (`lab run --insn-profile DIR`): NOPs with displacements nothing else
 * uses.  A real CPU, or QEMU without the plugin, just executes a NOP.
 * arm64 has no NOP with an operand: there the marker is a move of the
 * mark's low 16 bits into the zero register, which writes nothing
 * ("mov xzr, #0x4631" is 0xd288c63f).
 */
#ifdef __aarch64__
#define WINDOW_MARK(x86, arm64)	__asm__ volatile(arm64 ::: "memory")
#else
#define WINDOW_MARK(x86, arm64)	__asm__ volatile(x86 ::: "memory")
#endif

static inline void window_open(void)
{
	WINDOW_MARK("nopl 0x554e4631(%%rax)", "movz xzr, #0x4631");
}

static inline void window_close(void)
{
	WINDOW_MARK("nopl 0x554e4630(%%rax)", "movz xzr, #0x4630");
}

/*
 * Inside a window, mark one operation: the plugin writes what the vCPU ran
 * between the two, op by op, so a phase's instructions per operation get a
 * median and a tail, not just a mean.  The task must stay on one CPU.
 */
static inline void op_begin(void)
{
	WINDOW_MARK("nopl 0x554e4632(%%rax)", "movz xzr, #0x4632");
}

static inline void op_end(void)
{
	WINDOW_MARK("nopl 0x554e4633(%%rax)", "movz xzr, #0x4633");
}

/* --- snapshot.c + tracepoint.c: the counters --- */

struct counter {
	char name[64];
	long long value;
};

enum source {
	SRC_VM_EVENTS,		/* /proc/vmstat event counters */
	SRC_NR_TLB,		/* nr_tlb_* (CONFIG_DEBUG_TLBFLUSH) */
	SRC_IRQ_TLB,
	SRC_IRQ_CAL,
	SRC_TLB_FLUSH_TP,
	SRC_MTHP,
	NR_SOURCES
};

struct snapshot {
	struct counter *v;
	int n, cap;
	unsigned int missing;	/* bit per enum source */
};

/*
 * A phase is also an instruction-count window (window_open() above) when
 * no other phase of this process holds one: phase_begin() prints
 * "UNFLUSH-WINDOW <id>" and the result names the same id, so the lab pairs
 * each result with its window even though windows are numbered per boot
 * and some phases (set-up) report nothing.  Not for phases begun from two
 * threads at once.
 */
struct phase {
	struct snapshot before, after;
	double t0, t1;
	char window[32];	/* "<pid>.<n>", or "" if it had none */
};

void snapshot_add(struct snapshot *s, const char *name, long long value);
const char *source_name(enum source src);
void phase_begin(struct phase *p);
void phase_end(struct phase *p);
void phase_free(struct phase *p);
double phase_elapsed(const struct phase *p);
/* after - before of one counter; 0 if absent. */
long long phase_delta(const struct phase *p, const char *name);
/* Sum of the deltas of every counter whose name starts with @prefix. */
long long phase_delta_prefix(const struct phase *p, const char *prefix);
/*
 * Pages reclaimed in the phase: pgsteal_anon + pgsteal_file.  The
 * pgsteal_kswapd/direct/khugepaged counters count the same pages again.
 */
long long phase_pgsteal(const struct phase *p);
/* True if @name is in both snapshots. */
bool phase_has(const struct phase *p, const char *name);
/*
 * One /proc/vmstat value, -1 if absent.  No stat_refresh (which runs work
 * on every CPU): exact for event counters, approximate for nr_* gauges.
 */
long long vmstat_value(const char *key);

/* A /proc/interrupts row summed over CPUs (-1 if absent), for sampling. */
long long irq_total(const char *row);

/* tlb:tlb_flush by reason, as tlb_flush/<reason>; false if unavailable. */
bool tlb_flush_counts(struct snapshot *s);

/* --- report.c: the UNFLUSH-RESULT / UNFLUSH-COUNTERS lines --- */

struct jbuf {
	char *s;
	size_t len, cap;
};
void jb_printf(struct jbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void jb_string(struct jbuf *b, const char *text);
/* "tlb_shootdown_irqs":..,"counters":{..},"missing":[..] of @p. */
void jb_phase(struct jbuf *b, const struct phase *p);

/* Comma-separated "key":value pairs, for extra fields and "checks". */
struct fields {
	struct jbuf b;
};
void field_int(struct fields *f, const char *key, long long value);
void field_real(struct fields *f, const char *key, double value);
void field_str(struct fields *f, const char *key, const char *value);
/* @json is written as it is: an array or object built by the caller. */
void field_raw(struct fields *f, const char *key, const char *json);
void fields_clear(struct fields *f);

/* One UNFLUSH-RESULT line on stdout; @extra and @checks may be NULL. */
void report_result(const char *experiment, const char *shape, int rep,
		   const struct phase *p, const struct fields *extra,
		   const struct fields *checks);

/* --- mthp.c: anonymous memory backed by folios of one size --- */

/* Enable anonymous mTHP of @folio_kb only (4 = none), restored at exit. */
void mthp_set_only(unsigned long folio_kb);
/*
 * What this kernel lacks to give anonymous folios of @folio_kb (> 4) and
 * count them (transparent hugepages, that size, its stats), for a test to
 * skip on; NULL if nothing.
 */
const char *mthp_missing(unsigned long folio_kb);
/* @bytes of private anonymous read-write memory at an @align boundary */
char *map_aligned(size_t bytes, size_t align);
/*
 * Map @bytes of private anonymous memory, aligned so every folio of
 * @folio_kb fits, MADV_HUGEPAGE it and write one byte to every page.
 * Dies unless the mTHP stats show all of it was faulted in as folios of
 * that size; the evidence goes into @checks.
 */
char *map_anon_folios(size_t bytes, unsigned long folio_kb,
		      struct fields *checks);
/* "64K", "1024K": the name experiments use for a folio size. */
const char *folio_size_name(unsigned long folio_kb);
/* Parse a --size argument into KiB; dies unless it is a power of two >= 4K. */
unsigned long parse_folio_kb(const char *arg);

/* The arguments of an experiment on folios of one size. */
struct folio_args {
	struct run_opts o;
	unsigned long folio_kb;	/* --size, required */
	size_t mem;		/* --mem, else the experiment's default */
	char experiment[64];	/* "<name>/<size>" */
};
void parse_folio_args(int argc, char **argv, const char *name,
		      const char *usage, size_t quick_mem, size_t full_mem,
		      struct folio_args *a);

/* --- memcg.c --- */

/*
 * Create <cgroup2 mount>/<name>-<pid> with memory.max = @limit (0: no
 * limit), mounting cgroup2 and enabling the memory controller if need be;
 * all undone at exit (the cgroup must be empty by then).  Returns the
 * cgroup's directory.
 */
const char *memcg_create(const char *name, size_t limit);
/* Move the calling process into the cgroup memcg_create() made. */
void memcg_join(void);
/* memcg_join(), and at exit every process in the cgroup back to the root. */
void memcg_join_until_exit(void);
/*
 * The calling process back to the root cgroup.  What it charged to the
 * cgroup stays charged there: pages, and the swap entries they went to.
 */
void memcg_leave(void);

/* --- meminfo.c --- */

/* The number in /proc/meminfo for @key (kB or a count), -1 if absent. */
long long meminfo_value(const char *key);
/* Dies with a clear message unless swap with @bytes free is configured. */
void require_swap(size_t bytes);

/* --- reader.c: the stale-translation attack of luf-hazards ------------- */

/*
 * docs/stale-tlb.md.  A reader thread pinned alone on the last usable CPU
 * reads a trial's pages over and over through a mapping at a never-used
 * address; a helper process, forked before the reader starts and pinned with
 * the main thread on the first CPU, takes the pages away from the reader's
 * mm and does what the program asks next.  The reader prints every
 * violation the moment it sees it (UNFLUSH-VIOLATION), since a kernel that
 * lets one happen may not live to print a summary.
 *
 * main:	attack_cpus(), pin_main(), attack_init(), the program's own
 *		set-up, attack_start(), attack_begin(), then per trial:
 *		fresh_va() + map + trial_fault_in(), trial_start(),
 *		helper_command() and the program's own steps, trial_stop();
 *		then attack_end(), attack_fields(), report_result().
 */
#define TRIAL_MAX_PAGES	64
#define PAGE_WORDS	(PAGE_SIZE_4K / 8)
#define CANARY_MAGIC	0xCA9A2700ULL	/* high 32 bits of every canary word */
#define MAX_DETAILS	4		/* violations described in the result */
#define LUF_SWITCH	"/sys/kernel/mm/tlb_batching/luf"

/* A trial's pages: word 0 of page i is index[i], word w > 0 is tag[w]. */
struct page_image {
	uint64_t index[TRIAL_MAX_PAGES];
	uint64_t tag[PAGE_WORDS];
};

/* What the reader may see in a trial, before and after main's "done". */
enum after_done {
	AFTER_SAME,	/* the old data, always */
	AFTER_NEW,	/* before: old or new, word by word; after: new only */
};

/* what the reader saw in a wrong word: see violation_kind() */
enum violation_kind { KIND_OLD, KIND_CANARY, KIND_FOREIGN, NR_VIOLATION_KINDS };

struct violation {
	long trial;
	int page;
	uintptr_t addr;		/* of the word that was wrong */
	int offset;		/* in the page */
	uint64_t expected, seen;
	const char *kind;	/* old, canary or foreign */
};

/* Shared by the reader's process and the helper (MAP_SHARED, before fork). */
struct attack {
	/* main -> reader */
	_Atomic long trial;		/* 0: idle, -1: exit */
	uintptr_t va;
	int npages;
	int after;			/* enum after_done */
	_Atomic int done;
	struct page_image old, new;
	/* reader -> main */
	_Atomic long reader_trial;
	_Atomic long passes;		/* full passes over the current trial */
	_Atomic long violations, bad_reads;
	/* UNFLUSH-VIOLATION lines, by kind */
	_Atomic long printed[NR_VIOLATION_KINDS];
	_Atomic int reader_tid;
	struct violation v[MAX_DETAILS];
	/* main -> helper */
	_Atomic uint32_t cmd;		/* futex word: bumped per command */
	int op;
	long htrial;
	/*
	 * take-away, if set: write reclaim_arg to this memory.reclaim, the
	 * cgroup's proactive reclaim, which may demote (pageout never does)
	 */
	char reclaim[256];
	char reclaim_arg[64];
	/* take-away, if set: write 1 to this compaction trigger (sysfs) */
	char compact[64];
	/* the canary's pages come from canary_node, if canary_bound */
	bool canary_bound;
	int canary_node;
	bool luf_release;		/* release LUF's held pages for the canary */
	uint64_t victim_pfn[TRIAL_MAX_PAGES];
	char path[256];			/* for the program's own helper ops */
	long long length;
	/* helper -> main */
	_Atomic uint32_t finished;	/* futex word: = cmd when finished */
	int taken, reused;
	char error[256];
};
extern struct attack *ctl;

/*
 * MODE [--trials N] [--pages N] [--linger N] [--keep-going] [--quick]
 * [--help], and the program's own "--name VALUE" options: @own_arg(i, VALUE)
 * for each one given, i its index in @own.  Usage errors exit 2.
 */
struct attack_args {
	const char *usage;		/* printed by --help */
	const char *const *modes;	/* NULL-terminated */
	const char *const *own;		/* NULL-terminated, or NULL */
	void (*own_arg)(int i, char *value);
	/* parsed: */
	int mode;			/* index in @modes */
	long trials;			/* 0 if not given */
	int npages;			/* 0 if not given */
	long linger;			/* default 20 */
	bool keep_going, quick;
};
void parse_attack_args(int argc, char **argv, struct attack_args *a);
/* Root and 2 usable CPUs, else exit 1; main on the first, reader on the last. */
void attack_cpus(int *main_cpu, int *reader_cpu);
/* The shared block and /proc/self/pagemap; after pin_main(). */
void attack_init(const char *experiment, int main_cpu, int reader_cpu);
/*
 * Fork the helper (it runs @op(ctl->op) for every helper_command()), then
 * start the reader.  @npages: pages per trial (the canary has 2n + 8).
 */
void attack_start(int npages, void (*op)(int op));
/* The measured phase, with the reader's context switches around it. */
void attack_begin(struct phase *p);
/* End the phase, stop the reader and the helper. */
void attack_end(struct phase *p);
/* Run @op (> 0) in the helper and wait; exit 1 on the helper's error. */
void helper_command(int op);
/* In the helper: make the command fail with this message. */
void helper_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * In the helper: take the trial's pages from main's mm on this CPU
 * (process_madvise(MADV_PAGEOUT), or writes to ctl->reclaim or
 * ctl->compact until every page has left its PFN) and count in
 * ctl->taken the pages whose PTE no longer maps the old PFN.
 */
void helper_take_away(void);
/*
 * In the helper, reuse's trial: take the pages away, release them if
 * LUF holds them (ctl->luf_release: the switch to 0, flush and free on
 * this CPU, and back to 1), and at once fill fresh anonymous pages with a
 * canary: the per-cpu free list is LIFO, so they are the freed pages
 * (ctl->reused counts those whose PFN proves it).
 */
void helper_reuse_trial(void);
/* Words 1..511 of a page, pseudo-random from @seed (splitmix64). */
void random_tag(uint64_t *tag, uint64_t seed);
/* pagemap_read() of main's own address @addr */
uint64_t pagemap_self(uintptr_t addr);

/* Never-used addresses: a reservation cut into slices with a guard between. */
struct fresh_va {
	char *next, *end;
};
void fresh_va_reserve(struct fresh_va *f, long slices, size_t len,
		      size_t align);
/* The next @len bytes at an @align boundary; exit 1 when none are left. */
char *fresh_va(struct fresh_va *f, size_t len, size_t align, long attempts);

/*
 * Fault in @npages pages at @va on this CPU (onto its LRU batch, which the
 * take-away drains), check each reads ctl->old, note its PFN.
 */
void trial_fault_in(uintptr_t va, int npages, long attempt);
/* Trial @t: the reader reads ctl->old at @va once before this returns. */
void trial_start(uintptr_t va, int npages, long t, enum after_done after);
/* Main's "done": from now on the reader must see what ctl->after says. */
void trial_done(void);
/* Until the reader is on @trial and has made @passes full passes over it. */
void wait_reader(long trial, long passes, const char *what);
/* Stop the reader; the trial's addresses PROT_NONE, never mapped again. */
void trial_stop(void);

/*
 * The result fields every attack has: trials, violations, bad_reads,
 * pages_per_trial, linger_passes, cpu_reader, cpu_helper, file and
 * v<i>_trial/_page/_addr/_offset/_expected/_seen/_kind.
 */
void attack_fields(struct fields *extra, long trials, int npages,
		   long linger, const char *file);
/* The reader's involuntary context switches so far. */
long long reader_preemptions(void);
/* checks: reader_voluntary_switches, reader_involuntary_switches */
void attack_switch_checks(struct fields *checks);

#endif
