// SPDX-License-Identifier: GPL-2.0
/*
 * md without mdadm: a raid1 array built from two members with md's legacy
 * ioctls and no superblock (what `mdadm --build` makes), so that each
 * member holds the array's data from its sector 0, and the array stopped
 * again.  The array is marked clean: no resync copies one member over the
 * other behind the test's back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/major.h>
#include <linux/raid/md_p.h>
#include <linux/raid/md_u.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "unflush.h"

static int md_open(const char *path, unsigned int minor)
{
	int fd;

	unlink(path);
	if (mknod(path, S_IFBLK | 0600, makedev(MD_MAJOR, minor)))
		die(1, "mknod %s: %s", path, strerror(errno));
	/* the first open makes the array (md_probe) */
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die(1, "cannot open %s (CONFIG_BLK_DEV_MD?): %s", path,
		    strerror(errno));
	return fd;
}

void md_build_raid1(const char *const member[2], unsigned int minor,
		    char *path, size_t len)
{
	mdu_array_info_t info = {
		.level = 1, .nr_disks = 2, .raid_disks = 2, .md_minor = minor,
		.not_persistent = 1, .state = 1 << MD_SB_CLEAN,
	};
	unsigned long long sectors = dev_sectors(member[0]);
	int fd;

	snprintf(path, len, "/dev/md%u", minor);
	if (dev_sectors(member[1]) < sectors)
		sectors = dev_sectors(member[1]);
	info.size = sectors / 2;	/* KiB */
	fd = md_open(path, minor);
	if (ioctl(fd, SET_ARRAY_INFO, &info))
		die(1, "md SET_ARRAY_INFO of %s (CONFIG_MD_RAID1?): %s", path,
		    strerror(errno));
	for (int i = 0; i < 2; i++) {
		mdu_disk_info_t disk = {
			.number = i, .raid_disk = i,
			.state = 1 << MD_DISK_ACTIVE | 1 << MD_DISK_SYNC,
		};
		struct stat st;

		if (stat(member[i], &st) || !S_ISBLK(st.st_mode))
			die(1, "%s is not a block device", member[i]);
		disk.major = major(st.st_rdev);
		disk.minor = minor(st.st_rdev);
		if (ioctl(fd, ADD_NEW_DISK, &disk))
			die(1, "md ADD_NEW_DISK %s to %s: %s", member[i], path,
			    strerror(errno));
	}
	if (ioctl(fd, RUN_ARRAY, 0))
		die(1, "md RUN_ARRAY of %s: %s", path, strerror(errno));
	close(fd);
}

void md_stop(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0 || ioctl(fd, STOP_ARRAY, 0))
		fprintf(stderr, "cannot stop %s: %s\n", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}
