# SPDX-License-Identifier: GPL-2.0
# The selftest guest (lab/safety.py): run_vmtests.sh once per category
# (run_category NAME SECONDS, which lab/safety.py appends), with the
# counters of unmapping and TLB shootdowns around each and a watchdog.
# /safety/bin/tr is the shim beside this file (tr), installed first.
export PATH=/safety/bin:$PATH
if grep -q " /scratch ext2 " /proc/mounts; then
	export TMPDIR=/scratch
else
	echo "SAFETY-ERROR no /scratch: stale_tlb's file would not be on a disk filesystem"
fi
cd /safety/mm
# run_vmtests.sh raises nr_hugepages to 128 (256 MiB) itself, but puts back
# the value it found after the userfaultfd tests: reserved here, the huge
# pages are still there for cow, gup_longterm, pagemap_ioctl and migration
echo 128 >/proc/sys/vm/nr_hugepages
# run_vmtests.sh starts on-fault-limit (mlock) only as `sudo -u nobody`, and
# skips it without sudo.  Everything here runs as root, so a sudo of four
# lines does: `-u USER` through busybox su (USER must be in /etc/passwd),
# anything else as root.
mkdir -p /etc
grep -q '^nobody:' /etc/passwd 2>/dev/null ||
	echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >>/etc/passwd
cat >/safety/bin/sudo <<'EOF'
#!/bin/sh
[ "$1" = -u ] || exec "$@"
user=$2; shift 2
exec su -s /bin/sh "$user" -c 'exec "$0" "$@"' "$@"
EOF
chmod +x /safety/bin/sudo
# ksm_tests -N marks one page mergeable, waits two full scans, then the
# other, and waits two more: it assumes ksmd looks at every page in every
# scan.  KSM's smart scan (6.7) skips a page it has seen unchanged for a few
# scans, in up to 8 scans out of 9, and ksm_tests sets sleep_millisecs to 0,
# so the first page ages through many scans while the test polls.  Both
# kernels then fail "KSM NUMA merging" at random (docs/safety.md).  No test
# here is about the smart scan, so it is off for all of them.
echo 0 >/sys/kernel/mm/ksm/smart_scan 2>/dev/null
# the time before each program starts and before its result: per-test times
cat >/tmp/stamp <<'EOF'
while IFS= read -r line; do
	case $line in
	"# running "*|"ok "*|"not ok "*) echo "SAFETY-T $(date +%s)" ;;
	esac
	printf '%s\n' "$line"
done
EOF
# The counters of unmapping and of TLB shootdowns, before and after each
# category, as `SAFETY-COUNTER <category> before|after <name> <value>`: what
# a test did, where its own output does not say (tests/test_safety.py).
# irq/TLB: the TLB shootdown interrupts of every CPU (x86's TLB line).
counters() {
	grep -E '^(nr_tlb_|pswp|pgsteal_|pgmigrate_success )' /proc/vmstat |
		sed "s/^/SAFETY-COUNTER $1 $2 /"
	for f in $T/hugepages-*/stats/swpout; do
		[ -r "$f" ] || continue
		size=${f#$T/hugepages-}
		echo "SAFETY-COUNTER $1 $2 mthp/${size%%/*}/swpout $(cat "$f")"
	done
	awk -v p="SAFETY-COUNTER $1 $2" '$1 == "TLB:" {
		n = 0
		for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++)
			n += $i
		print p, "irq/TLB", n
	}' /proc/interrupts
}
# run_vmtests.sh once per category, in its own process group, so that a watchdog
# can kill it and every test it started; what it ran is reported either way
run_category() {
	counters "$1" before
	echo "SAFETY-CATEGORY-BEGIN $1 $(date +%s)"
	setsid sh -c "bash ./run_vmtests.sh -t $1 2>&1 | sh /tmp/stamp" &
	pid=$!
	( sleep "$2"; echo "SAFETY-WATCHDOG $1 $2"; kill -KILL -"$pid" ) 2>/dev/null &
	dog=$!
	wait "$pid"
	rc=$?
	kill "$dog" 2>/dev/null
	echo "SAFETY-CATEGORY-END $1 $rc $(date +%s)"
	counters "$1" after
}
