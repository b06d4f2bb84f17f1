// SPDX-License-Identifier: GPL-2.0
/* KTAP result lines (ktap.h). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ktap.h"

static struct {
	pid_t pid;		/* the process running the test */
	int number;		/* of the last test named */
	int failed;
	bool running;		/* named, no result yet */
	char name[128];
} k;

void ktap_plan(int tests)
{
	printf("TAP version 13\n1..%d\n", tests);
	fflush(stdout);
}

void ktap_test(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(k.name, sizeof(k.name), fmt, ap);
	va_end(ap);
	k.number++;
	k.running = true;
	k.pid = getpid();
}

void ktap_adopt(void)
{
	k.pid = getpid();
}

void ktap_result(bool ok)
{
	printf("%sok %d %s\n", ok ? "" : "not ", k.number, k.name);
	fflush(stdout);
	k.failed += !ok;
	k.running = false;
}

void ktap_skip_exit(const char *fmt, ...)
{
	va_list ap;

	printf("ok %d %s # SKIP ", k.number, k.name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(KTAP_SKIP);	/* atexit runs the cleanup stack */
}

int ktap_status(void)
{
	return k.failed ? KTAP_FAIL : KTAP_PASS;
}

void ktap_died(const char *fmt, va_list ap)
{
	/* a forked helper inherits the state, not the test (ktap_adopt()) */
	if (!k.running || getpid() != k.pid)
		return;
	printf("not ok %d %s # ", k.number, k.name);
	vprintf(fmt, ap);
	printf("\n");
	fflush(stdout);
	k.running = false;
}
