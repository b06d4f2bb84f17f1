// SPDX-License-Identifier: GPL-2.0
/*
 * NVMe passthrough: the namespace of the guest's NVMe disk (QEMU's, which
 * the lab attaches on request: VMShape.nvme) and I/O commands sent to it
 * with NVME_IOCTL_IO_CMD, through its block device or its generic
 * character device (/dev/ngXnY), past the block layer's file checks: with
 * CAP_SYS_ADMIN, even on a block device opened read-only.  The generic
 * node also takes them from io_uring (IORING_OP_URING_CMD), which needs
 * a ring of 128-byte entries; liburing is not in the guest, so the ring
 * is set up here with the raw system calls, one ring per command.  On a
 * zoned namespace (ZNS), Zone Management Send resets a zone: its blocks
 * read as zeroes, and it takes writes again from its start only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <glob.h>
#include <linux/io_uring.h>
#include <linux/nvme_ioctl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "unflush.h"

#define NVME_CMD_WRITE		0x01
#define NVME_CMD_WRITE_ZEROES	0x08
#define NVME_CMD_ZONE_MGMT_SEND	0x79
#define NVME_ZONE_RESET		0x04	/* the send's action, cdw13 */
#define NVME_SECTOR		512

/* Whether block device @sysname is zoned: its queue's zoned model. */
static bool blk_zoned(const char *sysname)
{
	char attr[96], model[32] = "";
	FILE *f;

	snprintf(attr, sizeof(attr), "/sys/class/block/%s/queue/zoned",
		 sysname);
	f = fopen(attr, "r");
	if (!f)
		return false;
	if (!fgets(model, sizeof(model), f))
		model[0] = 0;
	fclose(f);
	return strncmp(model, "none", 4) && model[0];
}

void nvme_find(struct nvme_disk *d, bool zoned)
{
	char attr[128], sysname[32], dir[96];
	unsigned int maj, min;
	glob_t g;
	size_t i;
	FILE *f;

	memset(d, 0, sizeof(*d));
	if (glob("/sys/class/nvme-generic/ng*n*", 0, NULL, &g))
		g.gl_pathc = 0;
	for (i = 0; i < g.gl_pathc; i++) {
		/* ngXnY is the generic node of nvmeXnY */
		snprintf(sysname, sizeof(sysname), "nvme%s",
			 strrchr(g.gl_pathv[i], '/') + 3);
		snprintf(dir, sizeof(dir), "/sys/class/block/%s", sysname);
		if (!access(dir, F_OK) && blk_zoned(sysname) == zoned)
			break;
	}
	if (i == g.gl_pathc)
		die(1, "no %sNVMe namespace with a block device and a generic node (/sys/class/nvme-generic): the guest needs the lab's NVMe disk (VMShape.nvme), CONFIG_BLK_DEV_NVME%s",
		    zoned ? "zoned " : "", zoned ? " and CONFIG_BLK_DEV_ZONED" : "");
	snprintf(attr, sizeof(attr), "%s/dev", g.gl_pathv[i]);
	snprintf(d->generic, sizeof(d->generic), "/dev/%s",
		 strrchr(g.gl_pathv[i], '/') + 1);
	globfree(&g);
	blk_node(sysname, d->disk, sizeof(d->disk));
	f = fopen(attr, "r");
	if (!f || fscanf(f, "%u:%u", &maj, &min) != 2)
		die(1, "no character device in %s", attr);
	fclose(f);
	unlink(d->generic);
	if (mknod(d->generic, S_IFCHR | 0600, makedev(maj, min)))
		die(1, "mknod %s: %s", d->generic, strerror(errno));
	if (zoned) {
		snprintf(attr, sizeof(attr),
			 "/sys/class/block/%s/queue/chunk_sectors", sysname);
		f = fopen(attr, "r");
		if (!f || fscanf(f, "%llu", &d->zone_bytes) != 1 ||
		    !d->zone_bytes)
			die(1, "no zone size in %s", attr);
		fclose(f);
		d->zone_bytes *= 512;
	}
}

/* one io_uring command on @fd, the generic node: its result, or -errno */
static int uring_cmd(int fd, const struct nvme_uring_cmd *cmd)
{
	struct io_uring_params p = {
		.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32,
	};
	size_t sq_len, cq_len, sqes_len = 2 * sizeof(struct io_uring_sqe);
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int ring, ret = -EIO;
	char *sq, *cq;

	ring = syscall(__NR_io_uring_setup, 1, &p);
	if (ring < 0)
		return -errno;
	sq_len = p.sq_off.array + p.sq_entries * sizeof(__u32);
	/* CQE32: each completion is two io_uring_cqe */
	cq_len = p.cq_off.cqes + p.cq_entries * 2 * sizeof(*cqe);
	if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
		close(ring);
		return -ENOSYS;
	}
	if (cq_len > sq_len)
		sq_len = cq_len;
	sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring,
		  IORING_OFF_SQ_RING);
	sqe = mmap(NULL, sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED, ring,
		   IORING_OFF_SQES);
	if (sq == MAP_FAILED || sqe == MAP_FAILED) {
		ret = -errno;
		goto out;
	}
	cq = sq;
	memset(sqe, 0, sqes_len);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = fd;
	sqe->cmd_op = NVME_URING_CMD_IO;
	/* the command fills 72 of the 80 bytes from sqe->cmd on */
	memcpy((char *)sqe + offsetof(struct io_uring_sqe, cmd), cmd,
	       sizeof(*cmd));
	((__u32 *)(sq + p.sq_off.array))[0] = 0;
	__atomic_store_n((__u32 *)(sq + p.sq_off.tail), 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS,
		    NULL, 0) < 0) {
		ret = -errno;
		goto out;
	}
	if (__atomic_load_n((__u32 *)(cq + p.cq_off.tail), __ATOMIC_ACQUIRE) ==
	    *(__u32 *)(cq + p.cq_off.head))
		goto out;	/* no completion: -EIO */
	cqe = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	ret = cqe->res;
out:
	if (sqe != MAP_FAILED)
		munmap(sqe, sqes_len);
	if (sq != MAP_FAILED)
		munmap(sq, sq_len);
	close(ring);
	return ret;
}

/*
 * @cmd sent to @fd's namespace, by NVME_IOCTL_IO_CMD or (@uring, the
 * generic node) io_uring: -1 with errno set on an error (EIO for an NVMe
 * status).
 */
static int send_cmd(int fd, struct nvme_passthru_cmd *cmd, bool uring)
{
	int nsid = ioctl(fd, NVME_IOCTL_ID), err;

	if (nsid <= 0)
		return -1;
	cmd->nsid = nsid;
	if (uring) {
		struct nvme_uring_cmd ucmd = {
			.opcode = cmd->opcode, .nsid = cmd->nsid,
			.addr = cmd->addr, .data_len = cmd->data_len,
			.cdw10 = cmd->cdw10, .cdw11 = cmd->cdw11,
			.cdw12 = cmd->cdw12, .cdw13 = cmd->cdw13,
		};

		err = uring_cmd(fd, &ucmd);
		if (err < 0) {
			errno = -err;
			return -1;
		}
	} else {
		err = ioctl(fd, NVME_IOCTL_IO_CMD, cmd);
	}
	if (err > 0)	/* an NVMe status */
		errno = EIO;
	return err ? -1 : 0;
}

int nvme_write(int fd, enum nvme_route route, off_t at, const void *buf,
	       size_t len)
{
	bool zeroes = route == NVME_WRITE_ZEROES_IOCTL;
	struct nvme_passthru_cmd cmd = {
		.opcode = zeroes ? NVME_CMD_WRITE_ZEROES : NVME_CMD_WRITE,
		.cdw10 = (uint32_t)(at / NVME_SECTOR),
		.cdw11 = (uint32_t)((uint64_t)(at / NVME_SECTOR) >> 32),
		.cdw12 = len / NVME_SECTOR - 1,	/* blocks, less one */
		.addr = zeroes ? 0 : (uintptr_t)buf,
		.data_len = zeroes ? 0 : len,
	};

	if (at % NVME_SECTOR || len % NVME_SECTOR) {
		errno = EINVAL;
		return -1;
	}
	return send_cmd(fd, &cmd, route == NVME_WRITE_URING);
}

int nvme_zone_reset(int fd, off_t zone)
{
	struct nvme_passthru_cmd cmd = {
		.opcode = NVME_CMD_ZONE_MGMT_SEND,
		.cdw10 = (uint32_t)(zone / NVME_SECTOR),
		.cdw11 = (uint32_t)((uint64_t)(zone / NVME_SECTOR) >> 32),
		.cdw13 = NVME_ZONE_RESET,
	};

	return send_cmd(fd, &cmd, false);
}
