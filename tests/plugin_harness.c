// SPDX-License-Identifier: GPL-2.0
/*
 * Runs lab/plugin/insnprof.c without QEMU, to test what it decodes: the
 * few plugin API calls it makes are played here.  Arguments are the
 * plugin's (out=, arch=, insns=), and run=FILE@VCPU: translate FILE, the
 * raw words of an assembled aarch64 .text, as one block and run it once on
 * VCPU, in the order given.
 */
#include "../lab/plugin/insnprof.c"

struct qemu_plugin_insn {
	uint32_t word;
	int ncb;
	vcpu_udata_cb cb[4];
	void *udata[4];
};

struct qemu_plugin_tb {
	size_t n;
	struct qemu_plugin_insn insn[256];
	vcpu_udata_cb cb;
	void *udata;
};

static tb_trans_cb on_translate;

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb)
{
	on_translate = cb;
}

void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
					  vcpu_udata_cb cb,
					  enum qemu_plugin_cb_flags flags, void *udata)
{
	tb->cb = cb;
	tb->udata = udata;
}

void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
					    vcpu_udata_cb cb,
					    enum qemu_plugin_cb_flags flags,
					    void *udata)
{
	insn->cb[insn->ncb] = cb;
	insn->udata[insn->ncb++] = udata;
}

size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb)
{
	return tb->n;
}

uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb)
{
	return 0xffff800080010000ull;
}

struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb,
						 size_t i)
{
	return (struct qemu_plugin_insn *)&tb->insn[i];
}

const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn)
{
	return &insn->word;
}

size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn)
{
	return 4;
}

static void run(const char *file, unsigned int vcpu)
{
	static struct qemu_plugin_tb tb;
	FILE *f = fopen(file, "rb");

	if (!f) {
		perror(file);
		exit(2);
	}
	memset(&tb, 0, sizeof(tb));
	while (tb.n < 256 && fread(&tb.insn[tb.n].word, 4, 1, f) == 1)
		tb.n++;
	fclose(f);
	on_translate(0, &tb);
	if (tb.cb)
		tb.cb(vcpu, tb.udata);
	for (size_t i = 0; i < tb.n; i++)
		for (int c = 0; c < tb.insn[i].ncb; c++)
			tb.insn[i].cb[c](vcpu, tb.insn[i].udata[c]);
}

int main(int argc, char **argv)
{
	char *args[16];
	int nargs = 0;

	for (int i = 1; i < argc && nargs < 16; i++)
		if (strncmp(argv[i], "run=", 4))
			args[nargs++] = argv[i];
	qemu_plugin_install(0, NULL, nargs, args);
	for (int i = 1; i < argc; i++) {
		char *at = strrchr(argv[i], '@');

		if (!strncmp(argv[i], "run=", 4) && at) {
			*at = '\0';
			run(argv[i] + 4, atoi(at + 1));
		}
	}
	return 0;
}
