// SPDX-License-Identifier: GPL-2.0
/*
 * Exact counts of the tlb:tlb_flush tracepoint, by reason.
 *
 * A hist trigger keyed on the reason counts every hit inside the kernel, with
 * no trace buffer that could overflow and drop events.  It is installed once
 * and left in place: a snapshot reads the running totals, a delta subtracts
 * two of them, and every program (and every run of one) shares the trigger.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>

#include "unflush.h"

#define TRIGGER "hist:keys=reason"
/* How the kernel lists the trigger above once installed. */
#define TRIGGER_SHOWN "hist:keys=reason:vals=hitcount:"

/* enum tlb_flush_reason in include/linux/mm_types.h, in order */
static const char *const reasons[] = {
	"task_switch", "remote_shootdown", "local_shootdown",
	"local_mm_shootdown", "remote_send_ipi",
};
#define NR_REASONS (int)(sizeof(reasons) / sizeof(reasons[0]))

static bool find_event(char *dir, size_t len)
{
	static const char *const roots[] = {
		"/sys/kernel/tracing", "/sys/kernel/debug/tracing",
	};

	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
		snprintf(dir, len, "%s/events/tlb/tlb_flush", roots[i]);
		if (path_exists(dir))
			return true;
	}
	return false;
}

static bool install_trigger(const char *dir)
{
	char path[512], text[4096];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/trigger", dir);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	if (strstr(text, TRIGGER_SHOWN))
		return true;
	/* EEXIST: another program installed it since we looked */
	return write_text(path, TRIGGER) || errno == EEXIST;
}

/* Where the hist file is, or NULL if the counts cannot be had here. */
static const char *hist_path(void)
{
	static char path[512];
	static int state;	/* 0: not looked yet, 1: ready, -1: unavailable */
	bool mounted = false;
	char dir[256];

	if (state)
		return state > 0 ? path : NULL;
	state = -1;
	/* a bare initramfs has tracefs unmounted: mount it where it belongs */
	if (!find_event(dir, sizeof(dir)) &&
	    !path_exists("/sys/kernel/tracing/events") &&
	    !mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL))
		mounted = true;
	if (find_event(dir, sizeof(dir)) && install_trigger(dir)) {
		snprintf(path, sizeof(path), "%s/hist", dir);
		state = 1;
	} else if (mounted) {
		/* no use to anyone (no event or no hist triggers): undo */
		umount("/sys/kernel/tracing");
	}
	return state > 0 ? path : NULL;
}

bool tlb_flush_counts(struct snapshot *s)
{
	const char *path = hist_path();
	long long counts[NR_REASONS] = { 0 };
	char *line = NULL, name[64];
	size_t cap = 0;
	bool ours = false;
	long long hits;
	int reason;
	FILE *f;

	if (!path || !(f = fopen(path, "r")))
		return false;
	/* Other triggers on the event print histograms too: read only ours. */
	while (getline(&line, &cap, f) > 0) {
		if (!strncmp(line, "# trigger info:", 15))
			ours = strstr(line, TRIGGER_SHOWN) != NULL;
		if (!ours || sscanf(line, "{ reason: %d } hitcount: %lld",
				    &reason, &hits) != 2)
			continue;
		if (reason >= 0 && reason < NR_REASONS) {
			counts[reason] = hits;
		} else {
			/* a reason newer than this program: keep it visible */
			snprintf(name, sizeof(name), "tlb_flush/reason%d", reason);
			snapshot_add(s, name, hits);
		}
	}
	free(line);
	fclose(f);
	for (int r = 0; r < NR_REASONS; r++) {
		snprintf(name, sizeof(name), "tlb_flush/%s", reasons[r]);
		snapshot_add(s, name, counts[r]);
	}
	return true;
}
