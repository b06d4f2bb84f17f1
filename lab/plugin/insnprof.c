// SPDX-License-Identifier: GPL-2.0
/*
 * insnprof: a QEMU TCG plugin that counts the guest instructions each
 * translation block runs on each vCPU, between two marker instructions the
 * guest executes: nopl 0x554e4631(%rax) opens a window, nopl
 * 0x554e4630(%rax) closes it (guest/lib/unflush.h: window_open(),
 * window_close()).  When a window closes it writes OUT.N (N counts from 0):
 * a line per block that ran in it, "address instructions count-on-vCPU0
 * count-on-vCPU1 ...".  lab/insnprof.py reads those against System.map.
 *
 * Inside a window a guest may also mark operations: nopl 0x554e4632(%rax)
 * begins one on the vCPU that runs it, nopl 0x554e4633(%rax) ends it
 * (op_begin(), op_end()).  Each op that begins and ends on one vCPU inside
 * the window is a line "vCPU instructions" of OUT.N.ops, written with
 * OUT.N: the distribution of what one operation ran on its CPU, where a
 * window gives only the sum.
 *
 * An arm64 guest (plugin argument arch=arm64) marks the same windows and
 * ops with "movz xzr, #imm", imm the low 16 bits of the x86 displacement.
 * There the plugin also counts, per vCPU, every TLBI and DSB instruction
 * the window ran, by kind (decoded once, at translation), and writes them
 * to OUT.N.tlbi: a line per kind that ran, "tlbi vale1is count-on-vCPU0
 * ...", "dsb ish ...".  arm64 has no shootdown interrupt: a broadcast TLBI
 * and the DSB that waits for it are what a remote flush costs there.
 *
 * With insns=0 the plugin counts no blocks (OUT.N is empty, no .ops),
 * only the markers, TLBIs and DSBs, which is safe under multi-threaded
 * TCG: vCPUs translate in parallel there, so translation takes a lock, and
 * each vCPU's thread adds only to its own counters.  What another vCPU runs
 * while the closing one writes the window may land in either window.
 *
 * Why: under -icount a guest's times are instruction counts, but a task's
 * CPU time also runs while the other vCPUs execute (one host thread runs
 * them in turn), so it cannot say which instructions were whose.  These
 * counts can.
 *
 * Counting is per block, at its entry: a block left early by an exception
 * is counted whole, a small overcount.  Block counts are only for one host
 * thread (-icount): nothing there is atomic.  A TLBI or DSB is counted
 * when it runs, exactly.  Written against QEMU 7.2's plugin API (version
 * 1), whose header Debian does not ship, hence the declarations below.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the few declarations of QEMU's plugin API this uses --- */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { CB_NO_REGS };
typedef void (*tb_trans_cb)(qemu_plugin_id_t, struct qemu_plugin_tb *);
typedef void (*vcpu_udata_cb)(unsigned int, void *);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, tb_trans_cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *,
					  vcpu_udata_cb,
					  enum qemu_plugin_cb_flags, void *);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *,
					    vcpu_udata_cb,
					    enum qemu_plugin_cb_flags, void *);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *,
						 size_t);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MAX_VCPUS 8
#define MARK_START 0x554e4631u
#define MARK_END   0x554e4630u
#define MARK_OP_BEGIN 0x554e4632u
#define MARK_OP_END   0x554e4633u

enum mark { M_START, M_END, M_OP_BEGIN, M_OP_END };

struct block {
	uint64_t pc;
	uint64_t n;
	uint64_t ran[MAX_VCPUS];	/* instructions, inside windows */
	struct block *next;
};

static struct block *blocks;	/* every translated block, newest first */
static bool counting;
static bool arm64;		/* arch=arm64: arm64 markers, TLBIs, DSBs */
static bool count_insns = true;	/* insns=0: markers, TLBIs and DSBs only */

/*
 * The kinds of TLBI and DSB seen so far, by name ("tlbi vale1is"), and
 * what each vCPU ran of each inside the current window.
 */
#define MAX_KINDS 64
static char kind_name[MAX_KINDS][24];
static int nr_kinds;
static uint64_t kind_ran[MAX_VCPUS][MAX_KINDS];
static int window;
static char prefix[256] = "window";

/* what each vCPU ran in the window so far, and where its open op began */
static uint64_t ran_total[MAX_VCPUS];
static uint64_t op_start[MAX_VCPUS];
static bool op_open[MAX_VCPUS];

struct op {
	unsigned int vcpu;
	uint64_t insns;
};
static struct op *ops;		/* the window's ended ops */
static size_t nr_ops, ops_cap;

static void block_ran(unsigned int vcpu, void *data)
{
	struct block *b = data;

	if (counting && vcpu < MAX_VCPUS) {
		b->ran[vcpu] += b->n;
		ran_total[vcpu] += b->n;
	}
}

static void op_ended(unsigned int vcpu)
{
	if (nr_ops == ops_cap) {
		ops_cap = ops_cap ? 2 * ops_cap : 4096;
		ops = realloc(ops, ops_cap * sizeof(*ops));
		if (!ops)
			abort();
	}
	ops[nr_ops].vcpu = vcpu;
	ops[nr_ops].insns = ran_total[vcpu] - op_start[vcpu];
	nr_ops++;
}

/* OUT.N.ops, if the window had ops; then forget them. */
static void dump_ops(const char *window_path)
{
	char path[310];
	FILE *f;

	if (nr_ops) {
		snprintf(path, sizeof(path), "%s.ops", window_path);
		f = fopen(path, "w");
		if (!f)
			fprintf(stderr, "insnprof: cannot write %s\n", path);
		for (size_t i = 0; f && i < nr_ops; i++)
			fprintf(f, "%u %llu\n", ops[i].vcpu,
				(unsigned long long)ops[i].insns);
		if (f)
			fclose(f);
	}
	nr_ops = 0;
	memset(ran_total, 0, sizeof(ran_total));
	memset(op_open, 0, sizeof(op_open));
}

/* OUT.N.tlbi: a line per kind that ran in the window; then zeroed. */
static void dump_kinds(const char *window_path)
{
	char path[310];
	FILE *f;

	if (!arm64)
		return;
	snprintf(path, sizeof(path), "%s.tlbi", window_path);
	f = fopen(path, "w");
	if (!f)
		fprintf(stderr, "insnprof: cannot write %s\n", path);
	for (int k = 0; k < nr_kinds; k++) {
		uint64_t any = 0;

		for (int v = 0; v < MAX_VCPUS; v++)
			any |= kind_ran[v][k];
		if (!any || !f)
			continue;
		fputs(kind_name[k], f);
		for (int v = 0; v < MAX_VCPUS; v++)
			fprintf(f, " %llu", (unsigned long long)kind_ran[v][k]);
		fputc('\n', f);
	}
	if (f)
		fclose(f);
	memset(kind_ran, 0, sizeof(kind_ran));
}

/* One line per (pc, n) with instructions in the window, then zeroed. */
static void dump(void)
{
	char path[300];
	FILE *f;

	snprintf(path, sizeof(path), "%s.%d", prefix, window++);
	f = fopen(path, "w");
	/* N still counts it: the windows then no longer pair with the results */
	if (!f)
		fprintf(stderr, "insnprof: cannot write %s\n", path);
	for (struct block *b = blocks; b; b = b->next) {
		bool any = false;

		for (int v = 0; v < MAX_VCPUS; v++)
			any |= b->ran[v] != 0;
		if (!any)
			continue;
		if (f) {
			fprintf(f, "%llx %llu", (unsigned long long)b->pc,
				(unsigned long long)b->n);
			for (int v = 0; v < MAX_VCPUS; v++)
				fprintf(f, " %llu", (unsigned long long)b->ran[v]);
			fputc('\n', f);
		}
		memset(b->ran, 0, sizeof(b->ran));
	}
	if (f)
		fclose(f);
	dump_ops(path);
	dump_kinds(path);
}

static void marker(unsigned int vcpu, void *data)
{
	enum mark kind = (uintptr_t)data;

	switch (kind) {
	case M_START:
		counting = true;
		break;
	case M_END:
		if (counting) {
			counting = false;
			dump();
		}
		break;
	case M_OP_BEGIN:
		/* outside a window nothing is counted, so no op either */
		if (counting && count_insns && vcpu < MAX_VCPUS) {
			op_start[vcpu] = ran_total[vcpu];
			op_open[vcpu] = true;
		}
		break;
	case M_OP_END:
		if (counting && vcpu < MAX_VCPUS && op_open[vcpu]) {
			op_open[vcpu] = false;
			op_ended(vcpu);
		}
		break;
	}
}

/* nopl disp32(%rax): 0f 1f 80 and the displacement, little-endian */
static int marker_kind(const struct qemu_plugin_insn *insn)
{
	const unsigned char *p = qemu_plugin_insn_data(insn);
	uint32_t disp;

	if (qemu_plugin_insn_size(insn) != 7 || p[0] != 0x0f || p[1] != 0x1f ||
	    p[2] != 0x80)
		return -1;
	memcpy(&disp, p + 3, 4);
	switch (disp) {
	case MARK_START:
		return M_START;
	case MARK_END:
		return M_END;
	case MARK_OP_BEGIN:
		return M_OP_BEGIN;
	case MARK_OP_END:
		return M_OP_END;
	}
	return -1;
}

static uint32_t arm64_word(const struct qemu_plugin_insn *insn)
{
	uint32_t w;

	if (qemu_plugin_insn_size(insn) != 4)
		return 0;
	memcpy(&w, qemu_plugin_insn_data(insn), 4);
	return w;
}

/* movz xzr, #imm (64-bit, no shift): 0xd280001f | imm << 5 */
static int arm64_marker_kind(uint32_t w)
{
	if ((w & 0xffe0001fu) != 0xd280001fu)
		return -1;
	switch ((w >> 5) & 0xffff) {
	case MARK_START & 0xffff:
		return M_START;
	case MARK_END & 0xffff:
		return M_END;
	case MARK_OP_BEGIN & 0xffff:
		return M_OP_BEGIN;
	case MARK_OP_END & 0xffff:
		return M_OP_END;
	}
	return -1;
}

/*
 * The name of a TLBI or DSB, or false for any other instruction.
 *
 * TLBI is SYS with op0 1: 1101 0101 0000 1 op1:3 CRn:4 CRm:4 op2:3 Rt:5,
 * CRn 8 (9: the nXS forms).  For EL1 (op1 0) CRm says the scope and the
 * kind: 3 inner shareable, 1 outer shareable, 7 this CPU only, each with
 * op2 0 all (VMALLE1), 2 by ASID, 1/3/5/7 by VA (VAE1, VAAE1 any ASID,
 * VALE1 last level, VAALE1); 2, 5 and 6 are the range forms of the same
 * scopes (RVAE1, RVAAE1, RVALE1, RVAALE1).  Others (EL2, EL3, stage 2)
 * are "other".
 * DSB is 1101 0101 0000 0011 0011 CRm:4 1001 1111, CRm its domain; CRm 0
 * and 4 are SSBB and PSSBB, not DSBs.
 */
static bool arm64_kind(uint32_t w, char *name, size_t size)
{
	static const char *const va[8] = {
		"vmalle1", "vae1", "aside1", "vaae1", NULL, "vale1", NULL, "vaale1" };
	static const char *const range[8] = {
		NULL, "rvae1", NULL, "rvaae1", NULL, "rvale1", NULL, "rvaale1" };
	static const char *const dsb[16] = {
		NULL, "oshld", "oshst", "osh", NULL, "nshld", "nshst", "nsh",
		NULL, "ishld", "ishst", "ish", NULL, "ld", "st", "sy" };

	if ((w & 0xfff80000u) == 0xd5080000u) {
		unsigned int op1 = (w >> 16) & 7, crn = (w >> 12) & 15;
		unsigned int crm = (w >> 8) & 15, op2 = (w >> 5) & 7;
		const char *base = NULL, *scope = "";

		if (crn != 8 && crn != 9)
			return false;
		if (op1 == 0) {
			switch (crm) {
			case 1: base = va[op2]; scope = "os"; break;
			case 3: base = va[op2]; scope = "is"; break;
			case 7: base = va[op2]; break;
			case 2: base = range[op2]; scope = "is"; break;
			case 5: base = range[op2]; scope = "os"; break;
			case 6: base = range[op2]; break;
			}
		}
		snprintf(name, size, "tlbi %s%s%s", base ? base : "other",
			 scope, crn == 9 ? "nxs" : "");
		return true;
	}
	if ((w & 0xfffff0ffu) == 0xd503309fu && dsb[(w >> 8) & 15]) {
		snprintf(name, size, "dsb %s", dsb[(w >> 8) & 15]);
		return true;
	}
	return false;
}

/* The index of a kind's name, added on first sight; -1 if the table is full. */
static int kind_index(const char *name)
{
	for (int k = 0; k < nr_kinds; k++)
		if (!strcmp(kind_name[k], name))
			return k;
	if (nr_kinds == MAX_KINDS)
		return -1;
	snprintf(kind_name[nr_kinds], sizeof(kind_name[0]), "%s", name);
	return nr_kinds++;
}

static void kind_ran_once(unsigned int vcpu, void *data)
{
	if (counting && vcpu < MAX_VCPUS)
		kind_ran[vcpu][(uintptr_t)data]++;
}

static pthread_mutex_t translating = PTHREAD_MUTEX_INITIALIZER;

static void translated(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	pthread_mutex_lock(&translating);
	if (count_insns) {
		struct block *b = calloc(1, sizeof(*b));

		if (!b)
			abort();
		b->pc = qemu_plugin_tb_vaddr(tb);
		b->n = n;
		b->next = blocks;
		blocks = b;
		qemu_plugin_register_vcpu_tb_exec_cb(tb, block_ran, CB_NO_REGS, b);
	}
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint32_t w = arm64 ? arm64_word(insn) : 0;
		int kind = arm64 ? arm64_marker_kind(w) : marker_kind(insn);
		char name[24];

		if (kind >= 0)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, marker,
				CB_NO_REGS, (void *)(uintptr_t)kind);
		if (arm64 && arm64_kind(w, name, sizeof(name))) {
			int k = kind_index(name);

			if (k < 0)
				fprintf(stderr, "insnprof: more than %d kinds, %s "
					"not counted\n", MAX_KINDS, name);
			else
				qemu_plugin_register_vcpu_insn_exec_cb(insn,
					kind_ran_once, CB_NO_REGS,
					(void *)(uintptr_t)k);
		}
	}
	pthread_mutex_unlock(&translating);
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
			int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], "out=", 4))
			snprintf(prefix, sizeof(prefix), "%s", argv[i] + 4);
		else if (!strcmp(argv[i], "arch=arm64"))
			arm64 = true;
		else if (!strcmp(argv[i], "insns=0"))
			count_insns = false;
	qemu_plugin_register_vcpu_tb_trans_cb(id, translated);
	return 0;
}
