// SPDX-License-Identifier: GPL-2.0
/*
 * Snapshots of every counter, and their deltas over a measured phase.
 *
 * /proc/vmstat is read whole rather than for a list of keys: the patched
 * kernel adds counters of its own, and they must show up in the results
 * without anyone touching this file.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unflush.h"

#define MTHP_DIR "/sys/kernel/mm/transparent_hugepage"

static const char *const source_names[NR_SOURCES] = {
	[SRC_VM_EVENTS]    = "vm events (CONFIG_VM_EVENT_COUNTERS)",
	[SRC_NR_TLB]       = "nr_tlb_* (CONFIG_DEBUG_TLBFLUSH)",
	[SRC_IRQ_TLB]      = "irq/TLB (/proc/interrupts)",
	[SRC_IRQ_CAL]      = "irq/CAL (/proc/interrupts)",
	[SRC_TLB_FLUSH_TP] = "tlb_flush tracepoint",
	[SRC_MTHP]         = "mTHP stats",
};

/* Rows of /proc/interrupts worth counting: shootdowns, and the
 * function-call IPIs that kernel-range flushes (HVO) are sent as. */
static const struct {
	const char *row;
	enum source src;
} irq_rows[] = {
	{ "TLB", SRC_IRQ_TLB },
	{ "CAL", SRC_IRQ_CAL },
};
#define NR_IRQ_ROWS (sizeof(irq_rows) / sizeof(irq_rows[0]))

const char *source_name(enum source src)
{
	return source_names[src];
}

void snapshot_add(struct snapshot *s, const char *name, long long value)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 512;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			die(1, "out of memory");
	}
	snprintf(s->v[s->n].name, sizeof(s->v[0].name), "%s", name);
	s->v[s->n++].value = value;
}

static void read_vmstat(struct snapshot *s)
{
	FILE *f = fopen("/proc/vmstat", "r");
	char key[64];
	long long v;
	bool events = false, nr_tlb = false;

	/*
	 * Event counters are summed over the CPUs when read, but node and zone
	 * gauges (nr_*) lag by per-cpu deltas of up to ~100 pages each: fold
	 * them first, so their deltas are exact too.  Needs root; without it
	 * the gauges stay approximate.
	 */
	write_text("/proc/sys/vm/stat_refresh", "1");
	if (!f)
		die(1, "cannot open /proc/vmstat: is /proc mounted?");
	while (fscanf(f, "%63s %lld", key, &v) == 2) {
		snapshot_add(s, key, v);
		events |= !strcmp(key, "pgfault");
		/*
		 * Not any nr_tlb_* key: LUF's own counters are there without
		 * DEBUG_TLBFLUSH.  With it, x86 counts shootdowns sent, and
		 * the series counts the flushes by their source on every
		 * architecture (on arm64 the series' kernels have only those).
		 */
		nr_tlb |= !strcmp(key, "nr_tlb_remote_flush") ||
			  !strcmp(key, "nr_tlb_flush_mmu_gather");
	}
	fclose(f);
	if (!events)
		s->missing |= 1u << SRC_VM_EVENTS;
	if (!nr_tlb)
		s->missing |= 1u << SRC_NR_TLB;
}

long long vmstat_value(const char *key)
{
	FILE *f = fopen("/proc/vmstat", "r");
	long long v, value = -1;
	char name[64];

	if (!f)
		die(1, "cannot open /proc/vmstat: is /proc mounted?");
	while (fscanf(f, "%63s %lld", name, &v) == 2)
		if (!strcmp(name, key)) {
			value = v;
			break;
		}
	fclose(f);
	return value;
}

static void read_interrupts(struct snapshot *s)
{
	FILE *f = fopen("/proc/interrupts", "r");
	int cpu_ids[MAX_CPUS], ncols = 0;
	char *line = NULL, *p, *end, name[96];
	bool found[NR_IRQ_ROWS] = { false };
	size_t cap = 0;

	if (!f || getline(&line, &cap, f) < 0)
		die(1, "cannot read /proc/interrupts: is /proc mounted?");
	/* header: one "CPUn" per column; offline CPUs have no column */
	for (p = line; (p = strstr(p, "CPU")) && ncols < MAX_CPUS; p = end)
		cpu_ids[ncols++] = strtol(p + 3, &end, 10);
	while (getline(&line, &cap, f) > 0) {
		p = line + strspn(line, " ");
		for (size_t r = 0; r < NR_IRQ_ROWS; r++) {
			const char *row = irq_rows[r].row;
			size_t len = strlen(row);
			long long sum = 0;

			if (strncmp(p, row, len) || p[len] != ':')
				continue;
			p += len + 1;
			for (int c = 0; c < ncols; c++) {
				long long v = strtoll(p, &end, 10);

				p = end;
				sum += v;
				snprintf(name, sizeof(name), "irq/%s/cpu%d", row,
					 cpu_ids[c]);
				snapshot_add(s, name, v);
			}
			snprintf(name, sizeof(name), "irq/%s", row);
			snapshot_add(s, name, sum);
			found[r] = true;
			break;
		}
	}
	free(line);
	fclose(f);
	for (size_t r = 0; r < NR_IRQ_ROWS; r++)
		if (!found[r])
			s->missing |= 1u << irq_rows[r].src;
}

/*
 * One row of /proc/interrupts summed over the CPUs, or -1 if the kernel has
 * no such row: cheap enough to sample while a phase runs.
 */
long long irq_total(const char *row)
{
	struct snapshot s = { 0 };
	char name[96];
	long long v = -1;

	read_interrupts(&s);
	snprintf(name, sizeof(name), "irq/%s", row);
	for (int i = 0; i < s.n; i++)
		if (!strcmp(s.v[i].name, name))
			v = s.v[i].value;
	free(s.v);
	return v;
}

static void read_mthp(struct snapshot *s)
{
	DIR *top = opendir(MTHP_DIR), *stats;
	struct dirent *d, *e;
	char path[640], name[320];
	unsigned long kb;
	long long v;
	bool found = false;

	while (top && (d = readdir(top))) {
		if (sscanf(d->d_name, "hugepages-%lukB", &kb) != 1)
			continue;
		snprintf(path, sizeof(path), MTHP_DIR "/%s/stats", d->d_name);
		stats = opendir(path);
		while (stats && (e = readdir(stats))) {
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), MTHP_DIR "/%s/stats/%s",
				 d->d_name, e->d_name);
			if (!read_number(path, &v))
				continue;
			snprintf(name, sizeof(name), "mthp/%lukB/%s", kb,
				 e->d_name);
			snapshot_add(s, name, v);
			found = true;
		}
		if (stats)
			closedir(stats);
	}
	if (top)
		closedir(top);
	if (!found)
		s->missing |= 1u << SRC_MTHP;
}

static void note_missing(unsigned int missing)
{
	static unsigned int noted;

	for (int i = 0; i < NR_SOURCES; i++) {
		if (!(missing & ~noted & (1u << i)))
			continue;
		fprintf(stderr, "%s: note: %s unavailable on this kernel, not counted\n",
			program_invocation_short_name, source_names[i]);
		noted |= 1u << i;
	}
}

static void read_tracepoint(struct snapshot *s)
{
	if (!tlb_flush_counts(s))
		s->missing |= 1u << SRC_TLB_FLUSH_TP;
}

/*
 * The sources are read in opposite orders before and after the phase, so
 * the ones that matter most (the interrupt rows, then the tracepoint) sit
 * closest to the measured work and pick up least of the snapshot's own
 * activity.
 */
static void snapshot_take(struct snapshot *s, bool after)
{
	static void (*const readers[])(struct snapshot *) = {
		read_mthp, read_vmstat, read_tracepoint, read_interrupts,
	};
	const int n = sizeof(readers) / sizeof(readers[0]);

	s->n = 0;
	s->missing = 0;
	for (int i = 0; i < n; i++)
		readers[after ? n - 1 - i : i](s);
	note_missing(s->missing);
}

static bool window_taken;	/* by a phase of this process */

static void phase_window_open(struct phase *p)
{
	static int n;

	p->window[0] = '\0';
	if (window_taken)
		return;
	window_taken = true;
	snprintf(p->window, sizeof(p->window), "%d.%d", (int)getpid(), n++);
	/* flushed now: a child forked later must not print it again */
	printf("UNFLUSH-WINDOW %s\n", p->window);
	fflush(stdout);
	window_open();
}

void phase_begin(struct phase *p)
{
	snapshot_take(&p->before, false);
	phase_window_open(p);
	p->t0 = now_s();
}

void phase_end(struct phase *p)
{
	p->t1 = now_s();
	if (p->window[0]) {
		window_close();
		window_taken = false;
	}
	snapshot_take(&p->after, true);
}

double phase_elapsed(const struct phase *p)
{
	return p->t1 - p->t0;
}

static const struct counter *find(const struct snapshot *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->v[i].name, name))
			return &s->v[i];
	return NULL;
}

bool phase_has(const struct phase *p, const char *name)
{
	return find(&p->before, name) && find(&p->after, name);
}

long long phase_delta(const struct phase *p, const char *name)
{
	const struct counter *b = find(&p->before, name);
	const struct counter *a = find(&p->after, name);

	/* A hist entry appears with its first hit: absent before means 0. */
	return a ? a->value - (b ? b->value : 0) : 0;
}

long long phase_delta_prefix(const struct phase *p, const char *prefix)
{
	long long sum = 0;

	for (int i = 0; i < p->after.n; i++)
		if (!strncmp(p->after.v[i].name, prefix, strlen(prefix)))
			sum += phase_delta(p, p->after.v[i].name);
	return sum;
}

long long phase_pgsteal(const struct phase *p)
{
	return phase_delta(p, "pgsteal_anon") + phase_delta(p, "pgsteal_file");
}

void phase_free(struct phase *p)
{
	free(p->before.v);
	free(p->after.v);
	memset(p, 0, sizeof(*p));
}
