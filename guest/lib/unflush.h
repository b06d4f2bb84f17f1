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

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define PAGE_SIZE_4K	4096UL
#define KiB		((size_t)1024)
#define MiB		(1024 * KiB)
#define GiB		(1024 * MiB)
#define MAX_CPUS	1024

/* --- util.c: errors, time, argument parsing --- */

/* "<prog>: <message>" on stderr, then exit(code): 2 for usage, 1 otherwise. */
void die(int code, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
void usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
double now_s(void);
/* "64K", "1G", "4096" -> bytes; dies with a usage error naming @opt. */
unsigned long long parse_size(const char *opt, const char *arg);
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
/* Parse a kernel list ("0-3,8"); false on malformed input. */
bool parse_list(const char *text, bool *set, int max);

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

struct phase {
	struct snapshot before, after;
	double t0, t1;
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
 * Create <cgroup2 mount>/<name>-<pid> with memory.max = @limit, mounting
 * cgroup2 and enabling the memory controller if need be; all undone at exit
 * (the cgroup must be empty by then).  Returns the cgroup's directory.
 */
const char *memcg_create(const char *name, size_t limit);
/* Move the calling process into the cgroup memcg_create() made. */
void memcg_join(void);

/* --- meminfo.c --- */

/* The number in /proc/meminfo for @key (kB or a count), -1 if absent. */
long long meminfo_value(const char *key);
/* Dies with a clear message unless swap with @bytes free is configured. */
void require_swap(size_t bytes);

#endif
