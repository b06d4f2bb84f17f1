// SPDX-License-Identifier: GPL-2.0
/*
 * llama-tiering: seed 001's own workload.  Three llama.cpp inferences at
 * once over memory-mapped GGUF model files, inside a memory cgroup too small
 * for the three models, with a CPU-less memory node as demotion target.
 *
 * ro-reclaim-tiering imitates this access pattern with a reader of our own;
 * here the reader is llama.cpp itself (its llama-simple program: greedy
 * sampling, fixed prompt, fixed token count, mmap on, its default thread
 * count).  Every token reads every weight, so under the cgroup's limit
 * reclaim and demotion unmap the models' clean, read-only page cache again
 * and again while each process's threads run on several CPUs: the flushes
 * LUF defers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "roload.h"

#define MAX_MODELS	16
#define SAMPLE_MS	500
#define LINE_MAX_LEN	512
/* short: the models' vocabulary spells it byte by byte, 9 tokens */
#define PROMPT		"Hello"

static const char usage[] =
"usage: llama-tiering --llama PATH --models M1,M2,... [--tokens N]\n"
"                     [--memcg-limit M] [--reps N] [--quick]\n"
"\n"
"Run llama.cpp's llama-simple once per model, all at once, each generating\n"
"N tokens (greedy, prompt \"" PROMPT "\") from its memory-mapped GGUF\n"
"model, inside a cgroup v2 memory cgroup with memory.max = M.  The measured\n"
"phase is from the start of the first to the exit of the last.\n"
"\n"
"  --llama PATH     the llama-simple binary (llama.cpp, static)\n"
"  --models         comma-separated GGUF files, e.g. on the lab's data disk\n"
"  --tokens N       tokens each process generates (default 8, --quick 4)\n"
"  --memcg-limit M  memory.max of the cgroup (default 160M, --quick 64M;\n"
"                   0: none, the machine's own memory is the limit)\n"
"  --reps N         repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --quick          fewer tokens, for CI smoke runs\n"
"\n"
"Before each repetition the models' clean page cache is dropped\n"
"(POSIX_FADV_DONTNEED).  Needs a CPU-less node with memory: sets\n"
"/sys/kernel/mm/numa/demotion_enabled to 1 and kernel.numa_balancing to 2\n"
"(tiering), restored at exit.  Fails unless pages were both reclaimed and\n"
"demoted, and unless every process generated all N tokens.\n"
"Experiment id: llama-tiering.  Fields: procs, tokens, prompt_per_token_ns,\n"
"eval_per_token_ns, llama_total_ns (llama.cpp's own timings, means over the\n"
"processes), tokens_per_s,\n"
"tlb_irq_series.  checks: pgsteal, pgdemote, pgpromote_success,\n"
"resident_pages_before, tokens_generated.\n";

static pid_t children[MAX_MODELS];
static int nchildren;
static pid_t main_pid;		/* names the logs, in the children too */

static void kill_children(void)
{
	for (int i = 0; i < nchildren; i++)
		kill(children[i], SIGKILL);
	for (int i = 0; i < nchildren; i++)
		waitpid(children[i], NULL, 0);
	nchildren = 0;
}

static void log_path(char *buf, size_t len, int i)
{
	snprintf(buf, len, "/tmp/llama-tiering.%d.%d.log", (int)main_pid, i);
}

/* In the child: into the cgroup, output to its log, exec llama-simple. */
static void inference(const char *llama, const char *model, long tokens,
		      int i)
{
	char log[128], n[32];
	int fd;

	memcg_join();
	log_path(log, sizeof(log), i);
	fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
		_exit(126);
	close(fd);
	snprintf(n, sizeof(n), "%ld", tokens);
	execl(llama, llama, "-m", model, "-n", n, PROMPT, (char *)NULL);
	_exit(127);
}

/* llama.cpp's own timings, from the lines llama_perf_context_print writes */
struct timings {
	double prompt_ms_per_token, eval_ms_per_token, total_ms;
	int decoded;
};

static bool parse_log(int i, struct timings *t, char *last)
{
	char path[128], line[LINE_MAX_LEN];
	int found = 0;
	FILE *f;

	log_path(path, sizeof(path), i);
	f = fopen(path, "r");
	if (!f)
		return false;
	last[0] = '\0';
	while (fgets(line, sizeof(line), f)) {
		char *p;
		double ms;
		int count;

		if (line[0] != '\n')
			memcpy(last, line, LINE_MAX_LEN);
		if ((p = strstr(line, "prompt eval time =")) &&
		    sscanf(p, "prompt eval time = %lf ms / %d tokens (%lf",
			   &ms, &count, &t->prompt_ms_per_token) == 3)
			found |= 1;
		else if ((p = strstr(line, " eval time =")) &&
			 sscanf(p, " eval time = %lf ms / %d runs (%lf", &ms,
				&count, &t->eval_ms_per_token) == 3)
			found |= 2;
		else if ((p = strstr(line, "total time =")) &&
			 sscanf(p, "total time = %lf", &t->total_ms) == 1)
			found |= 4;
		else if ((p = strstr(line, "decoded ")) &&
			 sscanf(p, "decoded %d tokens", &t->decoded) == 1)
			found |= 8;
	}
	fclose(f);
	last[strcspn(last, "\n")] = '\0';
	unlink(path);
	return found == 15;
}

/*
 * Wait for EOF on @fd (every inference has exited), sampling the shootdown
 * count every SAMPLE_MS: @series gets [seconds, shootdowns so far] pairs.
 */
static void wait_sampling(int fd, double t0, struct jbuf *series)
{
	long long base = irq_total("TLB");
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	jb_printf(series, "[[0,0]");
	for (;;) {
		int ready = poll(&pfd, 1, SAMPLE_MS);

		if (ready < 0 && errno != EINTR)
			die(1, "poll: %s", strerror(errno));
		if (ready > 0 && read(fd, &c, 1) <= 0)
			break;
		if (ready == 0 && base >= 0)
			jb_printf(series, ",[%.3f,%lld]", now_s() - t0,
				  irq_total("TLB") - base);
	}
	jb_printf(series, "]");
}

int main(int argc, char **argv)
{
	struct own_arg args[] = {
		{ .name = "llama" }, { .name = "models" }, { .name = "tokens" },
		{ .name = "memcg-limit" },
	};
	struct fields checks = { 0 }, extra = { 0 };
	struct jbuf series = { 0 };
	char *models[MAX_MODELS];
	const char *llama;
	int nmodels = 0;
	size_t limit, total = 0;
	struct run_opts o;
	long tokens;

	main_pid = getpid();
	run_opts_init(&o, usage, true);
	parse_run_args(argc, argv, &o, args, 4);
	llama = args[0].value;
	if (!llama || access(llama, X_OK))
		usage_error("--llama: '%s' is not an executable llama-simple",
			    llama ? llama : "");
	if (!args[1].value)
		usage_error("--models is required, e.g. --models /data/a.gguf,/data/b.gguf");
	nmodels = split_file_list("--models", args[1].value, models, MAX_MODELS, &total);
	tokens = arg_count(&args[2], 1, o.quick ? 4 : 8);
	if (args[3].value && !strcmp(args[3].value, "0"))
		limit = 0;
	else
		limit = arg_size(&args[3], (o.quick ? 64 : 160) * MiB);
	if (limit && total <= limit)
		usage_error("the models (%zu MiB) fit in --memcg-limit %zu MiB: no reclaim would happen",
			    total / MiB, limit / MiB);

	memcg_create("unflush-llama", limit);
	cleanup_push_fn(kill_children);
	if (!tiering_enable())
		die(1, "no CPU-less memory node: nothing to demote to; run it on a tiered machine (the lab's VM has node 1)");

	for (int rep = 0; rep < o.reps; rep++) {
		long long resident = 0, pgsteal, pgdemote;
		struct timings sum = { 0 };
		int done[2], failed = 0, short_runs = 0;
		struct phase p = { 0 };
		char last[LINE_MAX_LEN] = "";

		fields_clear(&checks);
		fields_clear(&extra);
		for (int i = 0; i < nmodels; i++)
			resident += evict_file(models[i]);
		if (pipe(done))
			die(1, "pipe: %s", strerror(errno));
		fflush(NULL);
		phase_begin(&p);
		for (int i = 0; i < nmodels; i++) {
			pid_t pid = fork();

			if (pid < 0)
				die(1, "fork: %s", strerror(errno));
			if (pid == 0) {
				/* done[1] stays open across exec: the
				 * parent sees EOF once every one exited */
				close(done[0]);
				inference(llama, models[i], tokens, i);
			}
			children[nchildren++] = pid;
		}
		close(done[1]);
		series.len = 0;
		wait_sampling(done[0], p.t0, &series);
		phase_end(&p);
		close(done[0]);
		for (int i = 0; i < nchildren; i++) {
			int status;

			if (waitpid(children[i], &status, 0) < 0 || status)
				failed++;
		}
		nchildren = 0;
		for (int i = 0; i < nmodels; i++) {
			struct timings t = { 0 };

			if (!parse_log(i, &t, last))
				die(1, "llama-simple on %s printed no timings (exit: %d failed); its last line: %s",
				    models[i], failed, last);
			sum.prompt_ms_per_token += t.prompt_ms_per_token / nmodels;
			sum.eval_ms_per_token += t.eval_ms_per_token / nmodels;
			sum.total_ms += t.total_ms / nmodels;
			sum.decoded += t.decoded;
			if (t.decoded != tokens)
				short_runs++;
		}
		if (failed)
			die(1, "%d of %d llama-simple processes failed", failed,
			    nmodels);

		pgsteal = phase_pgsteal(&p);
		pgdemote = phase_delta_prefix(&p, "pgdemote_");
		field_int(&checks, "pgsteal", pgsteal);
		field_int(&checks, "pgdemote", pgdemote);
		field_int(&checks, "pgpromote_success",
			  phase_delta(&p, "pgpromote_success"));
		field_int(&checks, "resident_pages_before", resident);
		field_int(&checks, "tokens_generated", sum.decoded);
		if (pgsteal <= 0 || pgdemote <= 0)
			die(1, "set-up check failed: %lld pages reclaimed, %lld demoted (both must be > 0); lower --memcg-limit (%zu MiB for %zu MiB of models)",
			    pgsteal, pgdemote, limit / MiB, total / MiB);
		if (short_runs)
			die(1, "%d llama-simple processes stopped before %ld tokens (an end-of-generation token): the models must never predict one",
			    short_runs, tokens);
		field_int(&extra, "procs", nmodels);
		field_int(&extra, "tokens", tokens);
		field_int(&extra, "models_bytes", total);
		field_int(&extra, "memcg_limit_bytes", limit);
		field_int(&extra, "ops", sum.decoded);
		/* in ns, so that the report takes them for times */
		field_real(&extra, "prompt_per_token_ns", sum.prompt_ms_per_token * 1e6);
		field_real(&extra, "eval_per_token_ns", sum.eval_ms_per_token * 1e6);
		field_real(&extra, "llama_total_ns", sum.total_ms * 1e6);
		field_real(&extra, "tokens_per_s", sum.decoded / phase_elapsed(&p));
		field_raw(&extra, "tlb_irq_series", series.s);
		report_result("llama-tiering", shape_name(&o), rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
