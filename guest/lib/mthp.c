// SPDX-License-Identifier: GPL-2.0
/*
 * Anonymous memory backed by folios of exactly one size.
 *
 * A folio-size result is worthless if the folios were not that size: an early
 * lab run "measured" mTHP with madvise() compiled out and never saw a large
 * folio.  So the set-up is verified from the kernel's own per-size stats, and
 * a shortfall is an error, not a footnote.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "unflush.h"

#define THP_DIR "/sys/kernel/mm/transparent_hugepage"

void mthp_set_only(unsigned long folio_kb)
{
	char path[512], cur[64];
	bool per_size = false, found = false;
	struct dirent *d;
	unsigned long kb;
	DIR *dir;

	if (!setting_read(THP_DIR "/enabled", cur, sizeof(cur)))
		die(1, "cannot read " THP_DIR "/enabled: this kernel has no transparent hugepages (CONFIG_TRANSPARENT_HUGEPAGE)");
	dir = opendir(THP_DIR);
	while (dir && (d = readdir(dir))) {
		if (sscanf(d->d_name, "hugepages-%lukB", &kb) != 1)
			continue;
		snprintf(path, sizeof(path), THP_DIR "/%s/enabled", d->d_name);
		/* some sizes exist for the page cache only, with no switch */
		if (!path_exists(path))
			continue;
		setting_write(path, kb == folio_kb ? "always" : "never");
		per_size = true;
		found |= kb == folio_kb;
	}
	if (dir)
		closedir(dir);
	/*
	 * The global switch still gates "inherit" and old kernels; an explicit
	 * per-size "always" wins over it, but "never" would confuse whoever
	 * reads the settings, so MADV_HUGEPAGE regions are let through.
	 */
	if (folio_kb == 4 && !per_size)
		setting_write(THP_DIR "/enabled", "never");
	else if (!strcmp(cur, "never"))
		setting_write(THP_DIR "/enabled", "madvise");
	if (folio_kb != 4 && !found)
		die(1, "this kernel has no %luK anonymous folios (no " THP_DIR "/hugepages-%lukB/enabled); pick a size listed there",
		    folio_kb, folio_kb);
}

const char *mthp_missing(unsigned long folio_kb)
{
	static char why[256];
	char dir[128], path[160];

	snprintf(dir, sizeof(dir), THP_DIR "/hugepages-%lukB", folio_kb);
	if (!path_exists(THP_DIR "/enabled"))
		return "this kernel has no transparent hugepages (no " THP_DIR "/enabled: CONFIG_TRANSPARENT_HUGEPAGE)";
	snprintf(path, sizeof(path), "%s/enabled", dir);
	if (!path_exists(path)) {
		snprintf(why, sizeof(why), "this kernel has no %luK anonymous folios (no %s)",
			 folio_kb, path);
		return why;
	}
	snprintf(path, sizeof(path), "%s/stats", dir);
	if (!path_exists(path)) {
		snprintf(why, sizeof(why), "this kernel does not count %luK folios (no %s): their use could not be verified",
			 folio_kb, path);
		return why;
	}
	return NULL;
}

/* Large folios of any size faulted in during @p (sum over the sizes). */
static long long large_folio_faults(const struct phase *p)
{
	const char *suffix = "/anon_fault_alloc";
	long long sum = 0;

	for (int i = 0; i < p->after.n; i++) {
		const char *name = p->after.v[i].name;
		size_t len = strlen(name);

		if (!strncmp(name, "mthp/", 5) && len > strlen(suffix) &&
		    !strcmp(name + len - strlen(suffix), suffix))
			sum += phase_delta(p, name);
	}
	return sum;
}

char *map_aligned(size_t bytes, size_t align)
{
	char *raw, *p;

	raw = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		die(1, "mmap of %zu bytes failed: %s; use a smaller --mem",
		    bytes, strerror(errno));
	p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
	if (p > raw)
		munmap(raw, p - raw);
	munmap(p + bytes, raw + align - p);
	return p;
}

char *map_anon_folios(size_t bytes, unsigned long folio_kb,
		      struct fields *checks)
{
	size_t folio = folio_kb * KiB;
	/* the fault path only uses a folio whose aligned range fits the VMA */
	size_t align = folio > 2 * MiB ? folio : 2 * MiB;
	long long expected = folio_kb == 4 ? 0 : (long long)(bytes / folio);
	long long got, fallback = 0;
	struct phase setup = { 0 };
	char name[64];
	char *p;

	if (bytes % folio)
		usage_error("--mem must be a multiple of the folio size %s",
			    folio_size_name(folio_kb));
	p = map_aligned(bytes, align);
	if (madvise(p, bytes, MADV_HUGEPAGE))
		die(1, "madvise(MADV_HUGEPAGE): %s (kernel needs CONFIG_TRANSPARENT_HUGEPAGE and CONFIG_ADVISE_SYSCALLS)",
		    strerror(errno));
	phase_begin(&setup);
	/* non-zero bytes: zero-filled pages skip swap I/O since 6.12 */
	for (size_t off = 0; off < bytes; off += PAGE_SIZE_4K)
		p[off] = 1 + (off / PAGE_SIZE_4K) % 127;
	phase_end(&setup);
	if (setup.after.missing & (1u << SRC_MTHP))
		die(1, "cannot verify the folio size: this kernel has no mTHP stats (" THP_DIR "/hugepages-*/stats)");
	if (folio_kb == 4) {
		got = large_folio_faults(&setup);
		field_int(checks, "mthp_alloc_any", got);
	} else {
		snprintf(name, sizeof(name), "mthp/%lukB/anon_fault_alloc", folio_kb);
		got = phase_delta(&setup, name);
		snprintf(name, sizeof(name), "mthp/%lukB/anon_fault_fallback", folio_kb);
		fallback = phase_delta(&setup, name);
		snprintf(name, sizeof(name), "mthp_alloc_%lukB", folio_kb);
		field_int(checks, name, got);
		snprintf(name, sizeof(name), "mthp_fallback_%lukB", folio_kb);
		field_int(checks, name, fallback);
	}
	field_int(checks, "expected", expected);
	phase_free(&setup);

	if (folio_kb == 4 && got)
		die(1, "%lld large folios were faulted in where only 4K pages were asked for; something else changed the mTHP settings",
		    got);
	/* >=: other processes may fault folios of this size meanwhile */
	if (got < expected)
		die(1, "only %lld of %lld folios were %s (mTHP fallback: %lld); free or compact memory (echo 1 > /proc/sys/vm/compact_memory) or use a smaller --mem",
		    got, expected, folio_size_name(folio_kb), fallback);
	return p;
}

const char *folio_size_name(unsigned long folio_kb)
{
	static char name[32];

	snprintf(name, sizeof(name), "%luK", folio_kb);
	return name;
}

void parse_folio_args(int argc, char **argv, const char *name,
		      const char *usage, size_t quick_mem, size_t full_mem,
		      struct folio_args *a)
{
	struct own_arg args[] = { { .name = "size" }, { .name = "mem" } };

	run_opts_init(&a->o, usage, false);
	parse_run_args(argc, argv, &a->o, args, 2);
	if (!args[0].value)
		usage_error("--size is required, e.g. --size 64K");
	a->folio_kb = parse_folio_kb(args[0].value);
	a->mem = arg_size(&args[1], a->o.quick ? quick_mem : full_mem);
	snprintf(a->experiment, sizeof(a->experiment), "%s/%s", name,
		 folio_size_name(a->folio_kb));
}

unsigned long parse_folio_kb(const char *arg)
{
	unsigned long long bytes = parse_size("--size", arg);

	if (bytes < PAGE_SIZE_4K || (bytes & (bytes - 1)))
		usage_error("bad --size '%s': give a power of two from 4K, like 16K, 64K or 1024K",
			    arg);
	return bytes / KiB;
}
