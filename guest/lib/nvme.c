// SPDX-License-Identifier: GPL-2.0
/*
 * NVMe passthrough: the namespace of the guest's NVMe disk (QEMU's, which
 * the lab attaches on request: VMShape.nvme) and I/O commands sent to it
 * with NVME_IOCTL_IO_CMD, through its block device or its generic
 * character device (/dev/ngXnY), past the block layer's file checks: with
 * CAP_SYS_ADMIN, even on a block device opened read-only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <glob.h>
#include <linux/nvme_ioctl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "unflush.h"

#define NVME_CMD_WRITE		0x01
#define NVME_CMD_WRITE_ZEROES	0x08
#define NVME_SECTOR		512

void nvme_find(struct nvme_disk *d)
{
	char attr[128], sysname[32];
	unsigned int maj, min;
	glob_t g;
	FILE *f;

	memset(d, 0, sizeof(*d));
	if (glob("/sys/class/nvme-generic/ng*n1", 0, NULL, &g) || !g.gl_pathc)
		die(1, "no NVMe namespace with a generic node (/sys/class/nvme-generic): the guest needs an NVMe disk (the lab's VMShape.nvme) and CONFIG_BLK_DEV_NVME");
	/* ngXnY is the generic node of nvmeXnY */
	snprintf(sysname, sizeof(sysname), "nvme%s",
		 strrchr(g.gl_pathv[0], '/') + 3);
	snprintf(attr, sizeof(attr), "%s/dev", g.gl_pathv[0]);
	snprintf(d->generic, sizeof(d->generic), "/dev/%s",
		 strrchr(g.gl_pathv[0], '/') + 1);
	globfree(&g);
	blk_node(sysname, d->disk, sizeof(d->disk));
	f = fopen(attr, "r");
	if (!f || fscanf(f, "%u:%u", &maj, &min) != 2)
		die(1, "no character device in %s", attr);
	fclose(f);
	unlink(d->generic);
	if (mknod(d->generic, S_IFCHR | 0600, makedev(maj, min)))
		die(1, "mknod %s: %s", d->generic, strerror(errno));
}

int nvme_write(int fd, bool zeroes, off_t at, const void *buf, size_t len)
{
	struct nvme_passthru_cmd cmd = {
		.opcode = zeroes ? NVME_CMD_WRITE_ZEROES : NVME_CMD_WRITE,
		.cdw10 = (uint32_t)(at / NVME_SECTOR),
		.cdw11 = (uint32_t)((uint64_t)(at / NVME_SECTOR) >> 32),
		.cdw12 = len / NVME_SECTOR - 1,	/* blocks, less one */
		.addr = zeroes ? 0 : (uintptr_t)buf,
		.data_len = zeroes ? 0 : len,
	};
	int nsid = ioctl(fd, NVME_IOCTL_ID), err;

	if (nsid <= 0 || at % NVME_SECTOR || len % NVME_SECTOR) {
		errno = nsid <= 0 ? errno : EINVAL;
		return -1;
	}
	cmd.nsid = nsid;
	err = ioctl(fd, NVME_IOCTL_IO_CMD, &cmd);
	if (err > 0)	/* an NVMe status */
		errno = EIO;
	return err ? -1 : 0;
}
