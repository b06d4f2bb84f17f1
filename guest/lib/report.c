// SPDX-License-Identifier: GPL-2.0
/*
 * The result lines the host lab parses: one line each, a fixed prefix and
 * compact JSON, so they survive being mixed with kernel messages on a serial
 * console.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "unflush.h"

void jb_printf(struct jbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->s = realloc(b->s, b->cap);
		if (!b->s)
			die(1, "out of memory");
	}
	va_start(ap, fmt);
	vsnprintf(b->s + b->len, n + 1, fmt, ap);
	va_end(ap);
	b->len += n;
}

void jb_string(struct jbuf *b, const char *text)
{
	jb_printf(b, "\"");
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		if (*c == '"' || *c == '\\')
			jb_printf(b, "\\%c", *c);
		else if (*c < 0x20)
			jb_printf(b, "\\u%04x", *c);
		else
			jb_printf(b, "%c", *c);
	}
	jb_printf(b, "\"");
}

void jb_phase(struct jbuf *b, const struct phase *p)
{
	unsigned int missing = p->before.missing | p->after.missing;
	bool first = true;

	if (phase_has(p, "irq/TLB"))
		jb_printf(b, "\"tlb_shootdown_irqs\":%lld",
			  phase_delta(p, "irq/TLB"));
	else
		jb_printf(b, "\"tlb_shootdown_irqs\":null");
	jb_printf(b, ",\"counters\":{");
	for (int i = 0; i < p->after.n; i++) {
		if (i)
			jb_printf(b, ",");
		jb_string(b, p->after.v[i].name);
		jb_printf(b, ":%lld", phase_delta(p, p->after.v[i].name));
	}
	jb_printf(b, "},\"missing\":[");
	for (int i = 0; i < NR_SOURCES; i++) {
		if (!(missing & (1u << i)))
			continue;
		if (!first)
			jb_printf(b, ",");
		jb_string(b, source_name(i));
		first = false;
	}
	jb_printf(b, "]");
}

static void field_key(struct fields *f, const char *key)
{
	if (f->b.len)
		jb_printf(&f->b, ",");
	jb_string(&f->b, key);
	jb_printf(&f->b, ":");
}

void field_int(struct fields *f, const char *key, long long value)
{
	field_key(f, key);
	jb_printf(&f->b, "%lld", value);
}

void field_real(struct fields *f, const char *key, double value)
{
	field_key(f, key);
	/* JSON has no inf or nan */
	if (isfinite(value))
		jb_printf(&f->b, "%.9g", value);
	else
		jb_printf(&f->b, "null");
}

void field_str(struct fields *f, const char *key, const char *value)
{
	field_key(f, key);
	jb_string(&f->b, value);
}

void field_raw(struct fields *f, const char *key, const char *json)
{
	field_key(f, key);
	jb_printf(&f->b, "%s", json);
}

void fields_clear(struct fields *f)
{
	f->b.len = 0;
}

void report_result(const char *experiment, const char *shape, int rep,
		   const struct phase *p, const struct fields *extra,
		   const struct fields *checks)
{
	struct jbuf b = { 0 };

	jb_printf(&b, "{\"experiment\":");
	jb_string(&b, experiment);
	jb_printf(&b, ",\"shape\":");
	jb_string(&b, shape);
	jb_printf(&b, ",\"rep\":%d,\"elapsed_s\":%.9g,", rep,
		  phase_elapsed(p));
	if (p->window[0]) {
		jb_printf(&b, "\"window\":");
		jb_string(&b, p->window);
		jb_printf(&b, ",");
	}
	if (extra && extra->b.len)
		jb_printf(&b, "%.*s,", (int)extra->b.len, extra->b.s);
	jb_phase(&b, p);
	jb_printf(&b, ",\"checks\":{%.*s}}", checks ? (int)checks->b.len : 0,
		  checks && checks->b.s ? checks->b.s : "");
	printf("UNFLUSH-RESULT %s\n", b.s);
	fflush(stdout);
	free(b.s);
}
