// SPDX-License-Identifier: GPL-2.0
/*
 * luf-hazards: attack the hazard rules of LUF, the lazy unmap flush
 * (Documentation/mm/luf.rst, patch 0014: "Hazards and rules").
 *
 * Under LUF, when reclaim unmaps a clean folio of a file nobody has open for
 * writing and every PTE to it was read-only, the kernel does not flush: other
 * CPUs keep a read-only translation to the old page P, which is held (not
 * freed) until a flush.  That is safe only while P holds what it held and a
 * fresh translation would give the same bytes; each rule flushes before that
 * stops being true.  Each mode breaks the second half (or, in reuse, the
 * first) right after a lazy take-away and checks that the reader, pinned
 * alone on the last CPU and reading all along through its old translation,
 * sees the change.
 *
 * The series' selftest luf_hazards (tools/testing/selftests/mm) attacks the
 * rules six ways that need nothing but a file on disk: a COW write, a write
 * through /proc/self/mem, a buffered and a direct write, a truncation and a
 * new mapping.  The modes here are the rest: the bdev modes write a mounted
 * filesystem's blocks through its device and mount it again, which a
 * selftest must not do to the machine it runs on; the anonymous modes need
 * swap, demote and compact a CPU-less node in a lower memory tier; and the
 * canary of the reuse modes gets the released pages only where nothing
 * else allocates, as in the lab's guest:
 *
 *   bdev      R4: the helper writes new data over the file's blocks
 *             through the block device under its filesystem (FIBMAP
 *             finds them), opened O_DIRECT after the take-away: nobody
 *             opens the file, and the file's page cache is not touched.
 *             One page a trial: a kernel that flushes at the open lets
 *             the reader fault the page in again, from the old blocks,
 *             before the write, and the page cache then keeps the old
 *             data, which is what the reader must see in that trial (the
 *             helper reads the file back to know which it is);
 *   bdev-closed  R4 too: the helper writes the blocks through the device
 *             before the take-away, while the page is cached and mapped,
 *             and closes it; the take-away then drops the page with its
 *             old bytes, and a read brings the new ones.  A device that
 *             had a writer since its mount keeps its files from being made
 *             lazy, so on a correct kernel the take-away flushes: the
 *             trial counts as refused (nr_tlb_luf_fallback_file), and the
 *             reader must see the new bytes all the same.  Both bdev modes
 *             mount the filesystem again after each trial (and once before
 *             the first), so that each trial begins on a device unwritten
 *             since its mount;
 *   reuse     R1: the stale-translation attack; the helper makes LUF
 *             release the held pages (the switch off and on: flush, then
 *             free on its CPU) and fills fresh pages with a canary, which
 *             gets them;
 *   demote    R1 too, but the pages are taken by asynchronous migration,
 *             whose lazy sources migrate_folio_done() holds, not by
 *             reclaim: the program runs in a memory cgroup of its own, and
 *             the helper writes to its memory.reclaim, whose proactive
 *             reclaim demotes the file pages to a CPU-less node in a lower
 *             memory tier (MADV_PAGEOUT's reclaim never demotes, and
 *             move_pages() migrates synchronously, never lazily).
 *   anon-write  R3, for anonymous memory: pages written, swapped out and
 *             shared with the helper by fork(), so that main's read fault
 *             maps them read-only and clean; after the lazy swap-out the
 *             helper drops its copy and main writes: do_swap_page() now
 *             maps the page writable, its own and no one else's;
 *   anon-force  R3, force for anonymous memory: main's own pages
 *             (not shared), written, swapped out and mprotect()ed to
 *             PROT_READ, so that the swap-in maps them read-only, clean and
 *             exclusive; after the lazy swap-out main writes through
 *             /proc/self/mem: do_swap_page() maps the page read-only (no
 *             VM_WRITE), do_wp_page() reuses it, and GUP writes it;
 *   anon-reuse  R1, as reuse, for anon-write's pages: the swapped-out
 *             page is released and the canary fills it;
 *   anon-move R5: anonymous pages of main's own (not shared), made
 *             read-only at swap-in by soft-dirty tracking; after the lazy
 *             swap-out main moves the swap entries away with UFFDIO_MOVE,
 *             and the address, none now, must read zeroes; main then
 *             read-faults it (MADV_POPULATE_READ), for CONFIG_DEBUG_LUF to
 *             compare the zero page with the old one;
 *   anon-demote  R1, as demote, for anon-reuse's pages: they are charged to
 *             a memory cgroup of their own, which main leaves before the
 *             trials, and the helper's memory.reclaim of it, anonymous
 *             only, demotes them;
 *   loop-backing, partition, loop-change-fd, dm-linear, dm-reload,
 *   loop-offset  R9:
 *             the file's blocks change below its filesystem's device, on a
 *             stack of the mode's own in --dir, made before the mount: the
 *             loop device's backing image written; a partition of the
 *             mounted whole disk that covers the filesystem written; the
 *             loop device under dm-linear written; the other of two images
 *             made the loop device's (LOOP_CHANGE_FD, before the take-away:
 *             the ioctl flushes every TLB) or the dm-linear device's (a
 *             table load into a read-only device); the other of two
 *             copies in one image made the loop device's by moving its
 *             offset (LOOP_SET_STATUS64, before the take-away as well).
 *             Then, as in bdev, the read-back fills the evicted index from
 *             the new blocks;
 *   below-random  R9 too, hunting: a stack drawn from --seed (loop,
 *             partitions made every way, device mapper, a sibling device
 *             over the same blocks), and each trial the next of the
 *             routes it has to change the blocks (written, punched,
 *             zeroed, discarded), before or after the take-away;
 *   compact   R1, as reuse, but the pages are taken by compaction, which
 *             migrates them within the CPU-less node 1 (their page cache is
 *             read there) and frees its lazy sources itself when it ends:
 *             the helper compacts the node (its sysfs compact file), whose
 *             other pages are locked (compaction leaves unevictable pages
 *             alone with vm.compact_unevictable_allowed at 0), every other
 *             run of 32, so that the trial's page is the one thing it moves.
 *
 * After main says "done", the reader must see the new data (never the
 * canary in the reuse, demote and compact modes); the old bytes are a
 * violation, printed at once.  A trial counts only if the take-away was
 * lazy: nr_tlb_luf_folios moved by the trial's pages (in demote, also every
 * page now on the lower node).  The reader, the helper and the trial's
 * mechanics are lib/reader.c's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/blkpg.h>
#include <linux/blkzoned.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <string.h>
#include <mntent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "ktap.h"
#include "unflush.h"

static const char usage[] =
"usage: luf-hazards bdev|bdev-closed|reuse|demote|anon-write|anon-force|\n"
"                   anon-reuse|anon-move|anon-demote|compact|loop-backing|\n"
"                   partition|loop-change-fd|dm-linear|dm-reload|\n"
"                   loop-offset|md-raid1|dm-crypt|dm-snapshot|dm-thin|\n"
"                   scsi-passthrough|nvme-passthrough|zone-reset|\n"
"                   below-random|swap-below [--seed N]\n"
"                   [--trials N]\n"
"                   [--pages N] [--dir DIR] [--linger N] [--disable-rules MASK]\n"
"                   [--keep-going] [--quick]\n"
"\n"
"Attacks the hazard rules of LUF, the lazy unmap flush\n"
"(Documentation/mm/luf.rst in the kernel) that the kernel's selftest\n"
"luf_hazards (tools/testing/selftests/mm) does not.\n"
"A reader thread pinned alone on the last CPU keeps reading a file's pages\n"
"through a fresh mapping.  A helper process on the first CPU takes them away\n"
"with process_madvise(MADV_PAGEOUT) (demote: memory.reclaim); LUF leaves the\n"
"reader's translation stale.  Then the mode changes what a fresh translation\n"
"would give, says \"done\", and the reader must see the change.\n"
"\n"
"modes (the rule each attacks):\n"
"  bdev         R4: MAP_SHARED, PROT_READ; the helper opens the block\n"
"               device under the file's filesystem (O_DIRECT, after the\n"
"               take-away; made in /dev if missing) and writes new data\n"
"               over the file's blocks (FIBMAP), then reads the file back:\n"
"               the new data, or the old where the page was read in again\n"
"               before the write (refaulted_trials), which the reader\n"
"               must then see\n"
"  bdev-closed  R4: as bdev, but the helper writes the blocks before the\n"
"               take-away, while the page is cached, and closes the device;\n"
"               a correct kernel then does not make the page lazy (trials\n"
"               count as refused_trials) and the reader must see the new\n"
"               data the file reads back.  Both bdev modes unmount and\n"
"               mount the filesystem of --dir again before the first trial\n"
"               and after each one (nothing else may be using it)\n"
"  loop-backing, partition, loop-change-fd, dm-linear, dm-reload,\n"
"  loop-offset\n"
"               R9: an ext2 on a loop device over an image in --dir (the\n"
"               whole loop device, partitioned; or dm-linear over it); the\n"
"               helper writes the image, a partition covering the\n"
"               filesystem, or the loop device under dm, or makes a second\n"
"               image the one read (LOOP_CHANGE_FD; a dm table load; in\n"
"               loop-offset, the second copy in one image, by moving the\n"
"               loop device's offset with LOOP_SET_STATUS64), then\n"
"               reads the file back like bdev; the reader must see the\n"
"               new data\n"
"  below-random R9: a stack drawn from --seed (default: from the time;\n"
"               the result says which, and what was drawn): the image in\n"
"               --dir or on a tmpfs of its own, a loop device, partition\n"
"               1 (the filesystem on it, or over a filesystem on the whole\n"
"               disk: in the table, added or grown while mounted), up to\n"
"               two dm-linear devices and one beside them; each trial the\n"
"               next of every route the stack has (the image written or\n"
"               punched; a device below the filesystem's written, zeroed\n"
"               or discarded), before or after the take-away\n"
"  md-raid1, dm-crypt, dm-snapshot, dm-thin, scsi-passthrough,\n"
"  nvme-passthrough, zone-reset\n"
"               R9, as below-random (--seed draws the order of the routes\n"
"               and before or after), on a stack of one kind: md raid1\n"
"               of two loop devices (both members written); dm-crypt,\n"
"               written and zeroed through a second dm-crypt with its key;\n"
"               a dm-snapshot-origin whose origin (device or image) is\n"
"               written, or a persistent snapshot of which, written, is\n"
"               merged into it (snapshot-merge);\n"
"               a dm-thin volume whose pool's data device (or image) is\n"
"               written where the volume's blocks are; scsi_debug's disk\n"
"               written by SG_IO (through the disk opened read-only and its\n"
"               sg node: WRITE(10), WRITE SAME(10) of zeroes) and through\n"
"               its bsg node; the guest's NVMe disk (the lab's --nvme SIZE)\n"
"               written by NVME_IOCTL_IO_CMD (Write through the disk opened\n"
"               read-only, Write and Write Zeroes through its generic node)\n"
"               and by io_uring's IORING_OP_URING_CMD (Write, generic node);\n"
"               the guest's zoned NVMe namespace (ZNS, --nvme too), ext2\n"
"               copied on in zone order and mounted read-only, each block's\n"
"               zone reset and written again with the block's new data, by\n"
"               NVMe passthrough through the namespace opened read-only and\n"
"               its generic node\n"
"  reuse        R1: the helper releases the held pages (the luf switch off\n"
"               and on) and fills fresh pages with a canary, which gets them\n"
"               (PFNs); the reader must never see it\n"
"  demote       R1, as reuse, but the take-away is reclaim's demotion (an\n"
"               asynchronous migration, lazy too): the program runs in a\n"
"               memory cgroup of its own (removed at exit) and the helper\n"
"               writes to its memory.reclaim; needs a CPU-less memory node\n"
"               in a lower memory tier (the lab: --node1 SIZE), demotion\n"
"               switched on here (and NUMA balancing off: its scans would\n"
"               flush the reader's TLB), both put back at exit; a trial\n"
"               counts only if every page went to that node (move_pages)\n"
"  anon-write   R3 for anonymous memory: MAP_PRIVATE|MAP_ANONYMOUS pages,\n"
"               written, swapped out and then shared with the helper by\n"
"               fork(), read back in (read-only: not exclusive); after the\n"
"               take-away (a swap-out) the helper unmaps its copy and main\n"
"               writes new data (the swap-in maps the page writable)\n"
"  anon-force   R3, force for anonymous memory: main's own pages\n"
"               (MADV_DONTFORK), written, swapped out, mprotect()ed to\n"
"               PROT_READ, so that the swap-in maps them read-only and\n"
"               exclusive; after the take-away main writes new data through\n"
"               /proc/self/mem and reads it back\n"
"  anon-reuse   R1, as reuse, for anon-write's pages\n"
"  swap-below   R9 for anonymous memory: anon-force's pages, swapped to an\n"
"               area of its own, preferred, on a loop device over an\n"
"               image in --dir; after the take-away main writes new data\n"
"               into their slots in the image, then reads them through\n"
"               /proc/self/mem: the swap-in reads the changed slots\n"
"  anon-move    R5: main's own anonymous pages (MADV_DONTFORK), written,\n"
"               swapped out, soft-dirty cleared (/proc/self/clear_refs), so\n"
"               that the swap-in maps them read-only; after the take-away\n"
"               main moves their swap entries to another address\n"
"               (UFFDIO_MOVE): the reader must then read zeroes; main\n"
"               read-faults the emptied addresses (MADV_POPULATE_READ)\n"
"  anon-demote  R1, as demote, for anon-reuse's pages: made in a memory\n"
"               cgroup of their own, which main leaves before the trials\n"
"               (the pages stay charged to it, their swap-in too), so that\n"
"               the helper's memory.reclaim, of anonymous pages only,\n"
"               demotes nothing else of main's\n"
"  compact      R1, as reuse, but the take-away is compaction of the\n"
"               CPU-less node (its sysfs compact file), where the pages are\n"
"               read in and where the canary's come from; every other run\n"
"               of 32 pages of the node's free memory is locked first, and\n"
"               vm.compact_unevictable_allowed set to 0 (put back at exit),\n"
"               so that the trial's page is all compaction moves; a trial\n"
"               counts only if it moved every page, on that node\n"
"               (the anon modes need swap: the lab's --zram SIZE)\n"
"\n"
"  --trials N   lazy trials to run (default 1000, --quick 200)\n"
"  --pages N    pages per trial (default 4, demote, anon-demote, compact\n"
"               and the bdev and R9 modes 1, swap-below too;\n"
"               at most 64)\n"
"  --dir DIR    where to make the files: a disk filesystem (not tmpfs: LUF\n"
"               acts on clean page cache) the program can write (default\n"
"               /scratch: the lab's guest makes an ext2 on zram there when\n"
"               booted with unflush.scratch=SIZE); removed at exit\n"
"  --linger N   reader passes over the pages after \"done\" (default 20)\n"
"  --disable-rules MASK\n"
"               write MASK to /sys/kernel/debug/luf/disable_rules\n"
"               (CONFIG_DEBUG_LUF; 0 again at exit): bit 0 R1, 1 R3, 2 R4,\n"
"               3 R5 (userfaultfd), 4 R6, 6 R9; to see a mode fail without\n"
"               its rule\n"
"  --keep-going do not stop after the first trial with a violation\n"
"  --quick      fewer trials, for CI\n"
"\n"
"Needs root, 2 usable CPUs, a kernel with LUF (" LUF_SWITCH ",\n"
"switched on here and put back at exit) and nr_tlb_luf_folios in\n"
"/proc/vmstat (CONFIG_VM_EVENT_COUNTERS): a trial whose take-away did not move\n"
"it was not lazy and is not counted (missed_trials), nor is one in which\n"
"the reader's CPU ran anything else between the take-away and the mode's\n"
"operation (disturbed_trials: switching back flushes its TLB).  Each\n"
"violation is printed at once as 'UNFLUSH-VIOLATION {json}' (kind old: the\n"
"bytes from before the take-away; canary; foreign: anything else); at the\n"
"end one UNFLUSH-RESULT line, experiment luf-hazards/<mode>, with trials,\n"
"violations, rule, disable_rules and the first violations;\n"
"checks: attempts, missed_trials, lazy_trials, disturbed_trials,\n"
"luf_folios, taken_pages, reused_pages, expected_pages (the demote modes: also\n"
"demoted_pages: demote, pages found on the lower node after the take-away;\n"
"anon-demote, pages migrated by it, pgmigrate_success; compact:\n"
"compacted_pages, pages moved and still on the node; the bdev modes:\n"
"refaulted_trials; bdev-closed: refused_trials, counted in trials; anon-move:\n"
"unmovable_trials, a page UFFDIO_MOVE would not move (swap-below: a page\n"
"swapped in again before the write), counted as disturbed;\n"
"the deck modes (below-random and the stack modes after it above): seed\n"
"and stack in the result, route_trials by route, route_violations (the\n"
"trials with a violation by route, which --keep-going makes useful),\n"
"before_trials, writers).\n"
"KTAP (lib/ktap.h): one test, luf-hazards/<mode>, after the result line.\n"
"Exit 0: no violation; 1: violations, or a precondition failed (no result\n"
"line; the test's KTAP line says why); 4: skipped, the kernel or the\n"
"machine lacks what the mode needs (LUF, a CPU-less node, soft-dirty bits,\n"
"userfaultfd moves, the debug kernel's rule switches); 2: usage.\n";

#define DISABLE_RULES	"/sys/kernel/debug/luf/disable_rules"
#define UNMAP_FLUSH	"/sys/kernel/mm/tlb_batching/unmap_flush"
#define DEMOTION	"/sys/kernel/mm/numa/demotion_enabled"
#define NUMA_BALANCING	"/proc/sys/kernel/numa_balancing"
#define COMPACT_UNEVICTABLE	"/proc/sys/vm/compact_unevictable_allowed"
/*
 * demote's request to memory.reclaim.  File pages only: no swap-out and no
 * demotion of anonymous pages, whose flush would reach the reader (main's
 * anonymous pages are in the cgroup too) and make the trial prove nothing.
 * One page: each write ends after the first reclaim call (priorities 12 to
 * 0) that reclaims anything.  The demoted copy of a page, mapped by an old
 * PTE and its referenced flag used up, is reclaimed from node 1 the first
 * time reclaim meets it; it is safe only in the priority pass that made it
 * (node 1's scan is sized before), so no call may go on after it.
 */
#define RECLAIM_ARG	"4K swappiness=0"
/*
 * anon-demote's: anonymous pages only.  Its cgroup holds nothing else that
 * reclaim could take (main leaves it once the trial pages are made), so no
 * other page's flush reaches the reader.
 */
#define RECLAIM_ARG_ANON	"4K swappiness=200"
#define CLEAR_REFS	"/proc/self/clear_refs"

/* UFFDIO_MOVE (Linux 6.8), for userspace headers that predate it */
#ifndef UFFDIO_MOVE
#define UFFD_FEATURE_MOVE	(1 << 16)
struct uffdio_move {
	__u64 dst;
	__u64 src;
	__u64 len;
	__u64 mode;
	__s64 move;
};
#define UFFDIO_MOVE	_IOWR(UFFDIO, 0x05, struct uffdio_move)
#endif
#define NEW_MAGIC	0x4E3E3000ULL	/* high 32 bits of word 0 of new data */

enum mode { BDEV, BDEV_CLOSED, REUSE, DEMOTE, ANON_WRITE, ANON_FORCE,
	    ANON_REUSE, ANON_MOVE, ANON_DEMOTE, COMPACT, LOOP_BACKING,
	    PARTITION, LOOP_CHANGE_FD, DM_LINEAR, DM_RELOAD, LOOP_OFFSET,
	    BELOW_RANDOM, SWAP_BELOW, MD_RAID1, DM_CRYPT, DM_SNAPSHOT, DM_THIN,
	    SCSI_PASSTHROUGH, NVME_PASSTHROUGH, ZONE_RESET };
static const struct {
	const char *rule;
	enum after_done after;
} modes[] = {
	[BDEV]     = { "R4",    AFTER_NEW },
	[BDEV_CLOSED] = { "R4", AFTER_NEW },
	[REUSE]    = { "R1",    AFTER_SAME },
	[DEMOTE]   = { "R1",    AFTER_SAME },
	[ANON_WRITE] = { "R3",  AFTER_NEW },
	[ANON_FORCE] = { "R3",  AFTER_NEW },
	[ANON_REUSE] = { "R1",  AFTER_SAME },
	[ANON_MOVE]  = { "R5",  AFTER_NEW },
	[ANON_DEMOTE] = { "R1", AFTER_SAME },
	[COMPACT]  = { "R1",    AFTER_SAME },
	[LOOP_BACKING] = { "R9", AFTER_NEW },
	[PARTITION] = { "R9",   AFTER_NEW },
	[LOOP_CHANGE_FD] = { "R9", AFTER_NEW },
	[DM_LINEAR] = { "R9",   AFTER_NEW },
	[DM_RELOAD] = { "R9",   AFTER_NEW },
	[LOOP_OFFSET] = { "R9", AFTER_NEW },
	[BELOW_RANDOM] = { "R9", AFTER_NEW },
	[SWAP_BELOW] = { "R9",  AFTER_NEW },
	[MD_RAID1] = { "R9",    AFTER_NEW },
	[DM_CRYPT] = { "R9",    AFTER_NEW },
	[DM_SNAPSHOT] = { "R9", AFTER_NEW },
	[DM_THIN]  = { "R9",    AFTER_NEW },
	[SCSI_PASSTHROUGH] = { "R9", AFTER_NEW },
	[NVME_PASSTHROUGH] = { "R9", AFTER_NEW },
	[ZONE_RESET] = { "R9",  AFTER_NEW },
};
enum op { OP_TAKE = 1, OP_BDEV, OP_BDEV_WRITE, OP_BDEV_CHECK, OP_REUSE,
	  OP_DROP, OP_BELOW,
	  /* below-random: OP_ROUTE + route_op() */
	  OP_ROUTE = 16 };

static enum mode mode;
static int lower_node = -1;	/* demote, compact: the CPU-less node */
static int mem_fd = -1;		/* anon-force: /proc/self/mem, read-write;
				   swap-below: read-only */
/* bdev: the block device under the file's filesystem, its blocks' size */
static char bdev_path[64], bdev_made[64], fs_type[32];
static int fs_block;

/* the modes whose helper fills the released pages with a canary */
static bool canary_mode(void)
{
	return mode == REUSE || mode == DEMOTE || mode == ANON_REUSE ||
	       mode == ANON_DEMOTE || mode == COMPACT;
}

/* the modes whose take-away is reclaim's demotion */
static bool demote_mode(void)
{
	return mode == DEMOTE || mode == ANON_DEMOTE;
}

/* the modes whose pages go to or stay on the CPU-less node */
static bool node_mode(void)
{
	return demote_mode() || mode == COMPACT;
}

/* the modes whose pages are anonymous, not a file's */
static bool anon_mode(void)
{
	return mode == ANON_WRITE || mode == ANON_FORCE || mode == ANON_REUSE ||
	       mode == ANON_MOVE || mode == ANON_DEMOTE || mode == SWAP_BELOW;
}

/* the modes that write the file's blocks through its block device */
static bool bdev_mode(void)
{
	return mode == BDEV || mode == BDEV_CLOSED;
}

/*
 * The below modes whose trials take their routes from a deck (--seed):
 * below-random's drawn stack, and the stacks of md, dm-crypt,
 * dm-snapshot, dm-thin, a SCSI disk, an NVMe disk and a zoned one
 * (stack_setup()).
 */
static bool deck_mode(void)
{
	return mode == BELOW_RANDOM || mode == MD_RAID1 || mode == DM_CRYPT ||
	       mode == DM_SNAPSHOT || mode == DM_THIN ||
	       mode == SCSI_PASSTHROUGH || mode == NVME_PASSTHROUGH ||
	       mode == ZONE_RESET;
}

/* the modes that change the file's blocks below its filesystem's device */
static bool below_mode(void)
{
	return mode == LOOP_BACKING || mode == PARTITION ||
	       mode == LOOP_CHANGE_FD || mode == DM_LINEAR ||
	       mode == DM_RELOAD || mode == LOOP_OFFSET || deck_mode();
}

/* The below modes that make other blocks the ones the filesystem reads. */
static bool swap_mode(void)
{
	return mode == LOOP_CHANGE_FD || mode == DM_RELOAD ||
	       mode == LOOP_OFFSET;
}

/*
 * The swap modes whose ioctl makes every CPU flush its TLB (function-call
 * IPIs: the loop driver invalidates the device's page cache, which drains
 * every CPU's LRU batches): done after the take-away, it would flush the
 * reader's stale entry itself, and with R9 off 20 lazy trials of
 * loop-change-fd saw no violation.  They change the blocks before the
 * take-away, while the page is cached and mapped, and read back after it.
 */
static bool swaps_before(void)
{
	return mode == LOOP_CHANGE_FD || mode == LOOP_OFFSET;
}

/* the modes whose trials change the blocks and read the file back */
static bool blocks_mode(void)
{
	return bdev_mode() || below_mode();
}

/*
 * The below modes' stack, made in --dir: images, loop devices, a partition
 * or a device-mapper device, and the filesystem of the test file mounted
 * at stack.mnt from stack.fs_dev.  stack.img[1] and stack.loop[1] are the
 * second image and its loop device of the modes that swap one for the
 * other (loop-change-fd, dm-reload); stack.live says which one the
 * filesystem reads now.
 */
static struct {
	char img[2][256], loop[2][64], fs_dev[64], mnt[256];
	char dm[3][32];			/* below-random: up to three */
	char md[32];			/* md-raid1: the array's node */
	struct scsi_disk scsi;		/* scsi-passthrough */
	char tmp[224];			/* below-random: a tmpfs for the image */
	int *file_fd;			/* the test file's, closed first */
	int write_fd;			/* partition, dm-linear: bdev_path's */
	unsigned long long sectors;	/* of the image */
	long long write_base;		/* byte offset of the fs on bdev_path */
	int live;
	bool mounted, tmp_mounted;
} stack;

/*
 * The deck modes: a stack, and the routes by which its blocks change
 * under the filesystem: the image written, or punched (on tmpfs); a
 * device below the filesystem's (or beside it, over the same blocks)
 * written, zeroed (BLKZEROOUT) or discarded; SCSI commands by SG_IO
 * (lib/scsi.c), NVMe commands by NVME_IOCTL_IO_CMD or io_uring
 * (lib/nvme.c).  Each writer is opened after the mount, with @flags
 * (for writing, but for SG_IO on a block device), and kept: @base is the
 * byte offset of the filesystem's block 0 on it, less its own offset on
 * the image; what is written to it is written to writer @pair too, if
 * any (md-raid1's other member).
 */
enum route_kind { IMAGE_WRITE, IMAGE_PUNCH, DEV_WRITE, DEV_ZEROOUT,
		  DEV_DISCARD, SG_WRITE, SG_WRITE_SAME, BSG_WRITE, NVME_WRITE,
		  NVME_WRITE_ZEROES, NVME_URING_WRITE, SNAPSHOT_MERGE,
		  ZONE_REWRITE, NR_ROUTE_KINDS };
static const char *const route_names[NR_ROUTE_KINDS] = {
	"image-write", "image-punch", "write", "zeroout", "discard",
	"sg-io-write", "sg-io-write-same", "bsg-write", "nvme-write",
	"nvme-write-zeroes", "nvme-uring-write", "snapshot-merge",
	"zone-reset-rewrite" };
#define MAX_WRITERS	4
static struct writer {
	char path[64];
	long long base;
	int fd, flags, pair;
} writers[MAX_WRITERS];
static int nr_writers;
static long long image_base;	/* the filesystem's offset on the image */
struct route {
	enum route_kind kind;
	int writer;
};
static struct route deck[2 + 3 * MAX_WRITERS];
static int deck_size, deck_next;
static unsigned long long seed;
static bool seeded;
static uint64_t rng;
static char stack_text[192];
static long route_trials[NR_ROUTE_KINDS], before_trials;
static long route_violations[NR_ROUTE_KINDS], violations_seen;
static char route_text[512];	/* the helper's last route, said on failure */
/* the routes whose work is the stack's own, further on */
static char snapshot_node[64];	/* dm-snapshot: the snapshot's node */
static void snapshot_merge(uint64_t (*buf)[PAGE_WORDS], const int *block,
			   int n);
static int zone_rewrite(int fd, off_t at, const void *block);

/* @name: a JSON object of @count by route, for the routes the stack has */
static void route_field(struct fields *f, const char *name,
			const long *count)
{
	char routes[320];
	int at = snprintf(routes, sizeof(routes), "{");

	for (int k = 0; k < NR_ROUTE_KINDS; k++) {
		bool has = false;

		for (int i = 0; i < deck_size; i++)
			has |= deck[i].kind == (enum route_kind)k;
		if (has)
			at += snprintf(routes + at, sizeof(routes) - at,
				       "%s\"%s\": %ld", at > 1 ? ", " : "",
				       route_names[k], count[k]);
	}
	snprintf(routes + at, sizeof(routes) - at, "}");
	field_raw(f, name, routes);
}

/* A dm-linear table over all of block device @dev; dies if it has none. */
static const char *linear_table(const char *dev)
{
	static char table[64];

	snprintf(table, sizeof(table), "%s 0", dev_numbers(dev));
	return table;
}

/* the modes whose pages are main's own, kept from the helper by fork() */
static bool own_anon_mode(void)
{
	return mode == ANON_FORCE || mode == ANON_MOVE || mode == SWAP_BELOW;
}

/* A file of the lab's data-disk format: page p is p, then the file's tag. */
struct testfile {
	char path[sizeof(ctl->path)];
	int fd;				/* O_RDONLY: nobody writes it */
	uint64_t tag[PAGE_WORDS];
};

struct run {
	long trials, linger, slots;
	int npages;
	bool keep_going;
	struct testfile a;
	struct fresh_va va;
	uintptr_t *anon_va;		/* anon modes: each slot's pages */
	uintptr_t move_dst;		/* anon-move: where UFFDIO_MOVE puts them */
	int uffd;
	/* tallies */
	long done, attempts, missed, disturbed, taken, reused, luf_folios;
	long demoted;
	long refaulted;			/* bdev: trials that kept the old data */
	long refused;			/* bdev-closed: trials not made lazy */
	long unmovable;			/* anon-move: disturbed, a page shared */
	int route;			/* below-random: the trial's, in deck */
	bool before;			/* and whether before the take-away */
};

static char made[sizeof(ctl->path)];

static void remove_file(void)
{
	if (made[0])
		unlink(made);
}

static void fill_page(uint64_t *q, uint64_t index, const uint64_t *tag)
{
	q[0] = index;
	for (int w = 1; w < (int)PAGE_WORDS; w++)
		q[w] = tag[w];
}

/* --- the helper's commands ------------------------------------------------- */

/*
 * The bdev modes: the helper's own descriptor of the test file, opened for
 * each command and closed after it, as main unmounts the filesystem after
 * each trial.  No readahead: the read-back is of the trial's pages alone.
 */
static int helper_open_file(void)
{
	int fd = open(ctl->path, O_RDONLY);

	if (fd < 0)
		helper_fail("cannot open %s: %s", ctl->path, strerror(errno));
	else
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	return fd;
}

/*
 * The bdev modes: the file read back, buffered, after the write and the
 * take-away: what a fresh translation of the trial's pages would map now.
 * The take-away dropped them from the page cache, so the read goes to the
 * device and brings the new data, unless the page was read in again after
 * the take-away and before the write, from the old blocks: by the reader's
 * fault (a kernel that flushes at the device's open lets it) or by the
 * readahead of a neighbour's fault; a write to the device does not update
 * the file's page cache.  Then the old data is what a fresh translation
 * gives, the reader must go on reading it, and the trial's new data is the
 * old (main counts those trials).  Anything else: the write did not reach
 * the file, and the trial would prove nothing.
 */
static void helper_bdev_check(void)
{
	static uint64_t back[TRIAL_MAX_PAGES][PAGE_WORDS];
	static uint64_t want[TRIAL_MAX_PAGES][PAGE_WORDS];
	size_t len = ctl->npages * PAGE_SIZE_4K;
	int fd = helper_open_file();
	ssize_t n;

	if (fd < 0)
		return;
	n = pread(fd, back, len, ctl->length);
	close(fd);
	if (n != (ssize_t)len) {
		helper_fail("cannot read back %s: %s", ctl->path,
			    n < 0 ? strerror(errno) : "short read");
		return;
	}
	for (int i = 0; i < ctl->npages; i++)
		fill_page(want[i], ctl->new.index[i], ctl->new.tag);
	if (!memcmp(back, want, len))
		return;
	for (int i = 0; i < ctl->npages; i++)
		fill_page(want[i], ctl->old.index[i], ctl->old.tag);
	if (!memcmp(back, want, len)) {
		ctl->new = ctl->old;
		return;
	}
	helper_fail("%s does not read back the data written over its blocks on %s%s",
		    ctl->path, deck_mode() ? route_text : bdev_path,
		    ctl->npages > 1 ?
		    " (or some of the trial's pages were faulted in again before the write and some after: try --pages 1)" :
		    ": the write through the device did not reach the file");
}

/*
 * The bdev and below modes: the trial's new data in @buf, and the
 * filesystem blocks of its pages in @block (FIBMAP); the number of blocks,
 * or -1 after a helper_fail().
 */
static int helper_new_blocks(uint64_t (*buf)[PAGE_WORDS], int *block)
{
	int n = ctl->npages * PAGE_SIZE_4K / fs_block, fd = helper_open_file();

	if (fd < 0)
		return -1;
	for (int i = 0; i < ctl->npages; i++)
		fill_page(buf[i], ctl->new.index[i], ctl->new.tag);
	for (int b = 0; b < n; b++) {
		block[b] = ctl->length / fs_block + b;
		if (ioctl(fd, FIBMAP, &block[b]) || !block[b]) {
			helper_fail("FIBMAP of block %lld of %s: %s",
				    ctl->length / fs_block + b, ctl->path,
				    block[b] ? strerror(errno) : "a hole");
			n = -1;
			break;
		}
	}
	close(fd);
	return n;
}

/*
 * The bdev and below modes: the trial's @n blocks (@block and @buf, from
 * helper_new_blocks()) changed through @fd, of @target, where the file's
 * block b is at byte block[b] * fs_block + @base: @buf written over them,
 * or (leaving zeroes) a hole punched, BLKZEROOUT, BLKDISCARD; or by
 * SCSI or NVMe commands (the data, or zeroes by WRITE SAME or Write
 * Zeroes).  Stops at the
 * first failure, after a helper_fail().
 */
static void write_blocks(int fd, const char *target, enum route_kind kind,
			 uint64_t (*buf)[PAGE_WORDS], const int *block, int n,
			 long long base)
{
	for (int b = 0; b < n; b++) {
		off_t at = (off_t)block[b] * fs_block + base;
		uint64_t range[2] = { at, fs_block };
		int err = 0;

		switch (kind) {
		case IMAGE_WRITE:
		case DEV_WRITE:
			err = pwrite(fd, (char *)buf + (size_t)b * fs_block,
				     fs_block, at) != fs_block;
			break;
		case IMAGE_PUNCH:
			err = fallocate(fd, FALLOC_FL_PUNCH_HOLE |
					FALLOC_FL_KEEP_SIZE, at, fs_block);
			break;
		case DEV_ZEROOUT:
			err = ioctl(fd, BLKZEROOUT, range);
			break;
		case DEV_DISCARD:
			err = ioctl(fd, BLKDISCARD, range);
			break;
		case SG_WRITE:
		case SG_WRITE_SAME:
		case BSG_WRITE:
			err = scsi_write(fd, kind == SG_WRITE ? SCSI_SG_IO :
					 kind == BSG_WRITE ? SCSI_BSG :
					 SCSI_WRITE_SAME, at,
					 (char *)buf + (size_t)b * fs_block,
					 fs_block);
			break;
		case NVME_WRITE:
		case NVME_WRITE_ZEROES:
		case NVME_URING_WRITE:
			err = nvme_write(fd, kind == NVME_WRITE ?
					 NVME_WRITE_IOCTL :
					 kind == NVME_WRITE_ZEROES ?
					 NVME_WRITE_ZEROES_IOCTL :
					 NVME_WRITE_URING, at,
					 (char *)buf + (size_t)b * fs_block,
					 fs_block);
			break;
		case ZONE_REWRITE:
			err = zone_rewrite(fd, at, (char *)buf +
					   (size_t)b * fs_block);
			break;
		case SNAPSHOT_MERGE:	/* not a write: snapshot_merge() */
		case NR_ROUTE_KINDS:
			break;
		}
		if (err) {
			helper_fail("%s of block %d on %s: %s",
				    route_names[kind], block[b], target,
				    strerror(errno));
			return;
		}
	}
}

/*
 * The trial's @n blocks (@block, @buf) written through block device
 * @path, opened for the writes and closed after them, at the file's own
 * offsets; a helper_fail() on an error.
 */
static void write_device(const char *path, uint64_t (*buf)[PAGE_WORDS],
			 const int *block, int n)
{
	int fd = open(path, O_WRONLY | O_DIRECT);

	if (fd < 0) {
		helper_fail("cannot open %s for writing: %s", path,
			    strerror(errno));
		return;
	}
	write_blocks(fd, path, DEV_WRITE, buf, block, n, 0);
	close(fd);
}

/*
 * The bdev modes: new data over the trial's pages, written to the file's
 * blocks through the block device its filesystem is on.  The blocks are
 * looked up first (a page may be several blocks, anywhere on the device);
 * the device is opened for the write and closed at once: the only writer
 * of the device that is not its filesystem, and only while the trial
 * needs it.
 */
static void helper_bdev_write(void)
{
	static uint64_t buf[TRIAL_MAX_PAGES][PAGE_WORDS]
		__attribute__((aligned(PAGE_SIZE_4K)));
	static int block[TRIAL_MAX_PAGES * PAGE_SIZE_4K / 512];
	int n = helper_new_blocks(buf, block);

	if (n >= 0)
		write_device(bdev_path, buf, block, n);
}

/*
 * The below modes: new data over the trial's pages, reaching the blocks
 * under the filesystem by a route that opens neither the file nor the
 * mounted device for writing: the loop device's backing image written
 * (loop-backing); the partition that covers the filesystem's blocks on
 * the mounted whole disk (partition); the loop device under dm-linear
 * (dm-linear); or the other image (or copy), then made the one the
 * filesystem reads by LOOP_CHANGE_FD (loop-change-fd), by a device-mapper
 * table load (dm-reload) or by moving the loop device's window
 * (loop-offset).  Then the file read back, as in the bdev modes: the page
 * cache fills the evicted index from the new blocks; the swaps_before()
 * modes read back apart, after the take-away.
 */
static void helper_below(void)
{
	static uint64_t buf[TRIAL_MAX_PAGES][PAGE_WORDS]
		__attribute__((aligned(PAGE_SIZE_4K)));
	static int block[TRIAL_MAX_PAGES * PAGE_SIZE_4K / 512];
	int n = helper_new_blocks(buf, block), other = !stack.live, wfd;
	bool swap = swap_mode();
	/* an image is written as a file, a device by its writer's fd */
	const char *target = swap || mode == LOOP_BACKING ?
			     stack.img[mode == LOOP_OFFSET ? 1 :
				       swap ? other : 0] : bdev_path;
	/* loop-offset: the other copy, in the second image */
	long long base = mode == LOOP_OFFSET ?
			 (long long)(other * stack.sectors * 512) :
			 stack.write_base;

	if (n < 0)
		return;
	wfd = target == bdev_path ? stack.write_fd : open(target, O_WRONLY);
	if (wfd < 0)
		helper_fail("cannot open %s for writing: %s", target,
			    strerror(errno));
	else
		write_blocks(wfd, target, DEV_WRITE, buf, block, n, base);
	if (wfd >= 0 && wfd != stack.write_fd)
		close(wfd);
	if (ctl->error[0])
		return;
	if (mode == LOOP_CHANGE_FD)
		loop_change_fd(stack.loop[0], stack.img[other]);
	if (mode == DM_RELOAD)
		dm_reload(stack.dm[0], "linear", linear_table(stack.loop[other]),
			  stack.sectors, true);
	if (mode == LOOP_OFFSET)
		loop_set_offset(stack.loop[0], other * stack.sectors * 512,
				stack.sectors * 512);
	if (swap)
		stack.live = other;
	if (!swaps_before())
		helper_bdev_check();
}

/*
 * dm-thin: where the pool keeps a thin block.  The pool hands out its
 * data blocks (THIN_CHUNK bytes) in the order the thin device first
 * writes them, so a block's place on the data device is found, not
 * computed: the thin device's chunk, read, is looked up on the data
 * device (every chunk of the test file holds its pages' own indices).
 * Found once a chunk, in the helper, which changes the blocks.
 */
#define THIN_CHUNK	(128 * 512)
static long long *thin_at;	/* data byte offset + 1 of a thin chunk */
static size_t thin_chunks;

static long long thin_find(long long chunk)
{
	static char want[THIN_CHUNK] __attribute__((aligned(PAGE_SIZE_4K)));
	static char have[THIN_CHUNK] __attribute__((aligned(PAGE_SIZE_4K)));
	int thin = open(stack.fs_dev, O_RDONLY | O_DIRECT | O_CLOEXEC);
	int data = open(stack.loop[0], O_RDONLY | O_DIRECT | O_CLOEXEC);
	long long found = -1;

	if (thin >= 0 && data >= 0 &&
	    pread(thin, want, THIN_CHUNK, chunk * THIN_CHUNK) == THIN_CHUNK)
		for (long long at = 0; found < 0 &&
		     pread(data, have, THIN_CHUNK, at) == THIN_CHUNK;
		     at += THIN_CHUNK)
			if (!memcmp(want, have, THIN_CHUNK))
				found = at;
	if (thin >= 0)
		close(thin);
	if (data >= 0)
		close(data);
	return found;
}

/* The trial's @n blocks (helper_new_blocks()) made the data device's. */
static bool thin_remap(int *block, int n)
{
	const long long per = THIN_CHUNK / fs_block;

	if (!thin_at) {
		thin_chunks = stack.sectors * 512 / THIN_CHUNK;
		thin_at = calloc(thin_chunks, sizeof(*thin_at));
		if (!thin_at)
			die(1, "out of memory");
	}
	for (int b = 0; b < n; b++) {
		size_t c = block[b] / per;

		if (c >= thin_chunks) {
			helper_fail("block %d of %s is past the thin device's end",
				    block[b], ctl->path);
			return false;
		}
		if (!thin_at[c])
			thin_at[c] = thin_find(c) + 1;
		if (!thin_at[c]) {
			helper_fail("chunk %zu of the thin device %s is nowhere on its pool's data device %s",
				    c, stack.fs_dev, stack.loop[0]);
			return false;
		}
		block[b] = (thin_at[c] - 1) / fs_block + block[b] % per;
	}
	return true;
}

/*
 * The deck modes: the route of @op (route_op()) changes the trial's blocks
 * to its new data (zeroes, for the routes that punch, zero or discard);
 * before the take-away, with the page still cached, and read back after it
 * (OP_BDEV_CHECK), or after it and read back now.
 */
static void helper_route(int op)
{
	static uint64_t buf[TRIAL_MAX_PAGES][PAGE_WORDS]
		__attribute__((aligned(PAGE_SIZE_4K)));
	static int block[TRIAL_MAX_PAGES * PAGE_SIZE_4K / 512];
	int c = (op - OP_ROUTE) >> 1;
	bool before = (op - OP_ROUTE) & 1;
	const struct route route = { c / (MAX_WRITERS + 1),
				     c % (MAX_WRITERS + 1) - 1 }, *rt = &route;
	const struct writer *w = rt->writer >= 0 ? &writers[rt->writer] : NULL;
	const char *target = rt->kind == SNAPSHOT_MERGE ? snapshot_node :
			     w ? w->path : stack.img[0];
	int n = helper_new_blocks(buf, block);
	int fd = w ? w->fd : rt->kind == SNAPSHOT_MERGE ? -1 :
		 open(stack.img[0], O_WRONLY);

	/* for helper_bdev_check()'s message */
	snprintf(route_text, sizeof(route_text), "%s (%s; %s)", target,
		 route_names[rt->kind], stack_text);
	if (n < 0 || (mode == DM_THIN && !thin_remap(block, n)))
		return;
	if (rt->kind == SNAPSHOT_MERGE) {
		snapshot_merge(buf, block, n);
		if (!ctl->error[0] && !before)
			helper_bdev_check();
		return;
	}
	if (fd < 0) {
		helper_fail("cannot open %s for writing: %s", target,
			    strerror(errno));
		return;
	}
	write_blocks(fd, target, rt->kind, buf, block, n,
		     w ? w->base : image_base);
	if (w && w->pair >= 0 && !ctl->error[0])
		write_blocks(writers[w->pair].fd, writers[w->pair].path,
			     rt->kind, buf, block, n, writers[w->pair].base);
	if (!w)
		close(fd);
	if (!ctl->error[0] && !before)
		helper_bdev_check();
}

static void helper_op(int op)
{
	if (op >= OP_ROUTE) {
		helper_route(op);
		return;
	}
	switch (op) {
	case OP_BELOW:
		helper_below();
		break;
	case OP_TAKE:
		helper_take_away();
		break;
	case OP_BDEV:		/* bdev: after the take-away */
		helper_bdev_write();
		if (!ctl->error[0])
			helper_bdev_check();
		break;
	case OP_BDEV_WRITE:	/* bdev-closed: before it */
		helper_bdev_write();
		break;
	case OP_BDEV_CHECK:	/* bdev-closed: after it */
		helper_bdev_check();
		break;
	case OP_REUSE:
		helper_reuse_trial();
		break;
	case OP_DROP:
		/* the helper's copy of main's pages: their swap entries */
		if (madvise((void *)ctl->va, ctl->npages * PAGE_SIZE_4K,
			    MADV_DONTNEED))
			helper_fail("madvise(MADV_DONTNEED) of the helper's copy: %s",
				    strerror(errno));
		break;
	}
}

/* --- set-up ---------------------------------------------------------------- */

static void check_dir(const char *dir, size_t bytes)
{
	struct statfs fs;
	struct statvfs vfs;

	if (statfs(dir, &fs))
		die(1, "no %s (%s): LUF needs a disk filesystem to write files on; boot the lab's guest with unflush.scratch=128M (python3 -m lab run --append unflush.scratch=128M) or give --dir DIR",
		    dir, strerror(errno));
	if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC)
		die(1, "%s is on tmpfs or ramfs, whose pages reclaim swaps out, not drops: give --dir on a disk filesystem (the lab: unflush.scratch=SIZE)",
		    dir);
	if (!statvfs(dir, &vfs) && (size_t)vfs.f_bavail * vfs.f_bsize < bytes)
		die(1, "%s has %zu MiB free, the files need %zu MiB: fewer --trials or --pages, or a larger filesystem",
		    dir, (size_t)vfs.f_bavail * vfs.f_bsize / MiB, bytes / MiB);
}

/*
 * Make @f: @pages pages, written, on disk, dropped from the page cache and
 * closed, so that nobody has it open for writing (LUF's gate, rule R4) and
 * each trial's read fault brings its pages in clean, on this CPU.
 */
/* main's descriptor of the test file, read-only: nobody writes it */
static void open_testfile(struct testfile *f)
{
	f->fd = open(f->path, O_RDONLY);
	if (f->fd < 0)
		die(1, "cannot open %s: %s", f->path, strerror(errno));
	/* no readahead: every page the trials use is faulted alone */
	posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
}

static void make_file(struct testfile *f, char *made_path, const char *dir,
		      char name, long pages)
{
	static uint64_t buf[64][PAGE_WORDS];
	int fd;

	snprintf(f->path, sizeof(f->path), "%s/luf-hazards-%d-%c", dir,
		 (int)getpid(), name);
	random_tag(f->tag, 0x4c55462d48415a00ULL ^ (uint64_t)name ^
		   (uint64_t)getpid() << 32);
	fd = open(f->path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die(1, "cannot make %s: %s%s", f->path, strerror(errno),
		    errno == EROFS ? " (a read-only mount: give --dir on a writable one)" : "");
	snprintf(made_path, sizeof(f->path), "%s", f->path);
	for (long p = 0; p < pages; p += 64) {
		long n = pages - p < 64 ? pages - p : 64;

		for (long k = 0; k < n; k++)
			fill_page(buf[k], p + k, f->tag);
		if (write(fd, buf, n * PAGE_SIZE_4K) != (ssize_t)(n * PAGE_SIZE_4K))
			die(1, "cannot write %s: %s", f->path, strerror(errno));
	}
	/* dirty page cache is written back, not dropped, by MADV_PAGEOUT */
	if (fsync(fd))
		die(1, "fsync %s: %s", f->path, strerror(errno));
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	open_testfile(f);
}

/*
 * anon modes: every slot's pages, at the address its trial will use,
 * written and swapped out before attack_start()'s fork gives the helper a
 * copy of their swap entries.  Shared, a page is not exclusive: main's read
 * fault maps it read-only and clean (a candidate for LUF), and the helper's
 * copy keeps main's swap-in from mapping it writable until the helper drops
 * it (anon-write's OP_DROP).  anon-move's pages are main's own instead
 * (UFFDIO_MOVE takes only exclusive ones): MADV_DONTFORK keeps them from
 * the helper, and once they are in swap, clearing the soft-dirty bits makes
 * the swap-in map them read-only all the same (pte_needs_soft_dirty_wp()).
 * anon-force's are main's own too (a FOLL_FORCE write must find the page
 * exclusive to write into it, not copy it), and PROT_READ once they are in
 * swap: the swap-in of a page in a VMA without VM_WRITE maps it read-only
 * and clean, exclusive or not.
 */
static void make_anon(struct run *r)
{
	size_t len = r->npages * PAGE_SIZE_4K;
	long total = r->slots * r->npages, swapped = 0;

	snprintf(r->a.path, sizeof(r->a.path), "anonymous memory");
	random_tag(r->a.tag, 0x4c55462d414e4f4eULL ^ (uint64_t)getpid() << 32);
	r->anon_va = calloc(r->slots, sizeof(*r->anon_va));
	if (!r->anon_va)
		die(1, "out of memory");
	/* anon-demote: from here to the end, only the trial pages are new */
	if (mode == ANON_DEMOTE)
		memcg_join();
	for (long k = 0; k < r->slots; k++) {
		uintptr_t va = (uintptr_t)fresh_va(&r->va, len, PAGE_SIZE_4K,
						   k + 1);

		if (mmap((void *)va, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
			 0) == MAP_FAILED)
			die(1, "mmap of anonymous memory: %s", strerror(errno));
		/* each trial's read fault swaps in its own pages, no others */
		madvise((void *)va, len, MADV_RANDOM);
		if (own_anon_mode() && madvise((void *)va, len, MADV_DONTFORK))
			die(1, "madvise(MADV_DONTFORK): %s", strerror(errno));
		for (int i = 0; i < r->npages; i++)
			fill_page((uint64_t *)(va + i * PAGE_SIZE_4K),
				  k * r->npages + i, r->a.tag);
		r->anon_va[k] = va;
	}
	/* a page whose PTE was young may survive one pass: try again */
	for (int pass = 0; pass < 5 && swapped < total; pass++) {
		swapped = 0;
		for (long k = 0; k < r->slots; k++) {
			madvise((void *)r->anon_va[k], len, MADV_PAGEOUT);
			for (int i = 0; i < r->npages; i++)
				swapped += swapped_entry(pagemap_self(
					r->anon_va[k] + i * PAGE_SIZE_4K));
		}
	}
	if (swapped < total)
		die(1, "only %ld of %ld anonymous pages went to swap with MADV_PAGEOUT: the anon modes need them all swapped out; is swap full?",
		    swapped, total);
	/*
	 * anon-demote: main's own pages are charged where it goes now; the
	 * trial pages stay in the cgroup, and so does their swap-in
	 * (mem_cgroup_swapin_charge_folio() charges the swap entry's cgroup)
	 */
	if (mode == ANON_DEMOTE)
		memcg_leave();
	if (mode == ANON_MOVE && !write_text(CLEAR_REFS, "4"))
		ktap_skip_exit("cannot write 4 to " CLEAR_REFS " (%s): anon-move needs CONFIG_MEM_SOFT_DIRTY",
			       strerror(errno));
	for (long k = 0; (mode == ANON_FORCE || mode == SWAP_BELOW) &&
			 k < r->slots; k++)
		if (mprotect((void *)r->anon_va[k], len, PROT_READ))
			die(1, "mprotect(PROT_READ) of anonymous memory: %s",
			    strerror(errno));
}

/*
 * anon-move: a userfaultfd and a registered region to move each trial's
 * swap entries into (UFFDIO_MOVE moves only into a registered VMA, with
 * the source's protection).
 */
static void move_setup(struct run *r)
{
	size_t len = r->slots * r->npages * PAGE_SIZE_4K;
	struct uffdio_api api = { .api = UFFD_API,
				  .features = UFFD_FEATURE_MOVE };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	void *dst;

	r->uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (r->uffd < 0)
		ktap_skip_exit("userfaultfd: %s (anon-move needs CONFIG_USERFAULTFD)",
			       strerror(errno));
	if (ioctl(r->uffd, UFFDIO_API, &api))
		ktap_skip_exit("UFFDIO_API with UFFD_FEATURE_MOVE: %s (anon-move needs Linux 6.8 or later)",
			       strerror(errno));
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (dst == MAP_FAILED)
		die(1, "mmap of the UFFDIO_MOVE target: %s", strerror(errno));
	reg.range.start = (uintptr_t)dst;
	reg.range.len = len;
	if (ioctl(r->uffd, UFFDIO_REGISTER, &reg))
		die(1, "UFFDIO_REGISTER: %s", strerror(errno));
	r->move_dst = (uintptr_t)dst;
}

/*
 * anon-move: the trial's swap entries go from @va to their target; false
 * if the trial cannot stand.  A move that stops short says in .move how
 * far it got.  EAGAIN: a PTE changed under it, for instance where the
 * reader faulted a page in from swap once R5 flushed its stale entry; the
 * rest is moved again.  EBUSY: a page is not exclusive.  main's pages are
 * its own (MADV_DONTFORK), so the reader made it so: it faulted the page
 * in from the swap cache during the take-away, while the page was under
 * writeback to zram, which wants stable pages (do_swap_page() maps it
 * shared then), and the take-away's next request swapped it out again,
 * not exclusive.  Its TLB had let the entry go: the trial proves nothing,
 * as a disturbed one.  The rest is zapped, so that the whole range reads
 * zeroes, as the reader expects.  Any other error is fatal.
 */
static bool move_away(struct run *r, uintptr_t va, long region)
{
	size_t len = r->npages * PAGE_SIZE_4K, moved = 0;
	struct uffdio_move mv;

	for (int tries = 0; moved < len; tries++) {
		mv = (struct uffdio_move){ .dst = r->move_dst + region * len + moved,
					   .src = va + moved, .len = len - moved };
		if (!ioctl(r->uffd, UFFDIO_MOVE, &mv))
			return true;
		if (mv.move > 0)
			moved += mv.move;
		if (errno == EBUSY) {
			if (madvise((void *)(va + moved), len - moved,
				    MADV_DONTNEED))
				die(1, "madvise(MADV_DONTNEED) of the pages UFFDIO_MOVE left: %s",
				    strerror(errno));
			return false;
		}
		if (errno != EAGAIN || tries == 100)
			break;
	}
	die(1, "UFFDIO_MOVE of trial pages: %s (moved %zu of %zu bytes, then %lld)",
	    strerror(errno), moved, len, (long long)mv.move);
}

/*
 * demote: reclaim demotes to the next node down the memory tiers; the lab
 * gives node 1 no CPU and HMAT figures that put it in a lower tier.
 */
static void demotion_setup(void)
{
	lower_node = cpuless_node();
	if (lower_node < 0 || !path_exists(DEMOTION))
		ktap_skip_exit("demote needs a CPU-less memory node to demote to (%s): boot the lab's guest with --node1 SIZE",
			       path_exists(DEMOTION) ? "none found" : "no " DEMOTION);
	setting_write(DEMOTION, "1");
	/*
	 * Its scanner makes the reader's PTEs to pages off the top tier
	 * PROT_NONE and flushes them: the demoted pages' addresses, the very
	 * ones whose stale translations the trial needs.
	 */
	if (path_exists(NUMA_BALANCING))
		setting_write(NUMA_BALANCING, "0");
}

/*
 * compact: a child locks every other run of 32 pages of @node's free memory
 * but 64 MiB and frees the runs between them.  Compaction leaves unevictable
 * pages alone once compact_unevictable_allowed is 0, so every block of the
 * node is partly used and holds nothing compaction moves: its free scanner
 * finds room in the first block it looks at, at the top of the node, and
 * its migration scanner, on the way up, meets the trial's page, the only
 * movable page there.  That page must not come from the top block, where
 * compaction's own free pages and the last trial's go back to this CPU's
 * per-cpu list, first in line: before each trial, the child unmaps its
 * locked page of the lowest PFN left (slot_free()), which the trial's read
 * fault on the same CPU then gets.  (Which end of a node the allocator
 * hands out first differs from boot to boot.)  The child sleeps until main
 * exits.
 */
static int slot_cmd[2] = { -1, -1 }, slot_ack[2] = { -1, -1 };
static char compact_path[64];	/* the node's sysfs compaction trigger */
#define RUN	(32 * PAGE_SIZE_4K)

struct slot {
	uint64_t pfn;
	char *page;
};

static int by_pfn(const void *a, const void *b)
{
	const struct slot *x = a, *y = b;

	return x->pfn < y->pfn ? -1 : x->pfn > y->pfn;
}

static void slot_child(char *locked, size_t len)
{
	size_t n = len / PAGE_SIZE_4K;
	struct slot *slots = calloc(n, sizeof(*slots));
	int pagemap = open("/proc/self/pagemap", O_RDONLY);
	char c = 0;

	/* _exit(), not die(): the cleanups at exit are main's to run */
	if (!slots || pagemap < 0)
		_exit(1);
	for (size_t i = 0; i < n; i++) {
		uint64_t e;

		slots[i].page = locked + i * PAGE_SIZE_4K;
		if (!pagemap_try(pagemap, (uintptr_t)slots[i].page, &e))
			_exit(1);
		slots[i].pfn = present_pfn(e);
	}
	close(pagemap);
	qsort(slots, n, sizeof(*slots), by_pfn);
	if (write(slot_ack[1], &c, 1) != 1)
		_exit(1);
	for (size_t i = 0; i < n; i++) {
		if (read(slot_cmd[0], &c, 1) != 1)
			break;
		if (munmap(slots[i].page, PAGE_SIZE_4K) ||
		    write(slot_ack[1], &c, 1) != 1)
			_exit(1);
	}
	pause();
	_exit(0);
}

static void lock_every_other_run(int node)
{
	long long spare = node_free_bytes(node) - (long long)(64 * MiB);
	size_t half = spare > 0 ? (size_t)spare / 2 : 0;
	char c = 0;
	pid_t pid;

	half -= half % PAGE_SIZE_4K;
	if (!half)
		die(1, "node %d has too little free memory to fragment (%lld MiB)",
		    node, (spare >> 20) + 64);
	if (pipe(slot_cmd) || pipe(slot_ack))
		die(1, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die(1, "fork: %s", strerror(errno));
	if (!pid) {
		char *locked, *freed;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		bind_memory(node);
		locked = mmap(NULL, half, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		freed = mmap(NULL, half, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		/*
		 * 4K pages, RUN bytes of each in turn (the allocator hands
		 * out neighbours): compaction's free scanner samples a block
		 * every 2^k pages, up to 32, once it finds nothing, and would
		 * miss holes of one page between locked ones
		 */
		if (locked == MAP_FAILED || freed == MAP_FAILED ||
		    madvise(locked, half, MADV_NOHUGEPAGE) ||
		    madvise(freed, half, MADV_NOHUGEPAGE))
			_exit(1);
		for (size_t off = 0; off < half; off += RUN) {
			size_t n = half - off < RUN ? half - off : RUN;

			for (size_t k = 0; k < n; k += PAGE_SIZE_4K)
				locked[off + k] = 1;
			for (size_t k = 0; k < n; k += PAGE_SIZE_4K)
				freed[off + k] = 1;
		}
		if (mlock(locked, half) || munmap(freed, half))
			_exit(1);
		slot_child(locked, half);
	}
	if (read(slot_ack[0], &c, 1) != 1)
		die(1, "the child locking every other run of node %d failed (mlock of %zu MiB)",
		    node, half >> 20);
}

/* compact: free the next low page of the node for this trial's read fault */
static void slot_free(void)
{
	char c = 0;

	if (write(slot_cmd[1], &c, 1) != 1 || read(slot_ack[0], &c, 1) != 1)
		die(1, "the child holding node %d's pages has gone", lower_node);
}

/*
 * Keep the kernel's housekeeping off the reader's CPU, as isolcpus= would:
 * a switch there after the take-away flushes the stale entry the trial
 * needs (a disturbed trial).  On the debug kernel the RCU grace-period
 * thread preempted the reader in most trials of the node modes (compact:
 * 201 of 204 with node 1 at 512M), woken by the RCU frees of every
 * trial's mmap and of compaction; kcompactd and unbound work items were
 * the rest.  The threads go to main's CPU and back at exit.
 */
#define WQ_CPUMASK	"/sys/devices/virtual/workqueue/cpumask"
#define MAX_MOVED	64
static struct { pid_t pid; cpu_set_t mask; } moved[MAX_MOVED];
static int nr_moved;

static void housekeeping_back(void)
{
	for (int i = 0; i < nr_moved; i++)
		sched_setaffinity(moved[i].pid, sizeof(moved[i].mask),
				  &moved[i].mask);
}

static void housekeeping_off(int cpu)
{
	static const char *const names[] = { "rcu_", "kcompactd" };
	char path[64], comm[32], mask[16];
	struct dirent *d;
	cpu_set_t to;
	DIR *proc;

	CPU_ZERO(&to);
	CPU_SET(cpu, &to);
	proc = opendir("/proc");
	if (!proc)
		die(1, "/proc: %s", strerror(errno));
	cleanup_push_fn(housekeeping_back);
	while ((d = readdir(proc)) && nr_moved < MAX_MOVED) {
		pid_t pid = atoi(d->d_name);
		bool ours = false;
		FILE *f;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/comm", pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
				ours |= !strncmp(comm, names[i], strlen(names[i]));
		fclose(f);
		/* a per-CPU thread refuses the move, which is as it should be */
		if (!ours ||
		    sched_getaffinity(pid, sizeof(moved[0].mask), &moved[nr_moved].mask) ||
		    sched_setaffinity(pid, sizeof(to), &to))
			continue;
		moved[nr_moved++].pid = pid;
	}
	closedir(proc);
	/* unbound work items: main's CPU only (a hex mask; up to 31 CPUs) */
	if (path_exists(WQ_CPUMASK) && cpu < 31) {
		snprintf(mask, sizeof(mask), "%x", 1u << cpu);
		setting_write(WQ_CPUMASK, mask);
	}
}

static void compact_setup(void)
{
	lower_node = cpuless_node();
	if (lower_node < 0)
		ktap_skip_exit("compact needs a CPU-less memory node to compact: boot the lab's guest with --node1 SIZE");
	snprintf(compact_path, sizeof(compact_path),
		 "/sys/devices/system/node/node%d/compact", lower_node);
	if (!path_exists(compact_path) || !path_exists(COMPACT_UNEVICTABLE))
		ktap_skip_exit("no %s: compact needs CONFIG_COMPACTION", compact_path);
	setting_write(COMPACT_UNEVICTABLE, "0");
	/* its scanner would flush the reader's PTEs to node 1's pages */
	if (path_exists(NUMA_BALANCING))
		setting_write(NUMA_BALANCING, "0");
	lock_every_other_run(lower_node);
}

/*
 * anon-force: /proc/self/mem, opened once, before the reader starts; each
 * trial's write then goes through it with FOLL_FORCE (CONFIG_PROC_MEM's
 * default, "always")
 */
static void force_setup(void)
{
	mem_fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	if (mem_fd < 0)
		die(1, "cannot open /proc/self/mem to write: %s", strerror(errno));
}

static void remove_node(void)
{
	if (bdev_made[0])
		unlink(bdev_made);
}

/*
 * bdev: the block device under @f's filesystem (its node in /dev, or one
 * made there and removed at exit), and the filesystem's block size, which
 * must be a whole number of the device's sectors (O_DIRECT writes each
 * block alone) and divide a page.
 */
static const char *dir = "/scratch";

/* The number of a device-mapper device's node, made for it in /dev. */
static void dm_node(dev_t dev, char *path, size_t len)
{
	char sysname[32];

	snprintf(sysname, sizeof(sysname), "dm-%u", minor(dev));
	blk_node(sysname, path, len);
}

static void below_teardown(void)
{
	if (stack.file_fd && *stack.file_fd >= 0)
		close(*stack.file_fd);
	if (stack.write_fd > 0)
		close(stack.write_fd);
	for (int i = 0; i < nr_writers; i++)
		close(writers[i].fd);
	if (made[0])
		unlink(made);
	/*
	 * Busy if the program dies with a trial's page mapped: detached now,
	 * the mount goes at exit, and so do the devices (LOOP_CLR_FD of an
	 * open loop device and a deferred dm remove wait for the last close)
	 */
	if (stack.mounted && umount(stack.mnt) &&
	    umount2(stack.mnt, MNT_DETACH))
		fprintf(stderr, "cannot unmount %s: %s\n", stack.mnt,
			strerror(errno));
	if (stack.md[0])
		md_stop(stack.md);
	scsi_debug_remove(&stack.scsi);
	/* dm-thin: the volume (1) before its pool (0) */
	for (int i = 2; i >= 0; i--)
		if (stack.dm[i][0])
			dm_remove(stack.dm[i]);
	for (int i = 0; i < 2; i++) {
		if (stack.loop[i][0])
			loop_detach(stack.loop[i]);
		if (stack.img[i][0])
			unlink(stack.img[i]);
	}
	rmdir(stack.mnt);
	if (stack.tmp_mounted && umount(stack.tmp) &&
	    umount2(stack.tmp, MNT_DETACH))
		fprintf(stderr, "cannot unmount %s: %s\n", stack.tmp,
			strerror(errno));
	if (stack.tmp[0])
		rmdir(stack.tmp);
}

static void make_image(const char *path, unsigned long long bytes)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0 || ftruncate(fd, bytes))
		die(1, "cannot make %s of %llu bytes: %s", path, bytes,
		    strerror(errno));
	close(fd);
}

/* @from copied into @to from byte @at on (a new @to if @at is 0). */
static void copy_image(const char *from, const char *to, off_t at)
{
	static char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | (at ? 0 : O_TRUNC) | O_CLOEXEC,
		       0644);
	ssize_t n;

	if (in < 0 || out < 0 || lseek(out, at, SEEK_SET) != at)
		die(1, "cannot copy %s to %s: %s", from, to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			die(1, "cannot write %s: %s", to, strerror(errno));
	if (n < 0 || fsync(out))
		die(1, "cannot copy %s to %s: %s", from, to, strerror(errno));
	close(in);
	close(out);
}

/*
 * swap-below: a swap area of its own, preferred to every other, on a loop
 * device over an image in --dir, which stays open for writing: writes to
 * an active swap device itself are refused (ETXTBSY), but not those to
 * what is under it.  Made before the pages are, so that they go there.
 */
static int swap_fd = -1;
static char swap_img[256], swap_loop[64];
static bool swap_on;

static void swap_teardown(void)
{
	/* swapoff reads every page of the area back in first */
	if (swap_on && swapoff(swap_loop))
		fprintf(stderr, "swapoff %s: %s\n", swap_loop, strerror(errno));
	if (swap_fd >= 0)
		close(swap_fd);
	if (swap_loop[0])
		loop_detach(swap_loop);
	if (swap_img[0])
		unlink(swap_img);
}

static void swap_setup(struct run *r)
{
	unsigned long long bytes = r->slots * r->npages * PAGE_SIZE_4K + 16 * MiB;
	char cmd[128];

	cleanup_push_fn(swap_teardown);
	snprintf(swap_img, sizeof(swap_img), "%s/luf-hazards-%d-swap.img",
		 dir, (int)getpid());
	make_image(swap_img, bytes);
	loop_attach(swap_img, false, false, swap_loop, sizeof(swap_loop));
	snprintf(cmd, sizeof(cmd), "mkswap %s >/dev/null", swap_loop);
	fflush(stdout);
	if (system(cmd))
		die(1, "'%s' failed", cmd);
	if (swapon(swap_loop, SWAP_FLAG_PREFER | SWAP_FLAG_PRIO_MASK))
		die(1, "swapon %s: %s", swap_loop, strerror(errno));
	swap_on = true;
	mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
	if (mem_fd < 0)
		die(1, "cannot open /proc/self/mem: %s", strerror(errno));
	swap_fd = open(swap_img, O_WRONLY | O_CLOEXEC);
	if (swap_fd < 0)
		die(1, "cannot open %s for writing: %s", swap_img,
		    strerror(errno));
}

static void mount_stack(unsigned long flags)
{
	if (mount(stack.fs_dev, stack.mnt, "ext2", flags, NULL))
		die(1, "cannot mount %s (ext2) on %s: %s", stack.fs_dev,
		    stack.mnt, strerror(errno));
	stack.mounted = true;
}

/* Device-mapper device @i, dm-linear over all of @dev: its node in @node. */
static void dm_linear(int i, const char *dev, char *node, size_t len)
{
	snprintf(stack.dm[i], sizeof(stack.dm[i]), "luf-hazards-%d-%d",
		 (int)getpid(), i);
	/* dm-reload's: read-only, whose tables open no writer below */
	dm_node(dm_create(stack.dm[i], "linear", linear_table(dev),
			  dev_sectors(dev), mode == DM_RELOAD), node, len);
}

static void dm_over(const char *loop)
{
	dm_linear(0, loop, stack.fs_dev, sizeof(stack.fs_dev));
}

/*
 * The below modes: the stack in --dir, the test file @f made on its
 * filesystem.  The filesystem's blocks start at sector 0 of the image, of
 * the loop device and of the dm device alike, so FIBMAP's block numbers
 * are offsets on each; the partition starts at block 1, and so covers the
 * file's blocks, which are near the start.  Every open for
 * writing of a device (mke2fs, the partition table) comes before the
 * mount: LUF's R4 keeps a device with a writer since its mount out.  The
 * modes that swap images mount read-only: the two must stay the same but
 * for what the trials write.
 */
static void below_setup(struct run *r)
{
	unsigned long long file = r->slots * r->npages * PAGE_SIZE_4K;
	bool swap = swap_mode();
	char cmd[128];

	cleanup_push_fn(below_teardown);
	stack.file_fd = &r->a.fd;
	stack.sectors = ((file + 16 * MiB) / MiB) * MiB / 512;
	for (int i = 0; i < 1 + swap; i++)
		snprintf(stack.img[i], sizeof(stack.img[i]),
			 "%s/luf-hazards-%d-%d.img", dir, (int)getpid(), i);
	snprintf(stack.mnt, sizeof(stack.mnt), "%s/luf-hazards-%d-mnt", dir,
		 (int)getpid());
	if (mkdir(stack.mnt, 0755))
		die(1, "mkdir %s: %s", stack.mnt, strerror(errno));
	make_image(stack.img[0], stack.sectors * 512);
	loop_attach(stack.img[0], false, mode == PARTITION, stack.loop[0],
		    sizeof(stack.loop[0]));
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", stack.loop[0]);
	snprintf(bdev_path, sizeof(bdev_path), "%s", stack.loop[0]);
	if (mode == DM_LINEAR)
		dm_over(stack.loop[0]);
	snprintf(cmd, sizeof(cmd), "mke2fs -q -b 4096 %s >/dev/null",
		 stack.fs_dev);
	fflush(stdout);
	if (system(cmd))
		die(1, "'%s' failed", cmd);
	if (mode == PARTITION) {
		char part[32];

		/* sector 0 is in ext2's boot block, which it leaves alone */
		mbr_write(stack.loop[0], 8, stack.sectors - 8);
		snprintf(part, sizeof(part), "%sp1",
			 strrchr(stack.loop[0], '/') + 1);
		blk_node(part, bdev_path, sizeof(bdev_path));
		stack.write_base = -8LL * 512;
	}
	mount_stack(0);
	make_file(&r->a, made, stack.mnt, 'a', r->slots * r->npages);
	if (swap) {
		close(r->a.fd);
		if (umount(stack.mnt))
			die(1, "cannot unmount %s: %s", stack.mnt,
			    strerror(errno));
		stack.mounted = false;
		loop_detach(stack.loop[0]);
		stack.loop[0][0] = 0;
		copy_image(stack.img[0], stack.img[1], 0);
		/* loop-offset: the copies one after the other in one image */
		if (mode == LOOP_OFFSET)
			copy_image(stack.img[0], stack.img[1],
				   stack.sectors * 512);
		loop_attach(stack.img[mode == LOOP_OFFSET], true, false,
			    stack.loop[0], sizeof(stack.loop[0]));
		if (mode == LOOP_OFFSET)
			loop_set_offset(stack.loop[0], 0, stack.sectors * 512);
		snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s",
			 stack.loop[0]);
		if (mode == DM_RELOAD) {
			loop_attach(stack.img[1], true, false, stack.loop[1],
				    sizeof(stack.loop[1]));
			dm_over(stack.loop[0]);
		}
		mount_stack(MS_RDONLY);
		open_testfile(&r->a);
	}
	if (ioctl(r->a.fd, FIGETBSZ, &fs_block) || fs_block != 4096)
		die(1, "the filesystem of %s has no 4096-byte blocks",
		    r->a.path);
	/*
	 * partition, dm-linear: a writer of the device below, open from now
	 * on, as a tool that holds it would be.  Its open flushes what LUF
	 * has pending (R4 counts every device's writers), but it is not the
	 * mounted device's writer: the trials' pages stay eligible, and only
	 * R9 stands between the writes and a stale read.
	 */
	stack.write_fd = -1;
	if (mode == PARTITION || mode == DM_LINEAR) {
		stack.write_fd = open(bdev_path, O_WRONLY | O_DIRECT);
		if (stack.write_fd < 0)
			die(1, "cannot open %s for writing: %s", bdev_path,
			    strerror(errno));
	}
}

/* --- below-random ---------------------------------------------------------- */

/* A number below @n, the next of --seed's sequence (xorshift64). */
static unsigned int draw(unsigned int n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng % n;
}

/* A writer of @path, opened later for writing by deck_open(): its index. */
static int add_writer(const char *path, long long base)
{
	struct writer *w = &writers[nr_writers];

	if (nr_writers == MAX_WRITERS)
		die(1, "more than %d writers", MAX_WRITERS);
	snprintf(w->path, sizeof(w->path), "%s", path);
	w->base = base;
	w->fd = -1;
	w->flags = O_WRONLY | O_DIRECT;
	w->pair = -1;
	return nr_writers++;
}

/*
 * Every writer opened, after the mount, as below_setup()'s writer: its
 * open flushes what LUF has pending (R4 counts every device's writers),
 * but none is the mounted device's writer.
 */
static void deck_open(void)
{
	for (int i = 0; i < nr_writers; i++) {
		writers[i].fd = open(writers[i].path,
				     writers[i].flags | O_CLOEXEC);
		if (writers[i].fd < 0)
			die(1, "cannot open %s%s: %s", writers[i].path,
			    writers[i].flags & (O_WRONLY | O_RDWR) ?
			    " for writing" : "", strerror(errno));
	}
}

static void add_card(enum route_kind kind, int writer)
{
	deck[deck_size++] = (struct route){ kind, writer };
}

/* Whether block device @path takes discards (its queue's limit). */
static bool discards(const char *path)
{
	char attr[96];
	long long max = 0;
	FILE *f;

	snprintf(attr, sizeof(attr), "/sys/class/block/%s/queue/discard_max_bytes",
		 strrchr(path, '/') + 1);
	f = fopen(attr, "r");
	if (f && fscanf(f, "%lld", &max) != 1)
		max = 0;
	if (f)
		fclose(f);
	return max > 0;
}

/* The partition layer of a drawn stack. */
enum part_layer {
	NO_PART,	/* the filesystem on the whole loop device */
	FS_ON_PART,	/* on partition 1 of it (an MS-DOS table) */
	PART_TABLE,	/* on the whole; partition 1 in its table too */
	PART_ADDED,	/* on the whole; partition 1 added while mounted */
	PART_GROWN,	/* on the whole; a small partition 1 grown so */
	NR_PART_LAYERS
};

/*
 * below-random's stack, drawn from --seed: an image in --dir or on a
 * tmpfs of its own; a loop device over it; a partition layer (enum
 * part_layer; partition 1 from sector 8 to the end); none, one or two
 * dm-linear devices over the top, and with them perhaps a second
 * dm-linear (a sibling) over the device under the lowest; ext2 on the
 * top, mounted read-write.  The writers are every device below the
 * filesystem's but its whole disk (R4 watches that), partition 1 over a
 * filesystem on the whole disk, and the sibling.  BLKZEROOUT and
 * BLKDISCARD claim the device for a moment, which only the sibling, of
 * these, lets them; discards need the tmpfs (ext2 cannot punch holes in
 * the image).  Tables and partitions that must be read while the disk is
 * unclaimed come before device mapper claims it.  The deck holds every
 * route the stack has, once.
 */
static void random_setup(struct run *r)
{
	unsigned long long file = r->slots * r->npages * PAGE_SIZE_4K;
	bool on_tmpfs = draw(2), sibling;
	enum part_layer part = draw(NR_PART_LAYERS);
	int levels = draw(3), pid = (int)getpid(), sib = -1, under = -1, at = 0;
	char top[64], part1[64] = "", sysname[32], cmd[128];
	/* the filesystem's offset on the loop device, and the top's */
	long long fs_base = part == FS_ON_PART ? 8 * 512 : 0, top_base = 0;

	sibling = levels && draw(2);
	cleanup_push_fn(below_teardown);
	stack.file_fd = &r->a.fd;
	stack.sectors = ((file + 16 * MiB) / MiB) * MiB / 512;
	snprintf(stack.mnt, sizeof(stack.mnt), "%s/luf-hazards-%d-mnt", dir,
		 pid);
	if (mkdir(stack.mnt, 0755))
		die(1, "mkdir %s: %s", stack.mnt, strerror(errno));
	if (on_tmpfs) {
		snprintf(stack.tmp, sizeof(stack.tmp), "%s/luf-hazards-%d-tmp",
			 dir, pid);
		if (mkdir(stack.tmp, 0755) ||
		    mount("tmpfs", stack.tmp, "tmpfs", 0, NULL))
			die(1, "cannot mount a tmpfs on %s: %s", stack.tmp,
			    strerror(errno));
		stack.tmp_mounted = true;
		snprintf(stack.img[0], sizeof(stack.img[0]), "%s/%d.img",
			 stack.tmp, pid);
	} else {
		snprintf(stack.img[0], sizeof(stack.img[0]),
			 "%s/luf-hazards-%d-0.img", dir, pid);
	}
	make_image(stack.img[0], stack.sectors * 512);
	image_base = fs_base;
	loop_attach(stack.img[0], false, part != NO_PART, stack.loop[0],
		    sizeof(stack.loop[0]));
	snprintf(sysname, sizeof(sysname), "%sp1",
		 strrchr(stack.loop[0], '/') + 1);
	snprintf(top, sizeof(top), "%s", stack.loop[0]);
	if (part == FS_ON_PART || part == PART_TABLE)
		mbr_write(stack.loop[0], 8, stack.sectors - 8);
	else if (part == PART_GROWN)
		part_change(stack.loop[0], BLKPG_ADD_PARTITION, 1, 8, 8);
	if (part != NO_PART && part != PART_ADDED)
		blk_node(sysname, part1, sizeof(part1));
	if (part == FS_ON_PART) {
		snprintf(top, sizeof(top), "%s", part1);
		top_base = 8 * 512;
		/* under dm-linear, the whole disk is one writer more */
		if (levels)
			add_writer(stack.loop[0], fs_base);
	}
	for (int i = 0; i < levels; i++) {
		char node[64];

		if (!i)
			under = nr_writers;
		add_writer(top, fs_base - top_base);
		dm_linear(i, top, node, sizeof(node));
		snprintf(top, sizeof(top), "%s", node);
	}
	if (sibling) {
		char node[64];

		/* beside the lowest dm-linear, over the device under it */
		dm_linear(2, writers[under].path, node, sizeof(node));
		sib = nr_writers;
		add_writer(node, writers[under].base);
	}
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", top);
	snprintf(cmd, sizeof(cmd), "mke2fs -q -b 4096 %s >/dev/null",
		 stack.fs_dev);
	fflush(stdout);
	if (system(cmd))
		die(1, "'%s' failed", cmd);
	mount_stack(0);
	if (part == PART_ADDED) {
		part_change(stack.loop[0], BLKPG_ADD_PARTITION, 1, 8,
			    stack.sectors - 8);
		blk_node(sysname, part1, sizeof(part1));
	} else if (part == PART_GROWN) {
		part_change(stack.loop[0], BLKPG_RESIZE_PARTITION, 1, 8,
			    stack.sectors - 8);
	}
	if (part >= PART_TABLE)
		add_writer(part1, fs_base - 8 * 512);
	make_file(&r->a, made, stack.mnt, 'a', r->slots * r->npages);
	if (ioctl(r->a.fd, FIGETBSZ, &fs_block) || fs_block != 4096)
		die(1, "the filesystem of %s has no 4096-byte blocks",
		    r->a.path);

	add_card(IMAGE_WRITE, -1);
	if (on_tmpfs)
		add_card(IMAGE_PUNCH, -1);
	deck_open();
	for (int i = 0; i < nr_writers; i++)
		add_card(DEV_WRITE, i);
	if (sibling) {
		add_card(DEV_ZEROOUT, sib);
		if (discards(writers[sib].path))
			add_card(DEV_DISCARD, sib);
	}

	/* what was drawn, for the result */
	for (int i = 0; i < levels; i++)
		at += snprintf(stack_text + at, sizeof(stack_text) - at,
			       "dm-linear on ");
	at += snprintf(stack_text + at, sizeof(stack_text) - at,
		       "%sloop on an image on %s",
		       part == FS_ON_PART ? "partition 1 of " : "",
		       on_tmpfs ? "tmpfs" : "--dir");
	if (part >= PART_TABLE)
		at += snprintf(stack_text + at, sizeof(stack_text) - at,
			       ", partition 1 over it %s",
			       part == PART_TABLE ? "in a table" :
			       part == PART_ADDED ? "added while mounted" :
			       "grown while mounted");
	if (sibling)
		snprintf(stack_text + at, sizeof(stack_text) - at,
			 ", a sibling dm-linear");
}

/* --- the storage stacks of md, dm-crypt, dm-snapshot, dm-thin, SCSI ----- */

/* Image @i of @sectors in --dir, and loop device @i over it. */
static void stack_image(int i, unsigned long long sectors)
{
	snprintf(stack.img[i], sizeof(stack.img[i]), "%s/luf-hazards-%d-%d.img",
		 dir, (int)getpid(), i);
	make_image(stack.img[i], sectors * 512);
	loop_attach(stack.img[i], false, false, stack.loop[i],
		    sizeof(stack.loop[i]));
}

/*
 * Device-mapper device @i of @type with @params: its name in stack.dm,
 * kept if it has one (the helper makes dm-snapshot's again), its node in
 * @node.
 */
static void stack_dm(int i, const char *type, const char *params,
		     char *node, size_t len)
{
	if (!stack.dm[i][0])
		snprintf(stack.dm[i], sizeof(stack.dm[i]), "luf-hazards-%d-%d",
			 (int)getpid(), i);
	dm_node(dm_create(stack.dm[i], type, params, stack.sectors, false),
		node, len);
}

/* ext2 on stack.fs_dev, mounted (@flags) with the test file made on it. */
static void stack_fs(struct run *r, unsigned long flags)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "mke2fs -q -b 4096 %s >/dev/null",
		 stack.fs_dev);
	fflush(stdout);
	if (system(cmd))
		die(1, "'%s' failed", cmd);
	mount_stack(flags);
	make_file(&r->a, made, stack.mnt, 'a', r->slots * r->npages);
}

/*
 * md-raid1: the filesystem on a raid1 array of two loop devices, with no
 * superblock; the route writes both members (a read may come from either).
 */
static void md_setup(struct run *r)
{
	const char *member[2] = { stack.loop[0], stack.loop[1] };

	stack_image(0, stack.sectors);
	stack_image(1, stack.sectors);
	md_build_raid1(member, 127, stack.md, sizeof(stack.md));
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", stack.md);
	stack_fs(r, 0);
	writers[add_writer(stack.loop[0], 0)].pair =
		add_writer(stack.loop[1], 0);
	add_card(DEV_WRITE, 0);
	snprintf(stack_text, sizeof(stack_text),
		 "md raid1 (no superblock) of two loop devices on images on --dir");
}

/*
 * dm-crypt: the filesystem on dm-crypt (AES-XTS) over a loop device; a
 * second dm-crypt with the same key over the same loop device writes and
 * zeroes its blocks (what is below the first dm-crypt is ciphertext).
 */
static void crypt_setup(struct run *r)
{
	char params[192], key[65], sibling[64];
	int w;

	for (int i = 0; i < 64; i++)
		key[i] = "0123456789abcdef"[(i * 7 + 3) % 16];
	key[64] = 0;
	stack_image(0, stack.sectors);
	snprintf(params, sizeof(params), "aes-xts-plain64 %s 0 %s 0", key,
		 dev_numbers(stack.loop[0]));
	stack_dm(0, "crypt", params, stack.fs_dev, sizeof(stack.fs_dev));
	stack_dm(2, "crypt", params, sibling, sizeof(sibling));
	stack_fs(r, 0);
	w = add_writer(sibling, 0);
	add_card(DEV_WRITE, w);
	add_card(DEV_ZEROOUT, w);
	snprintf(stack_text, sizeof(stack_text),
		 "dm-crypt (aes-xts-plain64) on loop on an image on --dir, a sibling dm-crypt with its key");
}

/*
 * dm-snapshot, dm-thin: the routes that write image 0, the filesystem's
 * blocks at its own offsets there (image_base stays 0), as a file or
 * through loop device 0.
 */
static void image_and_device_routes(void)
{
	add_card(IMAGE_WRITE, -1);
	add_card(DEV_WRITE, add_writer(stack.loop[0], 0));
}

/*
 * dm-snapshot: the filesystem on a loop device (the origin), mounted
 * through a snapshot-origin device (stack.dm[0]), with a persistent
 * snapshot of it beside (stack.dm[1], its exceptions on a second loop
 * device).  The routes write the origin, device or image, without the
 * snapshot-origin target that would copy the blocks out first, and merge
 * the snapshot, written first, into the mounted device (snapshot_merge()).
 */
#define SNAPSHOT_CHUNK	8	/* sectors: a filesystem block */

/*
 * The parameters of the snapshot, and of the merge that takes its place:
 * origin loop device 0, exceptions on loop device 1, persistent.
 */
static const char *snapshot_table(void)
{
	static char params[96];

	snprintf(params, sizeof(params), "%s", dev_numbers(stack.loop[0]));
	snprintf(params + strlen(params), sizeof(params) - strlen(params),
		 " %s P %d", dev_numbers(stack.loop[1]), SNAPSHOT_CHUNK);
	return params;
}

static void snapshot_make(void)
{
	stack_dm(1, "snapshot", snapshot_table(), snapshot_node,
		 sizeof(snapshot_node));
}

static void snapshot_setup(struct run *r)
{
	stack_image(0, stack.sectors);
	stack_image(1, 16 * MiB / 512);
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", stack.loop[0]);
	stack_fs(r, 0);
	close(r->a.fd);
	if (umount(stack.mnt))
		die(1, "cannot unmount %s: %s", stack.mnt, strerror(errno));
	stack.mounted = false;
	stack_dm(0, "snapshot-origin", dev_numbers(stack.loop[0]),
		 stack.fs_dev, sizeof(stack.fs_dev));
	snapshot_make();
	mount_stack(0);
	open_testfile(&r->a);
	image_and_device_routes();
	add_card(SNAPSHOT_MERGE, -1);
	snprintf(stack_text, sizeof(stack_text),
		 "dm-snapshot-origin of loop on an image on --dir, a persistent snapshot beside, its exceptions on another loop");
}

/*
 * The snapshot-merge route, in the helper: the trial's @n blocks of @buf
 * written through the snapshot, which keeps them as exceptions, then
 * merged into the mounted origin as LVM's lvconvert --merge does it: the
 * snapshot suspended, the origin's table replaced by snapshot-merge over
 * the same exceptions (resuming it hands them over), the snapshot
 * removed.  Once the merge is done the origin gets its snapshot-origin
 * table back, and a new snapshot, over an emptied exception store, is
 * made for the next trial.
 */
static void snapshot_merge(uint64_t (*buf)[PAGE_WORDS], const int *block,
			   int n)
{
	static char zero[4096] __attribute__((aligned(4096)));
	char status[128];
	unsigned long long allocated, total, meta;
	int fd;

	write_device(snapshot_node, buf, block, n);
	if (ctl->error[0])
		return;
	dm_suspend(stack.dm[1]);
	dm_load(stack.dm[0], "snapshot-merge", snapshot_table(), stack.sectors,
		false);
	dm_suspend(stack.dm[0]);
	dm_resume(stack.dm[0]);
	dm_remove(stack.dm[1]);
	/* status "allocated/total metadata": merged when the two agree */
	for (int tries = 0;; tries++) {
		dm_status(stack.dm[0], status, sizeof(status));
		if (sscanf(status, "%llu/%llu %llu", &allocated, &total,
			   &meta) != 3) {
			helper_fail("snapshot-merge status of %s: '%s'",
				    stack.dm[0], status);
			return;
		}
		if (allocated == meta)
			break;
		if (tries == 1000) {
			helper_fail("the merge into %s did not end in 10 s: %s",
				    stack.dm[0], status);
			return;
		}
		usleep(10000);
	}
	dm_reload(stack.dm[0], "snapshot-origin", dev_numbers(stack.loop[0]),
		  stack.sectors, false);
	/* a zeroed header: the next snapshot starts a new store */
	fd = open(stack.loop[1], O_WRONLY | O_DIRECT);
	if (fd < 0 || pwrite(fd, zero, sizeof(zero), 0) != sizeof(zero)) {
		helper_fail("cannot empty the exception store on %s: %s",
			    stack.loop[1], strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	close(fd);
	snapshot_make();
}

/*
 * dm-thin: the filesystem on a thin volume of a pool whose data and
 * metadata are two loop devices; the route writes the pool's data device
 * (device or image) where the volume's blocks are (thin_remap()).
 */
static void thin_setup(struct run *r)
{
	char params[96], pool[64];

	stack_image(0, stack.sectors);
	stack_image(1, 8 * MiB / 512);
	snprintf(params, sizeof(params), "%s", dev_numbers(stack.loop[1]));
	snprintf(params + strlen(params), sizeof(params) - strlen(params),
		 " %s %d 0", dev_numbers(stack.loop[0]), THIN_CHUNK / 512);
	stack_dm(0, "thin-pool", params, pool, sizeof(pool));
	dm_message(stack.dm[0], 0, "create_thin 0");
	snprintf(params, sizeof(params), "%s 0", dev_numbers(pool));
	stack_dm(1, "thin", params, stack.fs_dev, sizeof(stack.fs_dev));
	stack_fs(r, 0);
	image_and_device_routes();
	snprintf(stack_text, sizeof(stack_text),
		 "dm-thin volume of a pool on two loop devices on images on --dir");
}

/*
 * scsi-passthrough: the filesystem on scsi_debug's disk; SCSI commands
 * write its blocks by SG_IO through the disk's block device opened
 * read-only (no writer: R4 counts none), through its sg node (WRITE(10)
 * and WRITE SAME(10) of zeroes), and through its bsg node.
 */
static void scsi_setup(struct run *r)
{
	unsigned long long need = r->slots * r->npages * PAGE_SIZE_4K + 8 * MiB;
	int disk, sg, bsg;

	scsi_debug_add(&stack.scsi, "luf-hazards");
	if (dev_sectors(stack.scsi.disk) * 512 < need)
		die(1, "scsi_debug's disk %s has %llu MiB, the trials need %llu: boot with scsi_debug.dev_size_mb=%llu or give fewer --trials",
		    stack.scsi.disk, dev_sectors(stack.scsi.disk) / 2048,
		    need / MiB, need / MiB + 1);
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", stack.scsi.disk);
	stack_fs(r, 0);
	disk = add_writer(stack.scsi.disk, 0);
	writers[disk].flags = O_RDONLY;
	sg = add_writer(stack.scsi.sg, 0);
	bsg = add_writer(stack.scsi.bsg, 0);
	writers[sg].flags = writers[bsg].flags = O_RDWR;
	add_card(SG_WRITE, disk);
	add_card(SG_WRITE, sg);
	add_card(SG_WRITE_SAME, sg);
	add_card(BSG_WRITE, bsg);
	snprintf(stack_text, sizeof(stack_text),
		 "scsi_debug's disk; SG_IO through it (read-only) and its sg node, sg_io_v4 through its bsg node");
}

/*
 * nvme-passthrough: the filesystem on the guest's NVMe disk; NVMe I/O
 * commands write its blocks (Write, Write Zeroes) through the disk's
 * block device opened read-only and through its generic character
 * device, by ioctl and (Write) by io_uring.
 */
static void nvme_setup(struct run *r)
{
	struct nvme_disk d;
	unsigned long long need = r->slots * r->npages * PAGE_SIZE_4K + 8 * MiB;
	int disk, generic;

	nvme_find(&d, false);
	if (dev_sectors(d.disk) * 512 < need)
		die(1, "the NVMe disk %s has %llu MiB, the trials need %llu: give the guest a larger one or fewer --trials",
		    d.disk, dev_sectors(d.disk) / 2048, need / MiB);
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", d.disk);
	stack_fs(r, 0);
	disk = add_writer(d.disk, 0);
	writers[disk].flags = O_RDONLY;
	generic = add_writer(d.generic, 0);
	writers[generic].flags = O_RDWR;
	add_card(NVME_WRITE, disk);
	add_card(NVME_WRITE, generic);
	add_card(NVME_WRITE_ZEROES, generic);
	add_card(NVME_URING_WRITE, generic);
	snprintf(stack_text, sizeof(stack_text),
		 "an NVMe disk; NVME_IOCTL_IO_CMD through it (read-only) and its generic node, which io_uring writes too");
}

/*
 * zone-reset: the guest's zoned NVMe namespace (ZNS: a zone takes writes
 * at its write pointer only, from its start after a reset).  ext2 is made
 * on an image in --dir through a loop device, copied onto the namespace
 * in order, zone after zone, and mounted from it read-only.  The route
 * resets the zone of each block of the trial and writes the zone again,
 * that block's new data in place, by NVMe passthrough (Zone Management
 * Send, Write) through the namespace opened read-only or through its
 * generic node.  A writer of the mounted device (BLKRESETZONE needs one)
 * is R4's, so no route takes that way.
 */
static unsigned long long zone_bytes;
static int zone_fd = -1;		/* O_RDONLY | O_DIRECT: zone reads */

static int zone_rewrite(int fd, off_t at, const void *block)
{
	static char *zone;
	off_t start = at / zone_bytes * zone_bytes;

	if (!zone && posix_memalign((void **)&zone, 4096, zone_bytes))
		return errno = ENOMEM, -1;
	if (pread(zone_fd, zone, zone_bytes, start) != (ssize_t)zone_bytes)
		return errno = errno ? errno : EIO, -1;
	memcpy(zone + (at - start), block, fs_block);
	if (nvme_zone_reset(fd, start))
		return -1;
	return nvme_write(fd, NVME_WRITE_IOCTL, start, zone, zone_bytes);
}

static void zone_setup(struct run *r)
{
	static char chunk[MiB] __attribute__((aligned(4096)));
	struct nvme_disk d;
	int img, dev, disk, generic;
	unsigned long long bytes;

	nvme_find(&d, true);
	zone_bytes = d.zone_bytes;
	if (zone_bytes > MiB || MiB % zone_bytes)
		die(1, "the zoned namespace %s has zones of %llu bytes: the mode copies whole MiBs of zones",
		    d.disk, zone_bytes);
	bytes = stack.sectors * 512;
	if (dev_sectors(d.disk) * 512 < bytes)
		die(1, "the zoned namespace %s has %llu MiB, the trials need %llu: give the guest a larger one or fewer --trials",
		    d.disk, dev_sectors(d.disk) / 2048, bytes / MiB);
	stack_image(0, stack.sectors);
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", stack.loop[0]);
	stack_fs(r, 0);
	close(r->a.fd);
	if (umount(stack.mnt))
		die(1, "cannot unmount %s: %s", stack.mnt, strerror(errno));
	stack.mounted = false;
	/*
	 * in order, as the zones take it, after a reset (an earlier run's
	 * zones are full); the writer closed before the mount
	 */
	img = open(stack.img[0], O_RDONLY);
	dev = open(d.disk, O_WRONLY | O_DIRECT);
	if (img < 0 || dev < 0)
		die(1, "cannot open %s or %s: %s", stack.img[0], d.disk,
		    strerror(errno));
	if (ioctl(dev, BLKRESETZONE,
		  &(struct blk_zone_range){ 0, bytes / 512 }))
		die(1, "BLKRESETZONE of %s: %s", d.disk, strerror(errno));
	for (unsigned long long at = 0; at < bytes; at += MiB)
		if (pread(img, chunk, MiB, at) != MiB ||
		    pwrite(dev, chunk, MiB, at) != MiB)
			die(1, "copying %s onto %s at %llu: %s", stack.img[0],
			    d.disk, at, strerror(errno));
	close(img);
	close(dev);
	snprintf(stack.fs_dev, sizeof(stack.fs_dev), "%s", d.disk);
	mount_stack(MS_RDONLY);
	open_testfile(&r->a);
	zone_fd = open(d.disk, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (zone_fd < 0)
		die(1, "cannot open %s: %s", d.disk, strerror(errno));
	disk = add_writer(d.disk, 0);
	writers[disk].flags = O_RDONLY;
	generic = add_writer(d.generic, 0);
	writers[generic].flags = O_RDWR;
	add_card(ZONE_REWRITE, disk);
	add_card(ZONE_REWRITE, generic);
	snprintf(stack_text, sizeof(stack_text),
		 "a zoned NVMe namespace (ZNS), read-only; zone resets and writes by NVME_IOCTL_IO_CMD through it (read-only) and its generic node");
}

/* The deck modes' stacks in --dir, the test file @r->a made on them. */
static void stack_setup(struct run *r)
{
	unsigned long long file = r->slots * r->npages * PAGE_SIZE_4K;

	if (mode == BELOW_RANDOM) {
		random_setup(r);
		return;
	}
	cleanup_push_fn(below_teardown);
	stack.file_fd = &r->a.fd;
	stack.sectors = ((file + 16 * MiB) / MiB) * MiB / 512;
	snprintf(stack.mnt, sizeof(stack.mnt), "%s/luf-hazards-%d-mnt", dir,
		 (int)getpid());
	if (mkdir(stack.mnt, 0755))
		die(1, "mkdir %s: %s", stack.mnt, strerror(errno));
	if (mode == MD_RAID1)
		md_setup(r);
	else if (mode == DM_CRYPT)
		crypt_setup(r);
	else if (mode == DM_SNAPSHOT)
		snapshot_setup(r);
	else if (mode == DM_THIN)
		thin_setup(r);
	else if (mode == SCSI_PASSTHROUGH)
		scsi_setup(r);
	else if (mode == NVME_PASSTHROUGH)
		nvme_setup(r);
	else
		zone_setup(r);
	if (ioctl(r->a.fd, FIGETBSZ, &fs_block) || fs_block != 4096)
		die(1, "the filesystem of %s has no 4096-byte blocks",
		    r->a.path);
	deck_open();
}

/* The deck's next route, shuffled again when it is used up: its index. */
static int next_route(void)
{
	if (!deck_next)
		for (int i = deck_size - 1; i > 0; i--) {
			int j = draw(i + 1);
			struct route c = deck[i];

			deck[i] = deck[j];
			deck[j] = c;
		}
	deck_next = (deck_next + 1) % deck_size;
	return deck_next ? deck_next - 1 : deck_size - 1;
}

/*
 * A route for the helper, whose copy of the deck is not shuffled: its kind
 * and writer, and whether before the take-away.
 */
static int route_op(const struct route *rt, bool before)
{
	return OP_ROUTE + ((rt->kind * (MAX_WRITERS + 1) + rt->writer + 1) << 1 |
			   before);
}

/* The routes after which the blocks read zeroes, not the new data. */
static bool zeroes(enum route_kind kind)
{
	return kind == IMAGE_PUNCH || kind == DEV_ZEROOUT ||
	       kind == DEV_DISCARD || kind == SG_WRITE_SAME ||
	       kind == NVME_WRITE_ZEROES;
}

/* The bdev modes: the type of the filesystem mounted at --dir. */
static void mount_type(char *type, size_t size)
{
	FILE *m = setmntent("/proc/self/mounts", "r");
	struct mntent *e;

	type[0] = 0;
	while (m && (e = getmntent(m)))
		if (!strcmp(e->mnt_dir, dir))
			snprintf(type, size, "%s", e->mnt_type);
	if (m)
		endmntent(m);
	if (!type[0])
		die(1, "%s is not a mount point (/proc/self/mounts): the bdev modes mount it again after each trial; give --dir the root of a disk filesystem",
		    dir);
}

static void bdev_setup(const struct testfile *f)
{
	struct stat st, node;
	char uevent[64], line[128], name[32] = "";
	int fd, sector = 0;
	FILE *u;

	if (fstat(f->fd, &st))
		die(1, "fstat %s: %s", f->path, strerror(errno));
	snprintf(uevent, sizeof(uevent), "/sys/dev/block/%u:%u/uevent",
		 major(st.st_dev), minor(st.st_dev));
	u = fopen(uevent, "r");
	if (!u)
		die(1, "%s is not on a block device (no %s): bdev needs a disk filesystem",
		    f->path, uevent);
	while (fgets(line, sizeof(line), u))
		sscanf(line, "DEVNAME=%31s", name);
	fclose(u);
	snprintf(bdev_path, sizeof(bdev_path), "/dev/%s", name);
	if (!name[0] || stat(bdev_path, &node) || !S_ISBLK(node.st_mode) ||
	    node.st_rdev != st.st_dev) {
		snprintf(bdev_path, sizeof(bdev_path), "/dev/luf-hazards-%d",
			 (int)getpid());
		if (mknod(bdev_path, S_IFBLK | 0600, st.st_dev))
			die(1, "no node of block device %u:%u in /dev, and mknod %s: %s",
			    major(st.st_dev), minor(st.st_dev), bdev_path,
			    strerror(errno));
		snprintf(bdev_made, sizeof(bdev_made), "%s", bdev_path);
		cleanup_push_fn(remove_node);
	}
	if (ioctl(f->fd, FIGETBSZ, &fs_block) || fs_block <= 0)
		die(1, "ioctl(FIGETBSZ) on %s: %s", f->path, strerror(errno));
	/* read-only: a writer of the device is what the trials make */
	fd = open(bdev_path, O_RDONLY);
	if (fd < 0 || ioctl(fd, BLKSSZGET, &sector) || sector <= 0)
		die(1, "cannot read the sector size of %s: %s", bdev_path,
		    strerror(errno));
	close(fd);
	if (PAGE_SIZE_4K % fs_block || fs_block % sector)
		die(1, "the filesystem of %s has %d-byte blocks on %s, whose sectors are %d bytes: bdev needs blocks of at most a page, each a whole number of sectors",
		    f->path, fs_block, bdev_path, sector);
	mount_type(fs_type, sizeof(fs_type));
}

/*
 * The bdev modes: unmount the filesystem of --dir and mount it again, so
 * that its device has had no writer since the mount (LUF's R4 makes no
 * page of a file lazy on a device that has).  Nothing may hold it: each
 * trial's mapping is gone, and the helper holds no descriptor of the file.
 */
static void remount(struct testfile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (umount(dir))
		die(1, "cannot unmount %s to mount it again (the bdev modes do after each trial): %s; is something else using it?",
		    dir, strerror(errno));
	if (mount(bdev_path, dir, fs_type, 0, NULL))
		die(1, "cannot mount %s (%s) on %s again: %s", bdev_path,
		    fs_type, dir, strerror(errno));
	f->fd = open(f->path, O_RDONLY);
	if (f->fd < 0)
		die(1, "cannot open %s after mounting %s again: %s", f->path,
		    dir, strerror(errno));
	posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
}

static void set_rules(const char *mask)
{
	need_debugfs(DISABLE_RULES);
	if (!path_exists(DISABLE_RULES))
		ktap_skip_exit("--disable-rules: no " DISABLE_RULES ": this kernel has no CONFIG_DEBUG_LUF; use the lab's debug kernel");
	setting_write(DISABLE_RULES, mask);
}

/* --- the trials ------------------------------------------------------------ */

/* Map @f's pages from @region at @va, shared and read-only. */
static void map_region(struct run *r, uintptr_t va, struct testfile *f,
		       long region)
{
	size_t len = r->npages * PAGE_SIZE_4K;

	if (mmap((void *)va, len, PROT_READ, MAP_SHARED | MAP_FIXED,
		 f->fd, region * len) == MAP_FAILED)
		die(1, "mmap of %s: %s", f->path, strerror(errno));
	/* no readahead around faults, neither here nor in the reader */
	madvise((void *)va, len, MADV_RANDOM);
}

static void file_image(struct page_image *m, const struct testfile *f,
		       long region, int npages)
{
	memcpy(m->tag, f->tag, sizeof(m->tag));
	for (int i = 0; i < npages; i++)
		m->index[i] = region * npages + i;
}

/* demote: pages of the trial whose PTE in this mm maps a page on lower_node */
static int pages_on_lower_node(uintptr_t va, int npages)
{
	void *pages[TRIAL_MAX_PAGES];
	int status[TRIAL_MAX_PAGES], n = 0;

	for (int i = 0; i < npages; i++)
		pages[i] = (void *)(va + i * PAGE_SIZE_4K);
	/* no nodes given: only says where each page is, moves nothing */
	if (syscall(SYS_move_pages, 0, npages, pages, NULL, status, 0))
		die(1, "move_pages (where are the pages): %s", strerror(errno));
	for (int i = 0; i < npages; i++)
		n += status[i] == lower_node;
	return n;
}

/*
 * anon-force: the new data over the trial's pages through /proc/self/mem,
 * as a debugger writes to read-only memory; then main reads them back
 * through its own mapping (its CPU flushed this mm's TLB entries on its way
 * back from the helper's take-away)
 */
static void force_write(struct run *r, uintptr_t va)
{
	static uint64_t buf[TRIAL_MAX_PAGES][PAGE_WORDS];
	size_t len = r->npages * PAGE_SIZE_4K;
	ssize_t n;

	for (int i = 0; i < r->npages; i++)
		fill_page(buf[i], ctl->new.index[i], ctl->new.tag);
	n = pwrite(mem_fd, buf, len, (off_t)va);
	if (n != (ssize_t)len)
		die(1, "write of %zu bytes at 0x%lx through /proc/self/mem: %s",
		    len, (unsigned long)va,
		    n < 0 ? strerror(errno) : "short write");
	if (memcmp((const void *)va, buf, len))
		die(1, "the pages at 0x%lx do not read back what /proc/self/mem wrote there",
		    (unsigned long)va);
}

/*
 * swap-below: the new data written into the swap slots of the trial's pages
 * (their swap entries in /proc/self/pagemap) in the image under the swap
 * area's loop device, then read back by main through /proc/self/mem, whose
 * GUP faults them in from the changed slots: a fresh translation gives the
 * new data.  Not through main's own mapping: where switching back to an mm
 * does not flush (arm64's ASIDs), main's CPU may hold a stale entry too.
 * False, with nothing written, if a page was swapped in again first (the
 * reader's fault, its entry gone from its TLB), or is still in the swap
 * cache (mincore(): the loop device's write of it had not finished when
 * reclaim looked, so reclaim kept it, and a swap-in maps that page again,
 * the one the stale entry reads): the old data stays what a fresh
 * translation gives, and the trial counts as disturbed.
 */
static bool swap_write(struct run *r, uintptr_t va)
{
	static uint64_t buf[TRIAL_MAX_PAGES][PAGE_WORDS]
		__attribute__((aligned(PAGE_SIZE_4K)));
	static uint64_t back[TRIAL_MAX_PAGES][PAGE_WORDS];
	size_t len = r->npages * PAGE_SIZE_4K;
	uint64_t e[TRIAL_MAX_PAGES];
	unsigned char cached[TRIAL_MAX_PAGES];

	if (mincore((void *)va, len, cached))
		die(1, "mincore of the trial's pages: %s", strerror(errno));
	for (int i = 0; i < r->npages; i++) {
		e[i] = pagemap_self(va + i * PAGE_SIZE_4K);
		if (!swapped_entry(e[i]) || (cached[i] & 1)) {
			ctl->new = ctl->old;
			return false;
		}
	}
	for (int i = 0; i < r->npages; i++) {
		/* pagemap: swap type in bits 0-4, offset in bits 5-54 */
		off_t slot = (e[i] >> 5) & ((1ULL << 50) - 1);

		fill_page(buf[i], ctl->new.index[i], ctl->new.tag);
		if (pwrite(swap_fd, buf[i], PAGE_SIZE_4K, slot * PAGE_SIZE_4K) !=
		    PAGE_SIZE_4K)
			die(1, "cannot write swap slot %lld in %s: %s",
			    (long long)slot, swap_img, strerror(errno));
	}
	if (pread(mem_fd, back, len, (off_t)va) != (ssize_t)len)
		die(1, "cannot read the pages at 0x%lx through /proc/self/mem: %s",
		    (unsigned long)va, strerror(errno));
	if (!memcmp(back, buf, len))
		return true;
	/*
	 * The reader lost its entry (arm64: a full TLBI that QEMU applies to
	 * every entry) and swapped the page in from the old slot between the
	 * checks and the write: what a fresh translation gives is the old data
	 */
	for (int i = 0; i < r->npages; i++)
		fill_page(buf[i], ctl->old.index[i], ctl->old.tag);
	if (memcmp(back, buf, len))
		die(1, "the pages at 0x%lx do not read back what was written into their swap slots in %s: did they go to another swap area?",
		    (unsigned long)va, swap_img);
	ctl->new = ctl->old;
	return false;
}

/*
 * After a lazy take-away: make a fresh translation give other bytes; false
 * if the trial cannot stand (anon-move's move_away()).
 */
static bool hazard(struct run *r, uintptr_t va, long region)
{
	bool stands = true;

	switch (mode) {
	case ANON_WRITE:
		/*
		 * main's swap entries become its last: the swap-in is its
		 * own; then main writes to it, and the swap-in maps it
		 * writable
		 */
		helper_command(OP_DROP);
		for (int i = 0; i < r->npages; i++)
			fill_page((uint64_t *)(va + i * PAGE_SIZE_4K),
				  ctl->new.index[i], ctl->new.tag);
		break;
	case ANON_FORCE:
		force_write(r, va);
		break;
	case SWAP_BELOW:
		stands = swap_write(r, va);
		break;
	case BDEV:
		helper_command(OP_BDEV);
		break;
	case LOOP_BACKING:
	case PARTITION:
	case DM_LINEAR:
	case DM_RELOAD:
		helper_command(OP_BELOW);
		break;
	case BDEV_CLOSED:
	case LOOP_CHANGE_FD:	/* these changed the blocks before the take-away */
	case LOOP_OFFSET:
		helper_command(OP_BDEV_CHECK);
		break;
	case BELOW_RANDOM:
	case MD_RAID1:
	case DM_CRYPT:
	case DM_SNAPSHOT:
	case DM_THIN:
	case SCSI_PASSTHROUGH:
	case NVME_PASSTHROUGH:
	case ZONE_RESET:
		helper_command(r->before ? OP_BDEV_CHECK :
			       route_op(&deck[r->route], false));
		break;
	case ANON_MOVE:
		stands = move_away(r, va, region);
		/*
		 * Read-fault the emptied addresses now, as the reader would
		 * if its TLB had let an entry go: the zero page goes in there,
		 * and a debug kernel compares it with the old page
		 * (CONFIG_DEBUG_LUF).  The reader's stale entries, if any,
		 * are untouched by it.
		 */
		if (madvise((void *)va, r->npages * PAGE_SIZE_4K,
			    MADV_POPULATE_READ))
			die(1, "madvise(MADV_POPULATE_READ) of the moved-from pages: %s (needs Linux 5.14 or later)",
			    strerror(errno));
		break;
	case REUSE:
	case DEMOTE:
	case ANON_REUSE:
	case ANON_DEMOTE:
	case COMPACT:
		break;
	}
	return stands;
}

static void one_trial(struct run *r)
{
	long t = ++r->attempts;
	long region = t - 1;
	uintptr_t va = anon_mode() ? r->anon_va[region] :
		(uintptr_t)fresh_va(&r->va, r->npages * PAGE_SIZE_4K,
				    PAGE_SIZE_4K, t);
	struct timespec settle = { 0, 20 * 1000 * 1000 };
	long long luf0, luf1, mig0 = 0, refused0 = 0, preempted;
	bool lazy, disturbed, refused = false, stands = true;
	int demoted;

	ctl->length = region * r->npages * PAGE_SIZE_4K;
	file_image(&ctl->old, &r->a, region, r->npages);
	if (deck_mode()) {
		r->route = next_route();
		r->before = draw(2);
		/*
		 * A merge outlasts LUF's hold bound (LUF_HOLD_JIFFIES) in
		 * the lab's guests, whose timer then flushes what the
		 * take-away left: only before it can the route meet a
		 * stale entry
		 */
		r->before |= deck[r->route].kind == SNAPSHOT_MERGE;
	}
	if (mode == ANON_MOVE ||
	    (deck_mode() && zeroes(deck[r->route].kind))) {
		/*
		 * anon-move: the address is none now, a read fault maps the
		 * zero page; the deck modes: the blocks were zeroed
		 */
		memset(&ctl->new, 0, sizeof(ctl->new));
	} else {
		random_tag(ctl->new.tag, NEW_MAGIC ^ (uint64_t)t << 20);
		for (int i = 0; i < r->npages; i++)
			ctl->new.index[i] = NEW_MAGIC << 32 | (uint64_t)t << 8 | i;
	}
	if (!anon_mode())
		map_region(r, va, &r->a, region);
	/* on this CPU: onto the LRU batch the take-away drains */
	if (mode == COMPACT) {
		slot_free();
		bind_memory(lower_node);
	}
	trial_fault_in(va, r->npages, t);
	if (mode == COMPACT)
		bind_memory(-1);
	/* the page is cached and mapped: the device's new blocks stay under it */
	if (mode == BDEV_CLOSED)
		helper_command(OP_BDEV_WRITE);
	if (swaps_before())
		helper_command(OP_BELOW);
	if (deck_mode() && r->before)
		helper_command(route_op(&deck[r->route], true));
	trial_start(va, r->npages, t, modes[mode].after);

	/*
	 * Under LUF, anything the reader's CPU switches to after the take-away
	 * flushes its TLB on the way back (the take-away moved the mm's
	 * tlb_gen): a trial in which that happened before the rule's flush
	 * proves nothing.  The rule flushes first thing in every mode's
	 * operation (and in reuse's release), so the window ends where that
	 * begins; switches after it are harmless (on a correct kernel, the
	 * work item that frees the held pages after a rule's flush may run on
	 * the reader's CPU).  Most switches were rcu_sched, woken by the grace
	 * period of this trial's mmap (VMAs are freed by RCU), on the reader's
	 * CPU because main's was busy: let it run now, on this idle CPU.
	 */
	nanosleep(&settle, NULL);
	preempted = reader_preemptions();
	/* no stat_refresh here: it would run work on the reader's CPU */
	luf0 = vmstat_value("nr_tlb_luf_folios");
	if (mode == ANON_DEMOTE)
		mig0 = vmstat_value("pgmigrate_success");
	if (mode == BDEV_CLOSED)
		refused0 = vmstat_value("nr_tlb_luf_fallback_file");
	helper_command(canary_mode() ? OP_REUSE : OP_TAKE);
	luf1 = vmstat_value("nr_tlb_luf_folios");
	lazy = ctl->taken == r->npages && luf1 - luf0 >= r->npages;
	/* bdev-closed: the kernel would not defer, and flushed */
	if (mode == BDEV_CLOSED)
		refused = ctl->taken == r->npages &&
			  vmstat_value("nr_tlb_luf_fallback_file") - refused0 >=
			  r->npages;
	disturbed = reader_preemptions() != preempted;
	/* a page reclaimed, not demoted, would prove another path */
	if (mode == DEMOTE) {
		demoted = pages_on_lower_node(va, r->npages);
		lazy = lazy && demoted == r->npages;
		r->demoted += demoted;
	} else if (mode == ANON_DEMOTE) {
		/*
		 * The same reclaim call often goes on to node 1 and swaps the
		 * copy out (clean, in the swap cache: no write), so the copy
		 * may not be there to find.  The trial's pages are the only ones of
		 * the cgroup in memory, and only demotion migrates in it:
		 * pgmigrate_success (an exact event count) says they went.
		 */
		demoted = vmstat_value("pgmigrate_success") - mig0;
		lazy = lazy && demoted >= r->npages;
		r->demoted += demoted < r->npages ? demoted : r->npages;
	} else if (mode == COMPACT) {
		/* moved, and within the node: compaction, nothing else */
		demoted = pages_on_lower_node(va, r->npages);
		lazy = lazy && demoted == r->npages;
		r->demoted += demoted;
	}
	r->luf_folios += luf1 - luf0;
	r->taken += ctl->taken;
	r->reused += ctl->reused;

	if ((lazy || refused) && !canary_mode()) {
		long passes;

		stands = hazard(r, va, region);
		r->unmovable += !stands;
		/* bdev: the helper found the old data in the page cache */
		if (blocks_mode() && !memcmp(&ctl->new, &ctl->old,
					   sizeof(ctl->new)))
			r->refaulted++;
		passes = atomic_load(&ctl->passes);
		trial_done();
		/* +1: the pass under way may have begun before "done" */
		wait_reader(t, passes + 1 + r->linger,
			    "read on after \"done\"");
	} else {
		wait_reader(t, atomic_load(&ctl->passes) + r->linger,
			    "finish reading after the take-away");
	}
	if (refused && !lazy) {
		/* flushed: what the reader's CPU ran since cannot matter */
		r->refused++;
		r->done++;
	} else if (!lazy) {
		r->missed++;
	} else if (disturbed || !stands) {
		r->disturbed++;
	} else {
		r->done++;
		if (deck_mode()) {
			route_trials[deck[r->route].kind]++;
			before_trials += r->before;
		}
	}
	/* with --keep-going: which routes the violating trials took */
	if (deck_mode() && atomic_load(&ctl->violations) > violations_seen) {
		violations_seen = atomic_load(&ctl->violations);
		route_violations[deck[r->route].kind]++;
	}
	trial_stop();
	/*
	 * anon-demote: the helper's copy (a swap entry) would keep the page in
	 * the swap cache and in the cgroup, where reclaim, oldest first, would
	 * demote past trials' pages before the next trial's
	 */
	if (mode == ANON_DEMOTE)
		helper_command(OP_DROP);
	/*
	 * compact: the page goes, so that the next trial's is the only one on
	 * the node that compaction could move
	 */
	if (mode == COMPACT) {
		munmap((void *)va, r->npages * PAGE_SIZE_4K);
		posix_fadvise(r->a.fd, region * r->npages * PAGE_SIZE_4K,
			      r->npages * PAGE_SIZE_4K, POSIX_FADV_DONTNEED);
	}
	/*
	 * the bdev modes: the device was written; the next trial begins on
	 * a fresh mount (the address stays reserved, PROT_NONE)
	 */
	if (bdev_mode()) {
		if (mmap((void *)va, r->npages * PAGE_SIZE_4K, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
			 -1, 0) == MAP_FAILED)
			die(1, "cannot unmap the trial's pages: %s",
			    strerror(errno));
		remount(&r->a);
	}
}

static char mask[32];

/* --dir DIR, --disable-rules MASK, --seed N */
static void own_arg(int i, char *value)
{
	char *end;
	unsigned long m;

	if (i == 2) {
		errno = 0;
		seed = strtoull(value, &end, 0);
		if (errno || end == value || *end || value[0] == '-')
			usage_error("bad --seed '%s': give a number", value);
		seeded = true;
		return;
	}
	if (i == 0) {
		if (strlen(value) > 200)
			usage_error("--dir: a path of at most 200 characters");
		dir = value;
		return;
	}
	errno = 0;
	m = strtoul(value, &end, 0);
	if (errno || end == value || *end || value[0] == '-')
		usage_error("bad --disable-rules '%s': give a bitmask like 2 or 0x14",
			    value);
	snprintf(mask, sizeof(mask), "%lu", m);
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
		"bdev", "bdev-closed", "reuse", "demote", "anon-write",
		"anon-force", "anon-reuse", "anon-move", "anon-demote", "compact",
		"loop-backing", "partition", "loop-change-fd", "dm-linear",
		"dm-reload", "loop-offset", "below-random", "swap-below",
		"md-raid1", "dm-crypt", "dm-snapshot", "dm-thin",
		"scsi-passthrough", "nvme-passthrough", "zone-reset", NULL };
	static const char *const own[] = { "dir", "disable-rules", "seed",
					   NULL };
	struct attack_args args = {
		.usage = usage, .modes = names, .own = own, .own_arg = own_arg };
	struct fields extra = { 0 }, checks = { 0 };
	/* static: the below modes' teardown, at exit, closes its file */
	static struct run r;
	int main_cpu, reader_cpu;
	struct phase p = { 0 };
	long max_missed, max_disturbed, violations;
	char name[64];

	parse_attack_args(argc, argv, &args);
	mode = args.mode;
	if (seeded && !deck_mode())
		usage_error("--seed is for the modes whose routes are drawn: below-random, md-raid1, dm-crypt, dm-snapshot, dm-thin, scsi-passthrough, nvme-passthrough, zone-reset");
	if (!seeded)
		seed = (unsigned long long)time(NULL) << 16 ^ getpid();
	/* xorshift64 must not start at 0 */
	rng = seed * 0x9e3779b97f4a7c15ULL | 1;
	r.trials = args.trials;
	/*
	 * demote: a page's first meeting with reclaim only clears its young
	 * PTE; with more pages, those demoted by one reclaim call have their
	 * copies reclaimed by the next, which the others need (RECLAIM_ARG);
	 * bdev: the reader may fault some pages in again before the write
	 * and some after, a mix a trial cannot expect (helper_bdev_check())
	 */
	r.npages = args.npages ? args.npages :
		   node_mode() || blocks_mode() || mode == SWAP_BELOW ? 1 : 4;
	r.linger = args.linger;
	r.keep_going = args.keep_going;
	if (!r.trials)
		r.trials = args.quick ? 200 : 1000;
	snprintf(name, sizeof(name), "luf-hazards/%s", names[mode]);
	ktap_plan(1);
	ktap_test("%s", name);

	/* preconditions: never a pass that was not tested */
	if (!path_exists(LUF_SWITCH))
		ktap_skip_exit("this kernel has no LUF (" LUF_SWITCH "): nothing to attack");
	attack_cpus(&main_cpu, &reader_cpu);
	if (vmstat_value("nr_tlb_luf_folios") < 0)
		ktap_skip_exit("no nr_tlb_luf_folios in /proc/vmstat (CONFIG_VM_EVENT_COUNTERS): a lazy take-away could not be told from a flushed one");
	/*
	 * demote: whether a reclaim call demotes the trial's page (and not
	 * another page of the cgroup), and whether its copy outlives the call,
	 * depends on timing: 26 of 245 trials missed on patched, 16 of 27 on
	 * the debug kernel in a loaded CI.  A missed trial costs time only;
	 * every counted one was checked on its own.
	 */
	max_missed = demote_mode() ? 3 * r.trials + 10 : r.trials / 10 + 10;
	/*
	 * Room for as many disturbed trials as trials (TCG: 0 to 14 %), and
	 * four times as many in the demote modes: their take-away (reclaim
	 * and a demotion; in anon-demote often the copy's swap-out too) takes
	 * long enough on the debug kernel for the work that releases held
	 * folios, or other work reclaim queues, to run on the reader's CPU,
	 * the more so when other guests slow the host: on debug, anon-demote
	 * 51 of 88, 58 of 123 and 80 of 140 attempts and demote 51 of 91
	 * (a clean-clone CI) with two other guests running; 4 of 57 and 5 of
	 * 56 on an idle host; anon-demote on patched 1 of 201.  compact's
	 * take-away is a compaction of node 1, whose sysfs file first drains
	 * every CPU's LRU batches (lru_add_drain_all(), work queued on the
	 * reader's CPU too): on debug 51 of 74 attempts, on patched 3 of 203;
	 * with housekeeping_off(), on debug 41 of 91 where it had been 201 of
	 * 204 without.
	 */
	max_disturbed = node_mode() ? 4 * r.trials : r.trials;
	r.slots = r.trials + max_disturbed + max_missed + 1;
	if (anon_mode())
		require_swap(r.slots * r.npages * PAGE_SIZE_4K);
	else
		/* the below modes: the file in three images' room at most */
		check_dir(dir, below_mode() ?
			  3 * (r.slots * r.npages * PAGE_SIZE_4K + 16 * MiB) :
			  r.slots * r.npages * PAGE_SIZE_4K);

	pin_main(main_cpu);
	if (demote_mode())
		demotion_setup();
	if (mode == COMPACT)
		compact_setup();
	if (mask[0])
		set_rules(mask);
	setting_write(LUF_SWITCH, "1");
	/* without the deferred flush there is nothing to make lazy */
	if (path_exists(UNMAP_FLUSH))
		setting_write(UNMAP_FLUSH, "1");
	attack_init(name, main_cpu, reader_cpu);
	housekeeping_off(main_cpu);
	/* compaction releases what it held itself, before it returns */
	ctl->luf_release = canary_mode() && mode != COMPACT;
	if (mode == COMPACT) {
		snprintf(ctl->compact, sizeof(ctl->compact), "%s", compact_path);
		ctl->canary_bound = true;
		ctl->canary_node = lower_node;
	}
	if (demote_mode()) {
		/*
		 * Before the fork and the reader: the trial's pages are
		 * charged to this cgroup (main faults them in, or, in
		 * anon-demote, makes them there), and the helper reclaims
		 * from it.  No limit: reclaim only when asked.
		 */
		snprintf(ctl->reclaim, sizeof(ctl->reclaim), "%s/memory.reclaim",
			 memcg_create("luf-hazards", 0));
		snprintf(ctl->reclaim_arg, sizeof(ctl->reclaim_arg), "%s",
			 mode == DEMOTE ? RECLAIM_ARG : RECLAIM_ARG_ANON);
		if (mode == DEMOTE)
			memcg_join_until_exit();
	}
	fresh_va_reserve(&r.va, r.slots, r.npages * PAGE_SIZE_4K, PAGE_SIZE_4K);
	if (anon_mode()) {
		if (mode == SWAP_BELOW)
			swap_setup(&r);
		make_anon(&r);
		if (mode == ANON_MOVE)
			move_setup(&r);
	} else {
		cleanup_push_fn(remove_file);
		if (deck_mode())
			stack_setup(&r);
		else if (below_mode())
			below_setup(&r);
		else
			make_file(&r.a, made, dir, 'a', r.slots * r.npages);
		if (bdev_mode())
			bdev_setup(&r.a);
	}
	snprintf(ctl->path, sizeof(ctl->path), "%s", r.a.path);
	if (mode == ANON_FORCE)
		force_setup();

	/*
	 * the bdev and below modes: the helper must not inherit the file (it
	 * opens it for each command); the bdev modes' first trial begins on
	 * a fresh mount
	 */
	if (blocks_mode())
		close(r.a.fd);
	attack_start(r.npages, helper_op);
	if (bdev_mode()) {
		r.a.fd = -1;
		remount(&r.a);
	}
	if (below_mode())
		open_testfile(&r.a);
	attack_begin(&p);
	while (r.done < r.trials) {
		one_trial(&r);
		if (atomic_load(&ctl->violations) && !r.keep_going)
			break;
		if (r.missed > max_missed || r.disturbed > max_disturbed)
			break;
	}
	attack_end(&p);

	violations = atomic_load(&ctl->violations);
	if (!violations && r.missed > max_missed && demote_mode())
		fprintf(stderr, "%s: %ld of the %ld pages were demoted to node %d by the take-away (the rest were not)\n",
			program_invocation_short_name, r.demoted,
			r.attempts * r.npages, lower_node);
	if (!violations && r.missed > max_missed)
		die(1, "in %ld of %ld trials the take-away was not lazy (nr_tlb_luf_folios +%ld for %ld pages taken; LUF fell back: writable %lld, file %lld, race %lld, other %lld): the test proves nothing; %s",
		    r.missed, r.attempts, r.luf_folios, r.taken,
		    phase_delta(&p, "nr_tlb_luf_fallback_writable"),
		    phase_delta(&p, "nr_tlb_luf_fallback_file"),
		    phase_delta(&p, "nr_tlb_luf_fallback_race"),
		    phase_delta(&p, "nr_tlb_luf_fallback_other"),
		    anon_mode() ? "does this kernel's LUF take anonymous folios (patch 0013)?" :
		    "is the file on a disk filesystem and not open for writing?");
	if (!violations && r.disturbed > max_disturbed)
		die(1, "in %ld of %ld trials the reader's CPU switched to another task between the take-away and the mode's operation (which flushes its TLB under LUF), or (anon-move) it faulted a page back in, which UFFDIO_MOVE then would not move (%ld): the test proves nothing; is something else running?",
		    r.disturbed, r.attempts, r.unmovable);
	if (!violations && canary_mode() && r.reused * 2 < r.done * r.npages)
		die(1, "the canary process got only %ld of the %ld released pages: the test proves little; is something else allocating on CPU %d?",
		    r.reused, r.done * r.npages, main_cpu);

	attack_fields(&extra, r.done, r.npages, r.linger, r.a.path);
	field_str(&extra, "rule", modes[mode].rule);
	field_int(&extra, "disable_rules", mask[0] ? strtol(mask, NULL, 10) : 0);
	field_int(&checks, "attempts", r.attempts);
	field_int(&checks, "missed_trials", r.missed);
	field_int(&checks, "lazy_trials", r.done - r.refused + r.disturbed);
	field_int(&checks, "disturbed_trials", r.disturbed);
	field_int(&checks, "luf_folios", r.luf_folios);
	field_int(&checks, "taken_pages", r.taken);
	field_int(&checks, "reused_pages", r.reused);
	field_int(&checks, "expected_pages", r.attempts * r.npages);
	if (demote_mode())	/* demoted by the take-away, every attempt */
		field_int(&checks, "demoted_pages", r.demoted);
	if (mode == COMPACT)
		field_int(&checks, "compacted_pages", r.demoted);
	if (blocks_mode())
		field_int(&checks, "refaulted_trials", r.refaulted);
	if (mode == BDEV_CLOSED)
		field_int(&checks, "refused_trials", r.refused);
	if (mode == ANON_MOVE || mode == SWAP_BELOW)
		field_int(&checks, "unmovable_trials", r.unmovable);
	if (deck_mode()) {
		field_int(&extra, "seed", (long long)seed);
		field_str(&extra, "stack", stack_text);
		route_field(&checks, "route_trials", route_trials);
		route_field(&checks, "route_violations", route_violations);
		field_int(&checks, "before_trials", before_trials);
		field_int(&checks, "writers", nr_writers);
	}
	attack_switch_checks(&checks);
	report_result(name, "threads", 0, &p, &extra, &checks);
	phase_free(&p);
	ktap_result(!violations);
	return ktap_status();
}
