// SPDX-License-Identifier: GPL-2.0
/*
 * A SCSI disk without hardware, and writes that pass the block layer's
 * file-level checks by.  The disk is scsi_debug's RAM disk, made on
 * request: the lab boots every guest with scsi_debug.add_host=0 and
 * fake_rw=1 (lab/vm.py), so that none pays for its store unless a test
 * asks.  The writes are SCSI commands sent by SG_IO (a WRITE(10), or a
 * WRITE SAME(10) of a zeroed block) through the disk's block device, its
 * sg node, or its bsg node (sg_io_v4): with CAP_SYS_RAWIO, even on a
 * block device opened read-only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <linux/bsg.h>
#include <scsi/sg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "unflush.h"

#define SDEBUG		"/sys/bus/pseudo/drivers/scsi_debug"
#define SECTOR		512
#define WRITE_10	0x2a
#define WRITE_SAME_10	0x41
#define SCSI_TIMEOUT_MS	10000

static void sdebug_write(const char *attr, const char *value)
{
	char path[96];
	FILE *f;

	snprintf(path, sizeof(path), SDEBUG "/%s", attr);
	f = fopen(path, "w");
	if (!f || fputs(value, f) < 0 || fclose(f))
		die(1, "cannot write %s to %s (CONFIG_SCSI_DEBUG?): %s", value,
		    path, strerror(errno));
}

/* The node of the character device whose "dev" attribute is @attr. */
static void chr_node(const char *attr, const char *path)
{
	unsigned int maj, min;
	FILE *f = fopen(attr, "r");

	if (!f || fscanf(f, "%u:%u", &maj, &min) != 2)
		die(1, "no character device in %s", attr);
	fclose(f);
	unlink(path);
	if (mknod(path, S_IFCHR | 0600, makedev(maj, min)))
		die(1, "mknod %s (%u:%u): %s", path, maj, min, strerror(errno));
}

/* The first entry matching @pattern, or "" */
static void first_match(const char *pattern, char *out, size_t len)
{
	glob_t g;

	out[0] = 0;
	if (!glob(pattern, 0, NULL, &g) && g.gl_pathc)
		snprintf(out, len, "%s", g.gl_pathv[0]);
	globfree(&g);
}

void scsi_debug_add(struct scsi_disk *d, const char *tag)
{
	char dir[192], entry[256], attr[320];
	struct timespec pause = { 0, 50 * 1000 * 1000 };
	const char *lun;

	memset(d, 0, sizeof(*d));
	if (access(SDEBUG, F_OK))
		die(1, "no %s: this kernel has no scsi_debug (CONFIG_SCSI_DEBUG)",
		    SDEBUG);
	first_match(SDEBUG "/adapter*", entry, sizeof(entry));
	if (entry[0])
		die(1, "scsi_debug already has a host (%s): boot with scsi_debug.add_host=0",
		    entry);
	/* the store, dev_size_mb large, then one host with one disk */
	sdebug_write("fake_rw", "0");
	sdebug_write("add_host", "1");
	d->added = true;
	/* the host's scan may finish after the write returns */
	for (int i = 0; i < 200 && !entry[0]; i++) {
		first_match(SDEBUG "/adapter*/host*/target*/*:*:*:*/block/*",
			    entry, sizeof(entry));
		if (!entry[0])
			nanosleep(&pause, NULL);
	}
	if (!entry[0])
		die(1, "scsi_debug's new host has no disk after 10 s");
	snprintf(dir, sizeof(dir), "%.*s", (int)(strstr(entry, "/block/") -
						  entry), entry);
	lun = strrchr(dir, '/') + 1;
	blk_node(strrchr(entry, '/') + 1, d->disk, sizeof(d->disk));
	/*
	 * The disk's sysfs entry comes with add_disk(); until sd's probe has
	 * finished, opening it says ENXIO (seen once on the debug kernel)
	 */
	for (int i = 0, fd; i < 200; i++) {
		fd = open(d->disk, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			close(fd);
			break;
		}
		if (errno != ENXIO || i == 199)
			die(1, "cannot open scsi_debug's disk %s: %s", d->disk,
			    strerror(errno));
		nanosleep(&pause, NULL);
	}
	first_match(strcat(strcpy(attr, dir), "/scsi_generic/sg*"), entry,
		    sizeof(entry));
	if (!entry[0])
		die(1, "scsi_debug's disk %s has no sg node (CONFIG_CHR_DEV_SG)",
		    d->disk);
	snprintf(d->sg, sizeof(d->sg), "/dev/%s-%s", tag,
		 strrchr(entry, '/') + 1);
	snprintf(attr, sizeof(attr), "%s/dev", entry);
	chr_node(attr, d->sg);
	snprintf(attr, sizeof(attr), "%s/bsg/%s/dev", dir, lun);
	if (access(attr, F_OK))
		die(1, "scsi_debug's disk %s has no bsg node (CONFIG_BLK_DEV_BSG)",
		    d->disk);
	snprintf(d->bsg, sizeof(d->bsg), "/dev/%s-bsg-%s", tag, lun);
	chr_node(attr, d->bsg);
}

void scsi_debug_remove(struct scsi_disk *d)
{
	if (d->sg[0])
		unlink(d->sg);
	if (d->bsg[0])
		unlink(d->bsg);
	/* the disk goes with its host; the store stays for the next one */
	if (d->added)
		sdebug_write("add_host", "-1");
	d->added = false;
}

/* A 10-byte CDB of @op over @blocks sectors from sector @lba. */
static void cdb10(uint8_t *cdb, uint8_t op, uint32_t lba, uint16_t blocks)
{
	memset(cdb, 0, 10);
	cdb[0] = op;
	cdb[2] = lba >> 24;
	cdb[3] = lba >> 16;
	cdb[4] = lba >> 8;
	cdb[5] = lba;
	cdb[7] = blocks >> 8;
	cdb[8] = blocks;
}

int scsi_write(int fd, enum scsi_route route, off_t at, const void *buf,
	       size_t len)
{
	static const uint8_t zero[SECTOR];
	bool same = route == SCSI_WRITE_SAME;
	uint8_t cdb[10], sense[32];
	const void *data = same ? zero : buf;
	uint32_t data_len = same ? SECTOR : len;
	int err;

	if (at % SECTOR || len % SECTOR) {
		errno = EINVAL;
		return -1;
	}
	cdb10(cdb, same ? WRITE_SAME_10 : WRITE_10, at / SECTOR, len / SECTOR);
	if (route == SCSI_BSG) {
		struct sg_io_v4 io = {
			.guard = 'Q', .protocol = BSG_PROTOCOL_SCSI,
			.subprotocol = BSG_SUB_PROTOCOL_SCSI_CMD,
			.request_len = sizeof(cdb),
			.request = (uintptr_t)cdb,
			.dout_xfer_len = data_len,
			.dout_xferp = (uintptr_t)data,
			.max_response_len = sizeof(sense),
			.response = (uintptr_t)sense,
			.timeout = SCSI_TIMEOUT_MS,
		};

		err = ioctl(fd, SG_IO, &io);
		if (!err && (io.device_status || io.transport_status ||
			     io.driver_status))
			err = -1, errno = EIO;
	} else {
		struct sg_io_hdr io = {
			.interface_id = 'S', .dxfer_direction = SG_DXFER_TO_DEV,
			.cmd_len = sizeof(cdb), .mx_sb_len = sizeof(sense),
			.dxfer_len = data_len, .dxferp = (void *)data,
			.cmdp = cdb, .sbp = sense, .timeout = SCSI_TIMEOUT_MS,
		};

		err = ioctl(fd, SG_IO, &io);
		if (!err && (io.info & SG_INFO_OK_MASK) != SG_INFO_OK)
			err = -1, errno = EIO;
	}
	return err ? -1 : 0;
}
