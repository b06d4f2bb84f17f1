// SPDX-License-Identifier: GPL-2.0
/* move_pages(2) of a whole range of this process's memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/mempolicy.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "unflush.h"

void mover_init(struct mover *m, char *mem, size_t len)
{
	m->n = len / PAGE_SIZE_4K;
	m->pages = malloc(m->n * sizeof(*m->pages));
	m->nodes = malloc(m->n * sizeof(*m->nodes));
	m->status = malloc(m->n * sizeof(*m->status));
	if (!m->pages || !m->nodes || !m->status)
		die(1, "cannot allocate the move_pages arrays for %zu MiB",
		    len / MiB);
	for (long i = 0; i < m->n; i++)
		m->pages[i] = mem + i * PAGE_SIZE_4K;
}

long mover_move(struct mover *m, int node)
{
	long moved = 0;

	for (long i = 0; i < m->n; i++)
		m->nodes[i] = node;
	if (syscall(SYS_move_pages, 0, m->n, m->pages, m->nodes, m->status,
		    MPOL_MF_MOVE) < 0)
		die(1, "move_pages to node %d: %s%s", node, strerror(errno),
		    errno == ENOSYS ? " (kernel needs CONFIG_NUMA and CONFIG_MIGRATION)" : "");
	for (long i = 0; i < m->n; i++)
		moved += m->status[i] == node;
	return moved;
}

void mover_free(struct mover *m)
{
	free(m->pages);
	free(m->nodes);
	free(m->status);
}
