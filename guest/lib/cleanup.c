// SPDX-License-Identifier: GPL-2.0
/*
 * Reading and writing sysfs/procfs settings, and putting back every one a
 * program changed.  The lab runs the programs one after another in the same
 * guest and natively on people's machines: a setting left behind would
 * silently change the next measurement, so restoring is not optional.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unflush.h"

struct cleanup {
	void (*fn)(void);	/* NULL: write @old back to @path */
	char path[256];
	char old[128];
};

static struct cleanup stack[128];
static int depth;
static pid_t owner;

static void on_signal(int sig)
{
	cleanup_run();
	signal(sig, SIG_DFL);
	raise(sig);
}

static struct cleanup *push(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa = { .sa_handler = on_signal };

	if (!owner) {
		owner = getpid();
		atexit(cleanup_run);
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			sigaction(sigs[i], &sa, NULL);
	}
	if (depth == (int)(sizeof(stack) / sizeof(stack[0])))
		die(1, "internal: cleanup stack full");
	memset(&stack[depth], 0, sizeof(stack[0]));
	return &stack[depth++];
}

void cleanup_push_fn(void (*fn)(void))
{
	push()->fn = fn;
}

void cleanup_run(void)
{
	sigset_t all, old;

	/* A forked child inherits the stack but owns none of the settings. */
	if (getpid() != owner)
		return;
	/* Not twice at once: a signal arriving during exit() waits. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	while (depth > 0) {
		struct cleanup *c = &stack[--depth];

		if (c->fn)
			c->fn();
		else if (!write_text(c->path, c->old))
			fprintf(stderr, "%s: could not restore %s to '%s': %s\n",
				program_invocation_short_name, c->path, c->old,
				strerror(errno));
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
}

bool path_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

bool write_text(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;
	int err;

	if (fd < 0)
		return false;
	n = write(fd, value, strlen(value));
	err = errno;
	close(fd);
	errno = err;
	return n == (ssize_t)strlen(value);
}

static bool read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return false;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return false;
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		n--;
	buf[n] = '\0';
	return true;
}

bool setting_read(const char *path, char *buf, size_t len)
{
	char *open_br, *close_br;

	if (!read_text(path, buf, len))
		return false;
	/* sysfs choices read "always [madvise] never": keep the selection */
	open_br = strchr(buf, '[');
	close_br = open_br ? strchr(open_br, ']') : NULL;
	if (close_br) {
		*close_br = '\0';
		memmove(buf, open_br + 1, close_br - open_br);
	}
	return true;
}

bool read_number(const char *path, long long *value)
{
	char buf[64], *end;

	if (!read_text(path, buf, sizeof(buf)))
		return false;
	errno = 0;
	*value = strtoll(buf, &end, 10);
	if (errno || end == buf)
		return errno = EINVAL, false;
	return true;
}

static const char *errno_hint(int err)
{
	switch (err) {
	case ENOENT:
		return "this kernel lacks the feature";
	case EACCES:
	case EPERM:
		return "run as root";
	default:
		return "the kernel refused the value";
	}
}

void setting_write(const char *path, const char *value)
{
	struct cleanup *c = NULL;

	for (int i = 0; i < depth; i++)
		if (!stack[i].fn && !strcmp(stack[i].path, path))
			c = &stack[i];
	if (!c) {
		char old[sizeof(c->old)];

		if (!setting_read(path, old, sizeof(old)))
			die(1, "cannot read %s: %s (%s)", path, strerror(errno),
			    errno_hint(errno));
		c = push();
		snprintf(c->path, sizeof(c->path), "%s", path);
		snprintf(c->old, sizeof(c->old), "%s", old);
	}
	if (!write_text(path, value))
		die(1, "cannot write '%s' to %s: %s (%s)", value, path,
		    strerror(errno), errno_hint(errno));
}

static void umount_debugfs(void)
{
	umount("/sys/kernel/debug");
}

void need_debugfs(const char *path)
{
	if (path_exists(path))
		return;
	if (mount("debugfs", "/sys/kernel/debug", "debugfs", 0, NULL) == 0)
		cleanup_push_fn(umount_debugfs);
}
