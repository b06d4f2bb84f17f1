# SPDX-License-Identifier: GPL-2.0
# The stress guest (lab/safety.py): THP on everywhere, demotion, NUMA
# balancing and swappiness up, a memory cgroup per phase; run_phase runs
# one stress-ng phase between its markers, with /proc/vmstat before and
# after and its --yaml metrics.
echo always >$T/enabled
echo always >$T/shmem_enabled
for size in 16 64 2048; do echo always >$T/hugepages-${size}kB/enabled; done
echo 1 >/sys/kernel/mm/numa/demotion_enabled
echo 2 >/proc/sys/kernel/numa_balancing
echo 100 >/proc/sys/vm/swappiness
echo +memory >/sys/fs/cgroup/cgroup.subtree_control
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm
export PATH=/safety/bin:$PATH
mkdir -p /tmp/stress && cd /tmp/stress
run_phase() {   # name max=SIZE|high=SIZE|- program arguments...
	name=$1 limit=$2 prog=$3
	shift 3
	join=true
	if [ "$limit" != - ]; then
		mkdir -p /sys/fs/cgroup/$name
		echo "${limit#*=}" >/sys/fs/cgroup/$name/memory.${limit%%=*}
		join="echo \$\$ >/sys/fs/cgroup/$name/cgroup.procs"
	fi
	sed "s/^/SAFETY-VMSTAT $name before /" /proc/vmstat
	echo "SAFETY-STRESS-BEGIN $name $(date +%s)"
	sh -c "$join && exec $prog --verify --metrics-brief --yaml /tmp/$name.yaml $*"
	rc=$?
	echo "SAFETY-STRESS-END $name $rc $(date +%s)"
	sed "s/^/SAFETY-VMSTAT $name after /" /proc/vmstat
	echo "SAFETY-YAML-BEGIN $name"
	cat /tmp/$name.yaml 2>/dev/null
	echo "SAFETY-YAML-END $name"
}
