# SPDX-License-Identifier: GPL-2.0
# The stress guest's disk phase: stress-ng and every library of the
# image copied to $disk_dir on /scratch (ext2), and a wrapper that has the
# loader find them there (LD_LIBRARY_PATH, inherited by the exec
# stressor's children), so that their pages are page cache of a disk
# filesystem.  Dropped from the cache afterwards: faulted in again inside
# the phase, they are charged to its cgroup and reclaimed there.
if grep -q " /scratch ext2 " /proc/mounts && mkdir -p "$disk_dir/lib" &&
	cp /safety/bin/stress-ng "$disk_dir/" &&
	cp -L /lib/x86_64-linux-gnu/*.so* "$disk_dir/lib/" &&
	{ echo '#!/bin/sh'
		echo "LD_LIBRARY_PATH=$disk_dir/lib exec $disk_dir/stress-ng \"\$@\""
	} >"$disk_dir/run" && chmod +x "$disk_dir/run" && sync; then
	echo 3 >/proc/sys/vm/drop_caches
else
	echo "SAFETY-ERROR cannot copy stress-ng to /scratch: the disk phase would not run from a disk"
fi
