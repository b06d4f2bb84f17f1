// SPDX-License-Identifier: GPL-2.0
/*
 * counters: run any command and report what it cost in TLB flushes.
 *
 * The lab wraps arbitrary guest commands (a selftest, a shell loop) with
 * this, so they are counted exactly like the experiments: same sources,
 * same names, same JSON.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unflush.h"

static const char usage[] =
"usage: counters [--out FILE] -- CMD [ARGS...]\n"
"\n"
"Run CMD (its stdout and stderr pass through), then print one line\n"
"  UNFLUSH-COUNTERS {\"command\":\"CMD ARGS\",\"exit\":N,\"elapsed_s\":S,\n"
"    \"tlb_shootdown_irqs\":N,\"counters\":{...},\"missing\":[...]}\n"
"to stdout, or to FILE (truncated) with --out.  Counters are system-wide\n"
"deltas from just before CMD starts to just after it ends: every\n"
"/proc/vmstat key, irq/TLB and irq/CAL (+ /cpuN) from /proc/interrupts,\n"
"tlb_flush/<reason> from the tlb:tlb_flush tracepoint, mthp/<size>kB/<stat>.\n"
"Exits with CMD's status (128+N if a signal N killed it, 127 if it could\n"
"not be run).\n";

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	const char *out_path = NULL;
	struct phase p = { 0 };
	struct jbuf line = { 0 }, cmd = { 0 };
	FILE *out = stdout;
	int opt, status, code;
	pid_t pid;

	opterr = 0;
	/* '+': stop at CMD, whose own options are not ours */
	while ((opt = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'o':
			out_path = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			bad_option(argv);
		}
	}
	if (optind >= argc)
		usage_error("no command given: counters [--out FILE] -- CMD [ARGS...]");
	/* fail before running anything, not after */
	if (out_path && !(out = fopen(out_path, "w")))
		die(1, "cannot write %s: %s", out_path, strerror(errno));
	for (int i = optind; i < argc; i++)
		jb_printf(&cmd, "%s%s", i > optind ? " " : "", argv[i]);

	fflush(stdout);
	phase_begin(&p);
	pid = fork();
	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (pid == 0) {
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "counters: cannot run %s: %s\n", argv[optind],
			strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die(1, "waitpid: %s", strerror(errno));
	phase_end(&p);

	code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	jb_printf(&line, "{\"command\":");
	jb_string(&line, cmd.s);
	jb_printf(&line, ",\"exit\":%d,\"elapsed_s\":%.9g,", code,
		  phase_elapsed(&p));
	jb_phase(&line, &p);
	jb_printf(&line, "}");
	fprintf(out, "UNFLUSH-COUNTERS %s\n", line.s);
	if (fclose(out))
		die(1, "cannot write %s: %s", out_path ? out_path : "stdout",
		    strerror(errno));
	return code;
}
