// SPDX-License-Identifier: GPL-2.0
/*
 * Block-device stacks in the guest, with no tools but the kernel's ioctls:
 * loop devices over image files (partitioned or not), nodes for the block
 * devices the kernel makes, and an MS-DOS partition table.  With lib/dm.c
 * they build the stacks whose blocks a test changes below a filesystem.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/blkpg.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "unflush.h"

int misc_open(const char *path, unsigned int minor, const char *option)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT) {
		/* no devtmpfs node: the misc device's numbers are fixed */
		if (mknod(path, S_IFCHR | 0600, makedev(10, minor)))
			die(1, "cannot make %s: %s", path, strerror(errno));
		fd = open(path, O_RDWR | O_CLOEXEC);
	}
	if (fd < 0)
		die(1, "cannot open %s (%s?): %s", path, option,
		    strerror(errno));
	return fd;
}

void blk_node(const char *sysname, char *path, size_t len)
{
	char attr[96];
	FILE *f;
	unsigned int maj, min;
	struct stat st;

	snprintf(path, len, "/dev/%s", sysname);
	snprintf(attr, sizeof(attr), "/sys/class/block/%s/dev", sysname);
	f = fopen(attr, "r");
	if (!f || fscanf(f, "%u:%u", &maj, &min) != 2)
		die(1, "no block device %s (%s)", sysname, attr);
	fclose(f);
	if (!stat(path, &st) && S_ISBLK(st.st_mode) &&
	    st.st_rdev == makedev(maj, min))
		return;
	unlink(path);
	if (mknod(path, S_IFBLK | 0600, makedev(maj, min)))
		die(1, "mknod %s (%u:%u): %s", path, maj, min, strerror(errno));
}

void loop_attach(const char *image, bool read_only, bool partscan,
		 char *path, size_t len)
{
	struct loop_config cfg = { 0 };
	char name[32];
	int ctl, nr, fd, img;

	ctl = misc_open("/dev/loop-control", 237, "CONFIG_BLK_DEV_LOOP");
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	close(ctl);
	if (nr < 0)
		die(1, "no free loop device: %s", strerror(errno));
	snprintf(name, sizeof(name), "loop%d", nr);
	blk_node(name, path, len);
	img = open(image, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (img < 0)
		die(1, "cannot open %s: %s", image, strerror(errno));
	/*
	 * Opened for the ioctl alone (for writing too, or the kernel makes
	 * the device read-only), and closed before anything mounts it: no
	 * writer of the device but its filesystem since the mount.
	 */
	fd = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (fd < 0)
		die(1, "cannot open %s: %s", path, strerror(errno));
	cfg.fd = img;
	cfg.info.lo_flags = (read_only ? LO_FLAGS_READ_ONLY : 0) |
			    (partscan ? LO_FLAGS_PARTSCAN : 0);
	if (ioctl(fd, LOOP_CONFIGURE, &cfg))
		die(1, "LOOP_CONFIGURE of %s over %s: %s", path, image,
		    strerror(errno));
	close(img);
	close(fd);
}

/* Open @loop read-only, for an ioctl that changes it. */
static int loop_open(const char *loop)
{
	int fd = open(loop, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		die(1, "cannot open %s: %s", loop, strerror(errno));
	return fd;
}

void loop_change_fd(const char *loop, const char *image)
{
	int fd = loop_open(loop), img = open(image, O_RDONLY | O_CLOEXEC);

	if (img < 0)
		die(1, "cannot open %s: %s", image, strerror(errno));
	if (ioctl(fd, LOOP_CHANGE_FD, img))
		die(1, "LOOP_CHANGE_FD of %s to %s: %s", loop, image,
		    strerror(errno));
	close(img);
	close(fd);
}

void loop_set_offset(const char *loop, unsigned long long offset,
		     unsigned long long sizelimit)
{
	struct loop_info64 info;
	int fd = loop_open(loop);

	/* what the device has, its read-only flag too, but for the window */
	if (ioctl(fd, LOOP_GET_STATUS64, &info))
		die(1, "LOOP_GET_STATUS64 of %s: %s", loop, strerror(errno));
	info.lo_offset = offset;
	info.lo_sizelimit = sizelimit;
	if (ioctl(fd, LOOP_SET_STATUS64, &info))
		die(1, "LOOP_SET_STATUS64 of %s (offset %llu, size limit %llu): %s",
		    loop, offset, sizelimit, strerror(errno));
	close(fd);
}

void loop_detach(const char *loop)
{
	int fd = loop_open(loop);

	if (ioctl(fd, LOOP_CLR_FD))
		fprintf(stderr, "LOOP_CLR_FD of %s: %s\n", loop, strerror(errno));
	close(fd);
}

void mbr_write(const char *dev, unsigned int start, unsigned int sectors)
{
	unsigned char sector[512];
	unsigned char *e = sector + 446;	/* the first of four entries */
	int fd = open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0 || pread(fd, sector, sizeof(sector), 0) != sizeof(sector))
		die(1, "cannot read sector 0 of %s: %s", dev, strerror(errno));
	memset(e, 0, 64);
	e[4] = 0x83;				/* Linux */
	memcpy(e + 8, &start, 4);		/* little-endian, as x86 and arm64 */
	memcpy(e + 12, &sectors, 4);
	sector[510] = 0x55;
	sector[511] = 0xaa;
	if (pwrite(fd, sector, sizeof(sector), 0) != sizeof(sector) ||
	    fsync(fd))
		die(1, "cannot write the partition table of %s: %s", dev,
		    strerror(errno));
	if (ioctl(fd, BLKRRPART))
		die(1, "BLKRRPART on %s: %s", dev, strerror(errno));
	close(fd);
}

void part_change(const char *dev, int op, int partno,
		 unsigned long long start, unsigned long long sectors)
{
	struct blkpg_partition part = {
		.start = start * 512, .length = sectors * 512, .pno = partno };
	struct blkpg_ioctl_arg arg = {
		.op = op, .datalen = sizeof(part), .data = &part };
	/*
	 * Read-only: BLKPG needs CAP_SYS_ADMIN, not a writer, and a writer
	 * of a mounted whole disk would keep its files out of LUF (R4)
	 */
	int fd = open(dev, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || ioctl(fd, BLKPG, &arg))
		die(1, "BLKPG %s of partition %d of %s (sectors %llu+%llu): %s",
		    op == BLKPG_ADD_PARTITION ? "add" : "resize", partno, dev,
		    start, sectors, strerror(errno));
	close(fd);
}

unsigned long long dev_sectors(const char *dev)
{
	unsigned long long bytes;
	int fd = open(dev, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || ioctl(fd, BLKGETSIZE64, &bytes))
		die(1, "cannot read the size of %s: %s", dev, strerror(errno));
	close(fd);
	return bytes / 512;
}

const char *dev_numbers(const char *dev)
{
	static char text[24];
	struct stat st;

	if (stat(dev, &st) || !S_ISBLK(st.st_mode))
		die(1, "%s is not a block device: %s", dev, strerror(errno));
	snprintf(text, sizeof(text), "%u:%u", major(st.st_rdev),
		 minor(st.st_rdev));
	return text;
}
