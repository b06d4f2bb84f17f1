// SPDX-License-Identifier: GPL-2.0
/*
 * tlb-remote: the smallest workload that must send TLB shootdown IPIs, and
 * its twin that must not.  The lab's integration test runs both to prove the
 * counters see a shootdown when there is one and none when there is none.
 *
 * --remote: thread A (first CPU) maps a chunk, writes it, publishes it;
 * thread B (second CPU) reads every page of it, so B's TLB caches the
 * translations, and says so; A then unmaps the chunk.  B keeps spinning in
 * the same mm, so the kernel must interrupt B's CPU for every munmap.
 *
 * --local: A alone does the same map/touch/unmap.  No other CPU runs the mm,
 * so x86 flushes locally and sends no IPI at all.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "unflush.h"

static const char usage[] =
"usage: tlb-remote --remote|--local [--rounds N] [--pages N] [--reps N] [--quick]\n"
"\n"
"  --remote     thread A on the first CPU maps, writes and unmaps a chunk\n"
"               that thread B, spinning on the second CPU, has just read:\n"
"               every munmap needs a shootdown of B's CPU (x86: about one\n"
"               irq/TLB on B's CPU per round).  Needs 2 usable CPUs.\n"
"  --local      the same map/write/unmap in a single thread: on x86 no\n"
"               shootdown IPI at all.\n"
"  --rounds N   map/unmap rounds per repetition (default 2000, --quick 200)\n"
"  --pages N    pages per chunk (default 16)\n"
"  --reps N     repetitions, one UNFLUSH-RESULT line each (default 3)\n"
"  --quick      fewer rounds, for CI smoke runs\n"
"\n"
"Experiment ids: tlb-remote/remote (shape threads), tlb-remote/local\n"
"(shape single).  checks: b_reads (rounds B read the chunk; remote only),\n"
"expected.  The measured phase is the whole loop of rounds.\n";

struct shared {
	size_t len;
	_Atomic(volatile char *) chunk;
	atomic_long gen;	/* rounds A has published */
	atomic_long ack;	/* rounds B has finished reading */
	atomic_bool stop;
	atomic_bool ready;
	int cpu;
};

static void *reader_main(void *arg)
{
	struct shared *sh = arg;
	long seen = 0;

	pin_to_cpu(sh->cpu);
	atomic_store(&sh->ready, true);
	/* spin, never sleep: B must be running this mm when the flush comes */
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		long g = atomic_load_explicit(&sh->gen, memory_order_acquire);
		volatile char *c;

		if (g == seen)
			continue;
		c = atomic_load_explicit(&sh->chunk, memory_order_relaxed);
		for (size_t off = 0; off < sh->len; off += PAGE_SIZE_4K)
			(void)c[off];
		seen = g;
		atomic_store_explicit(&sh->ack, g, memory_order_release);
	}
	return NULL;
}

static void run_rounds(struct shared *sh, long rounds, bool remote)
{
	for (long r = 1; r <= rounds; r++) {
		char *c = mmap(NULL, sh->len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (c == MAP_FAILED)
			die(1, "mmap of %zu bytes failed", sh->len);
		for (size_t off = 0; off < sh->len; off += PAGE_SIZE_4K)
			c[off] = (char)r;
		if (remote) {
			atomic_store_explicit(&sh->chunk, c,
					      memory_order_relaxed);
			atomic_store_explicit(&sh->gen, r,
					      memory_order_release);
			/* B must have the translations before they go */
			while (atomic_load_explicit(&sh->ack,
						    memory_order_acquire) != r)
				;
		}
		munmap(c, sh->len);
	}
}

int main(int argc, char **argv)
{
	enum { OPT_REMOTE = OPT_FIRST_PRIVATE, OPT_LOCAL, OPT_ROUNDS,
	       OPT_PAGES };
	static const struct option opts[] = {
		{ "remote", no_argument, NULL, OPT_REMOTE },
		{ "local", no_argument, NULL, OPT_LOCAL },
		{ "rounds", required_argument, NULL, OPT_ROUNDS },
		{ "pages", required_argument, NULL, OPT_PAGES },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "quick", no_argument, NULL, OPT_QUICK },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int cpus[2], mode = 0, opt;
	long rounds = 0, pages = 16;
	struct fields checks = { 0 }, extra = { 0 };
	struct run_opts o;

	run_opts_init(&o, usage, false);
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (run_option(&o, opt, argv))
			continue;
		switch (opt) {
		case OPT_REMOTE:
		case OPT_LOCAL:
			if (mode && mode != opt)
				usage_error("--remote and --local exclude each other");
			mode = opt;
			break;
		case OPT_ROUNDS:
			rounds = parse_count("--rounds", optarg, 1);
			break;
		case OPT_PAGES:
			pages = parse_count("--pages", optarg, 1);
			break;
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (!mode)
		usage_error("say --remote or --local");
	if (!rounds)
		rounds = o.quick ? 200 : 2000;

	bool remote = mode == OPT_REMOTE;
	int ncpus = online_cpus(cpus, 2);

	if (remote && ncpus < 2)
		die(1, "--remote needs 2 usable CPUs, found %d; boot the guest with -smp 2 or more",
		    ncpus);
	pin_main(cpus[0]);

	for (int rep = 0; rep < o.reps; rep++) {
		struct shared sh = { .len = pages * PAGE_SIZE_4K };
		struct phase p = { 0 };
		pthread_t reader;

		fields_clear(&checks);
		fields_clear(&extra);

		if (remote) {
			sh.cpu = cpus[1];
			if (pthread_create(&reader, NULL, reader_main, &sh))
				die(1, "cannot start the reader thread");
			while (!atomic_load(&sh.ready))
				;
		}
		phase_begin(&p);
		run_rounds(&sh, rounds, remote);
		phase_end(&p);
		if (remote) {
			atomic_store(&sh.stop, true);
			pthread_join(reader, NULL);
			field_int(&checks, "b_reads", atomic_load(&sh.ack));
			field_int(&checks, "expected", rounds);
			field_int(&extra, "cpu_b", cpus[1]);
		}
		field_int(&extra, "rounds", rounds);
		field_int(&extra, "pages", pages);
		report_result(remote ? "tlb-remote/remote" : "tlb-remote/local",
			      remote ? "threads" : "single", rep, &p, &extra,
			      &checks);
		phase_free(&p);
	}
	return 0;
}
