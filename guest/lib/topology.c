// SPDX-License-Identifier: GPL-2.0
/* Which CPUs and NUMA nodes there are, and pinning threads to CPUs. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/mempolicy.h>
#include <stdio.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

bool parse_list(const char *text, bool *set, int max)
{
	const char *p = text;

	memset(set, 0, max * sizeof(*set));
	while (*p && *p != '\n') {
		char *end;
		long lo = strtol(p, &end, 10), hi = lo;

		if (end == p || lo < 0)
			return false;
		if (*end == '-') {
			p = end + 1;
			hi = strtol(p, &end, 10);
			if (end == p || hi < lo)
				return false;
		}
		for (long i = lo; i <= hi && i < max; i++)
			set[i] = true;
		p = end;
		if (*p == ',')
			p++;
		else if (*p && *p != '\n')
			return false;
	}
	return true;
}

static int list_file(const char *path, int *out, int max)
{
	bool set[MAX_CPUS];
	char text[4096];
	int n = 0;

	if (!setting_read(path, text, sizeof(text)) ||
	    !parse_list(text, set, MAX_CPUS))
		return -1;
	for (int i = 0; i < MAX_CPUS && n < max; i++)
		if (set[i])
			out[n++] = i;
	return n;
}

/*
 * The CPUs we were started on, before any pinning: taskset or a cpuset may
 * have fenced the program in, and pinning the main thread must not make the
 * helpers' CPUs look unusable.
 */
static cpu_set_t allowed;
static bool allowed_ok;

__attribute__((constructor)) static void remember_allowed_cpus(void)
{
	allowed_ok = !sched_getaffinity(0, sizeof(allowed), &allowed);
}

int online_cpus(int *cpus, int max)
{
	int online[MAX_CPUS], n, count = 0;

	n = list_file("/sys/devices/system/cpu/online", online, MAX_CPUS);
	if (n < 0)
		die(1, "cannot read /sys/devices/system/cpu/online: is sysfs mounted?");
	if (!allowed_ok)
		die(1, "sched_getaffinity failed at start-up");
	for (int i = 0; i < n && count < max; i++)
		if (online[i] < CPU_SETSIZE && CPU_ISSET(online[i], &allowed))
			cpus[count++] = online[i];
	return count;
}

void pin_to_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	/* pid 0 is the calling thread, not the whole process */
	if (sched_setaffinity(0, sizeof(set), &set))
		die(1, "cannot pin to CPU %d: %s", cpu, strerror(errno));
}

static pid_t worker;

static void forward_signal(int sig)
{
	kill(worker, sig);
}

void pin_main(int cpu)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa = { .sa_handler = forward_signal };
	int status;

	pin_to_cpu(cpu);
	fflush(NULL);
	worker = fork();
	if (worker < 0)
		die(1, "fork: %s", strerror(errno));
	if (worker == 0) {
		/* if the parent is killed, clean up and go too */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		ktap_adopt();
		return;
	}
	/* the worker restores what it changed: let it finish doing so */
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	while (waitpid(worker, &status, 0) < 0)
		if (errno != EINTR)
			die(1, "waitpid: %s", strerror(errno));
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		raise(WTERMSIG(status));
		_exit(128 + WTERMSIG(status));
	}
	_exit(WEXITSTATUS(status));
}

int node_list(const char *name, int *nodes, int max)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/devices/system/node/%s", name);
	return list_file(path, nodes, max);
}

int cpuless_node(void)
{
	int mem[64], cpu[64], nmem, ncpu;

	nmem = node_list("has_memory", mem, 64);
	ncpu = node_list("has_cpu", cpu, 64);
	if (ncpu <= 0)
		return -1;
	for (int m = 0; m < nmem; m++) {
		bool has_cpu = false;

		for (int c = 0; c < ncpu; c++)
			has_cpu |= cpu[c] == mem[m];
		if (!has_cpu)
			return mem[m];
	}
	return -1;
}

void bind_memory(int node)
{
	unsigned long mask = node < 0 ? 0 : 1UL << node;
	int policy = node < 0 ? MPOL_DEFAULT : MPOL_BIND;

	if (node >= (int)(8 * sizeof(mask)))
		die(1, "node %d: only nodes below %zu can be bound", node,
		    8 * sizeof(mask));
	if (syscall(SYS_set_mempolicy, policy, node < 0 ? NULL : &mask,
		    node < 0 ? 0 : 8 * sizeof(mask)))
		die(1, "set_mempolicy(%s, node %d): %s (needs CONFIG_NUMA)",
		    node < 0 ? "MPOL_DEFAULT" : "MPOL_BIND", node,
		    strerror(errno));
}

long long node_free_bytes(int node)
{
	char path[80], line[256];
	long long kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo",
		 node);
	f = fopen(path, "r");
	if (!f)
		die(1, "cannot read %s: %s", path, strerror(errno));
	while (kb < 0 && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "MemFree:");

		if (p)
			kb = strtoll(p + strlen("MemFree:"), NULL, 10);
	}
	fclose(f);
	if (kb < 0)
		die(1, "no MemFree in %s", path);
	return kb * 1024;
}
