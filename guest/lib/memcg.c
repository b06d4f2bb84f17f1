// SPDX-License-Identifier: GPL-2.0
/*
 * A cgroup v2 memory cgroup of the experiment's own, removed at exit.
 *
 * A memory limit is the one way to put a workload under reclaim pressure in
 * a VM of a few GiB without starving everything else in it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mntent.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unflush.h"

static char mount_dir[256];
static char cgroup_dir[512];

static void remove_cgroup(void)
{
	if (rmdir(cgroup_dir) && errno != ENOENT)
		fprintf(stderr, "%s: cannot remove %s: %s\n",
			program_invocation_short_name, cgroup_dir,
			strerror(errno));
}

static void disable_memory_controller(void)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", mount_dir);
	/* best effort: it stays on if another cgroup came to use it */
	write_text(path, "-memory");
}

static void unmount_cgroup2(void)
{
	umount(mount_dir);
}

static bool find_cgroup2(void)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *m;

	while (f && (m = getmntent(f))) {
		if (!strcmp(m->mnt_type, "cgroup2")) {
			snprintf(mount_dir, sizeof(mount_dir), "%s", m->mnt_dir);
			break;
		}
	}
	if (f)
		endmntent(f);
	return mount_dir[0];
}

static bool is_mount_point(const char *dir)
{
	struct stat here, parent;
	char up[300];

	snprintf(up, sizeof(up), "%s/..", dir);
	return !stat(dir, &here) && !stat(up, &parent) &&
	       here.st_dev != parent.st_dev;
}

const char *memcg_create(const char *name, size_t limit)
{
	char path[600], text[512];

	if (!find_cgroup2()) {
		/* a bare initramfs: mount it, unless v1 hierarchies live there */
		if (is_mount_point("/sys/fs/cgroup") ||
		    mount("none", "/sys/fs/cgroup", "cgroup2", 0, NULL))
			die(1, "no cgroup2 hierarchy, and none can be mounted at /sys/fs/cgroup (%s); this machine seems to use cgroup v1",
			    strerror(errno));
		snprintf(mount_dir, sizeof(mount_dir), "/sys/fs/cgroup");
		cleanup_push_fn(unmount_cgroup2);
	}
	snprintf(path, sizeof(path), "%s/cgroup.controllers", mount_dir);
	if (!setting_read(path, text, sizeof(text)) || !strstr(text, "memory"))
		die(1, "the memory controller is not available in the cgroup2 hierarchy at %s (bound to cgroup v1, or CONFIG_MEMCG off)",
		    mount_dir);
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", mount_dir);
	if (!setting_read(path, text, sizeof(text)))
		die(1, "cannot read %s: %s", path, strerror(errno));
	if (!strstr(text, "memory")) {
		if (!write_text(path, "+memory"))
			die(1, "cannot enable the memory controller in %s: %s",
			    path, strerror(errno));
		cleanup_push_fn(disable_memory_controller);
	}
	snprintf(cgroup_dir, sizeof(cgroup_dir), "%s/%s-%d", mount_dir, name,
		 getpid());
	if (mkdir(cgroup_dir, 0755))
		die(1, "cannot create cgroup %s: %s", cgroup_dir,
		    strerror(errno));
	cleanup_push_fn(remove_cgroup);
	if (!limit)
		return cgroup_dir;
	snprintf(path, sizeof(path), "%s/memory.max", cgroup_dir);
	snprintf(text, sizeof(text), "%zu", limit);
	if (!write_text(path, text))
		die(1, "cannot set %s to %s: %s", path, text, strerror(errno));
	return cgroup_dir;
}

/*
 * Every process still in the cgroup back to the root, so that its removal
 * (pushed earlier, so run later) finds it empty: on an early exit a
 * program's children may still be in it.
 */
static void leave_cgroup(void)
{
	char path[600], root[300];
	FILE *f;
	int pid;

	snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup_dir);
	snprintf(root, sizeof(root), "%s/cgroup.procs", mount_dir);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fscanf(f, "%d", &pid) == 1) {
		char text[16];

		snprintf(text, sizeof(text), "%d", pid);
		write_text(root, text);	/* best effort: it may have exited */
	}
	fclose(f);
}

void memcg_join_until_exit(void)
{
	memcg_join();
	cleanup_push_fn(leave_cgroup);
}

void memcg_join(void)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup_dir);
	/* "0" is the writer itself */
	if (!write_text(path, "0"))
		die(1, "cannot join cgroup %s: %s", cgroup_dir, strerror(errno));
}

void memcg_leave(void)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/cgroup.procs", mount_dir);
	if (!write_text(path, "0"))
		die(1, "cannot leave cgroup %s for the root: %s", cgroup_dir,
		    strerror(errno));
}
