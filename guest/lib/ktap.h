/* SPDX-License-Identifier: GPL-2.0 */
/*
 * KTAP output for the guest programs that pass or fail, in the format of
 * the kernel's selftests (Documentation/dev-tools/ktap.rst), so that one
 * parser on the host reads them and the mm selftests alike:
 *
 *	TAP version 13
 *	1..1
 *	ok 1 luf-hazards/reuse				exit 0
 *	not ok 1 luf-hazards/reuse			exit 1
 *	not ok 1 luf-hazards/reuse # <why it died>	exit as die() says
 *	ok 1 luf-hazards/demote # SKIP <what is missing>	exit 4
 *
 * A test is skipped, exit 4 as kselftest's KSFT_SKIP, when the kernel or
 * the machine lacks what it needs (a feature, a second NUMA node); never
 * for a violation.  A test named with ktap_test() that dies before its
 * result gets "not ok" with die()'s message; one that is killed gets no
 * result line at all, which the host reads as not finished.  Benchmarks
 * print no KTAP: their records are UNFLUSH-RESULT JSON lines.
 */
#ifndef KTAP_H
#define KTAP_H

#include <stdarg.h>
#include <stdbool.h>

#define KTAP_PASS	0
#define KTAP_FAIL	1
#define KTAP_SKIP	4

/* "TAP version 13" and the plan, "1..@tests". */
void ktap_plan(int tests);
/* The test now running, by name ("luf-hazards/reuse"). */
void ktap_test(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Its result: "ok N name" or "not ok N name". */
void ktap_result(bool ok);
/* "ok N name # SKIP reason", then exit(KTAP_SKIP). */
void ktap_skip_exit(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
/* The exit status: KTAP_FAIL if any test failed, else KTAP_PASS. */
int ktap_status(void);
/* The test goes on in this forked process (pin_main()'s worker); other
 * children (a reader, a helper) that die() print no result for it. */
void ktap_adopt(void);
/* For die(): "not ok N name # message" if this process runs the test. */
void ktap_died(const char *fmt, va_list ap);

#endif
