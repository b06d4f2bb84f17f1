// SPDX-License-Identifier: GPL-2.0
/*
 * Device mapper without dmsetup: the ioctls of <linux/dm-ioctl.h> on
 * /dev/mapper/control, enough to make a device of one target, load it a
 * new table (a table load is inactive until the device is resumed, as
 * LVM's lvextend and pvmove do it), suspend and resume it apart (a
 * snapshot merge's handover needs the source suspended while the merging
 * device resumes), read its target's status, send its target a message
 * (dm-thin's pool makes its thin devices so) and remove it.  The guest's
 * busybox has no dmsetup, and a static one would have to be built from
 * LVM's sources.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/dm-ioctl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "unflush.h"

/* An ioctl's header, one target spec and its parameters, in one buffer. */
struct dm_request {
	struct dm_ioctl io;
	struct dm_target_spec spec;
	char params[256];
};

static void dm_header(struct dm_request *r, const char *name)
{
	memset(r, 0, sizeof(*r));
	r->io.version[0] = DM_VERSION_MAJOR;
	r->io.version[1] = 0;
	r->io.version[2] = 0;
	r->io.data_size = sizeof(*r);
	r->io.data_start = sizeof(r->io);
	snprintf(r->io.name, sizeof(r->io.name), "%s", name);
}

static void dm_ioctl(unsigned long cmd, const char *what, struct dm_ioctl *r)
{
	int fd;

	mkdir("/dev/mapper", 0755);
	fd = misc_open("/dev/mapper/control", 236, "CONFIG_BLK_DEV_DM");
	if (ioctl(fd, cmd, r))
		die(1, "device mapper %s of %s: %s", what, r->name,
		    strerror(errno));
	close(fd);
}

/*
 * Load @name's inactive table: one target of @type over @sectors.  Read
 * only, the table opens the devices under it only for reading.
 */
void dm_load(const char *name, const char *type, const char *params,
	     unsigned long long sectors, bool read_only)
{
	struct dm_request r;

	dm_header(&r, name);
	r.io.flags = read_only ? DM_READONLY_FLAG : 0;
	r.io.target_count = 1;
	r.spec.sector_start = 0;
	r.spec.length = sectors;
	snprintf(r.spec.target_type, sizeof(r.spec.target_type), "%s", type);
	if (snprintf(r.params, sizeof(r.params), "%s", params) >=
	    (int)sizeof(r.params))
		die(1, "device mapper table of %s too long: %s", name, params);
	r.spec.next = sizeof(r.spec) + sizeof(r.params);
	dm_ioctl(DM_TABLE_LOAD, "table load", &r.io);
}

/* Suspend @name, flushing its I/O (and freezing a filesystem on it). */
void dm_suspend(const char *name)
{
	struct dm_request r;

	dm_header(&r, name);
	r.io.flags = DM_SUSPEND_FLAG;
	dm_ioctl(DM_DEV_SUSPEND, "suspend", &r.io);
}

/* Resume @name, its inactive table made live if it has one: its number. */
dev_t dm_resume(const char *name)
{
	struct dm_request r;

	dm_header(&r, name);
	dm_ioctl(DM_DEV_SUSPEND, "resume", &r.io);
	/* the kernel's new_encode_dev() */
	return makedev((r.io.dev >> 8) & 0xfff,
		       (r.io.dev & 0xff) | ((r.io.dev >> 12) & 0xfff00));
}

/* Make the inactive table live: suspend, then resume. */
static dev_t dm_swap(const char *name)
{
	dm_suspend(name);
	return dm_resume(name);
}

void dm_status(const char *name, char *status, size_t len)
{
	struct dm_request r;

	dm_header(&r, name);
	dm_ioctl(DM_TABLE_STATUS, "status", &r.io);
	if (!r.io.target_count)
		die(1, "device mapper device %s has no live table", name);
	/* the first target's spec, its status text after it */
	snprintf(status, len, "%s", (char *)&r + r.io.data_start +
		 sizeof(struct dm_target_spec));
}

dev_t dm_create(const char *name, const char *type, const char *params,
		unsigned long long sectors, bool read_only)
{
	struct dm_request r;

	dm_header(&r, name);
	dm_ioctl(DM_DEV_CREATE, "create", &r.io);
	dm_load(name, type, params, sectors, read_only);
	return dm_swap(name);
}

void dm_reload(const char *name, const char *type, const char *params,
	       unsigned long long sectors, bool read_only)
{
	dm_load(name, type, params, sectors, read_only);
	dm_swap(name);
}

void dm_remove(const char *name)
{
	struct dm_request r;

	dm_header(&r, name);
	/* still open (a program that died mid-trial): removed at its close */
	r.io.flags = DM_DEFERRED_REMOVE;
	dm_ioctl(DM_DEV_REMOVE, "remove", &r.io);
}

void dm_message(const char *name, unsigned long long sector,
		const char *message)
{
	/* a struct dm_target_msg, its message in place */
	struct {
		struct dm_ioctl io;
		__u64 sector;
		char text[128];
	} r;

	memset(&r, 0, sizeof(r));
	r.io.version[0] = DM_VERSION_MAJOR;
	r.io.data_size = sizeof(r);
	r.io.data_start = sizeof(r.io);
	snprintf(r.io.name, sizeof(r.io.name), "%s", name);
	r.sector = sector;
	if (snprintf(r.text, sizeof(r.text), "%s", message) >=
	    (int)sizeof(r.text))
		die(1, "device mapper message to %s too long: %s", name,
		    message);
	dm_ioctl(DM_TARGET_MSG, "message", &r.io);
}
