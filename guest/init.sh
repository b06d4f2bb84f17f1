#!/bin/busybox sh
# /init of the lab's guest: mount the pseudo filesystems, set up what the
# kernel command line asks for (unflush.zram=SIZE, unflush.data=1,
# unflush.scratch=SIZE), run
# /run.sh with its output on the second serial port (/dev/ttyS1, which the
# host reads apart from the kernel console; unflush.out=DEV names another
# device, as on arm64's `virt` machine, whose only UART is the console),
# report its exit status there, and power off.  The host treats a missing
# UNFLUSH-EXIT line as a guest that died.
/bin/busybox --install -s /bin
export PATH=/unflush/bin:/bin:/sbin
mkdir -p /proc /sys /dev /tmp /run /data /scratch
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null

out=/dev/ttyS1
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	unflush.out=*) out=/dev/${arg#unflush.out=} ;;
	esac
done
# a virtio console's port shows up a little after its driver has probed
n=0
while [ ! -c "$out" ] && [ $n -lt 100 ]; do
	sleep 0.1
	n=$((n + 1))
done
[ -c "$out" ] || echo "unflush: no result channel $out" >/dev/console
fail() {
	echo "UNFLUSH-SETUP-FAILED $*" >"$out"
	poweroff -f
}

for arg in $(cat /proc/cmdline); do
	case "$arg" in
	unflush.zram=*)
		size=${arg#unflush.zram=}
		echo lz4 >/sys/block/zram0/comp_algorithm 2>/dev/null
		echo "$size" >/sys/block/zram0/disksize || fail "zram disksize $size"
		mkswap /dev/zram0 >/dev/null || fail "mkswap /dev/zram0"
		swapon /dev/zram0 || fail "swapon /dev/zram0"
		;;
	unflush.data=1)
		mount -t ext2 -o ro /dev/vda /data || fail "mount /dev/vda on /data"
		;;
	unflush.scratch=*)
		# a writable disk filesystem (clean page cache that reclaim
		# drops, unlike tmpfs): ext2 on a zram device of its own
		size=${arg#unflush.scratch=}
		dev=/dev/zram$(cat /sys/class/zram-control/hot_add) ||
			fail "zram hot_add"
		echo "$size" >/sys/block/${dev#/dev/}/disksize ||
			fail "${dev#/dev/} disksize $size"
		mke2fs -b 4096 "$dev" >/dev/null 2>&1 || fail "mke2fs $dev"
		mount -t ext2 "$dev" /scratch || fail "mount $dev on /scratch"
		;;
	esac
done

cd /tmp
sh /run.sh </dev/null >"$out" 2>&1
echo "UNFLUSH-EXIT $?" >"$out"
poweroff -f
