// SPDX-License-Identifier: GPL-2.0
/* Errors, time and the command-line options every program shares. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ktap.h"
#include "unflush.h"

/* "<prog>: <message><tail>" as one line on stderr. */
static void say(const char *tail, const char *fmt, va_list ap)
{
	fflush(stdout);
	fprintf(stderr, "%s: ", program_invocation_short_name);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "%s\n", tail);
}

void die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	ktap_died(fmt, ap);
	va_end(ap);
	va_start(ap, fmt);
	say("", fmt, ap);
	va_end(ap);
	exit(code);	/* atexit runs the cleanup stack */
}

void usage_error(const char *fmt, ...)
{
	char tail[128];
	va_list ap;

	snprintf(tail, sizeof(tail), " (see %s --help)",
		 program_invocation_short_name);
	va_start(ap, fmt);
	say(tail, fmt, ap);
	va_end(ap);
	exit(2);
}

void bad_option(char **argv)
{
	/* getopt's own message is switched off: one line, ours */
	usage_error("unknown option or missing value: '%s'", argv[optind - 1]);
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

unsigned long long parse_size(const char *opt, const char *arg)
{
	unsigned long long v, unit = 1;
	char *end;

	errno = 0;
	v = strtoull(arg, &end, 10);
	switch (*end) {
	case 'k': case 'K': unit = KiB; end++; break;
	case 'm': case 'M': unit = MiB; end++; break;
	case 'g': case 'G': unit = GiB; end++; break;
	}
	if (errno || end == arg || *end || v == 0 || v > ~0ULL / unit)
		usage_error("bad %s '%s': give a size like 4096, 64K, 256M or 1G",
			    opt, arg);
	return v * unit;
}

long parse_count(const char *opt, const char *arg, long min)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min)
		usage_error("bad %s '%s': give a whole number >= %ld", opt, arg,
			    min);
	return v;
}

void run_opts_init(struct run_opts *o, const char *usage, bool threads)
{
	memset(o, 0, sizeof(*o));
	o->usage = usage;
	o->reps = 3;
	o->threads = threads;
	opterr = 0;
}

bool run_option(struct run_opts *o, int opt, char **argv)
{
	const char *arg = optarg;

	switch (opt) {
	case OPT_REPS:
		o->reps = parse_count("--reps", arg, 1);
		return true;
	case OPT_QUICK:
		o->quick = true;
		return true;
	case OPT_SHAPE:
		if (strcmp(arg, "single") && strcmp(arg, "threads"))
			usage_error("bad --shape '%s': use single or threads",
				    arg);
		o->threads = !strcmp(arg, "threads");
		return true;
	case 'h':
		fputs(o->usage, stdout);
		exit(0);
	case '?':
		bad_option(argv);
	}
	return false;
}

void parse_run_args(int argc, char **argv, struct run_opts *o,
		    struct own_arg *own, int nown)
{
	const struct option common[] = { RUN_LONG_OPTIONS };
	struct option opts[MAX_OWN_ARGS + sizeof(common) / sizeof(common[0]) + 1];
	int i, n = 0, opt;

	if (nown > MAX_OWN_ARGS)
		die(1, "internal error: more than %d own options", MAX_OWN_ARGS);
	for (i = 0; i < nown; i++)
		opts[n++] = (struct option){ own[i].name, required_argument,
					     NULL, OPT_FIRST_PRIVATE + i };
	for (i = 0; i < (int)(sizeof(common) / sizeof(common[0])); i++)
		opts[n++] = common[i];
	opts[n] = (struct option){ 0 };

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (run_option(o, opt, argv))
			continue;
		own[opt - OPT_FIRST_PRIVATE].value = optarg;
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
}

size_t arg_size(const struct own_arg *a, size_t dflt)
{
	char opt[64];

	if (!a->value)
		return dflt;
	snprintf(opt, sizeof(opt), "--%s", a->name);
	return parse_size(opt, a->value);
}

long arg_count(const struct own_arg *a, long min, long dflt)
{
	char opt[64];

	if (!a->value)
		return dflt;
	snprintf(opt, sizeof(opt), "--%s", a->name);
	return parse_count(opt, a->value, min);
}

const char *shape_name(const struct run_opts *o)
{
	return o->threads ? "threads" : "single";
}

int split_file_list(const char *opt, char *list, char **paths, int max,
		    size_t *total)
{
	struct stat st;
	int n = 0;

	*total = 0;
	for (char *f = strtok(list, ","); f; f = strtok(NULL, ",")) {
		if (n == max)
			usage_error("%s: at most %d files", opt, max);
		if (stat(f, &st) || !S_ISREG(st.st_mode) || st.st_size == 0)
			usage_error("%s: '%s' is not a readable, non-empty file",
				    opt, f);
		paths[n++] = f;
		*total += st.st_size;
	}
	return n;
}
