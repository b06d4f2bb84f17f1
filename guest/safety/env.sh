# SPDX-License-Identifier: GPL-2.0
# Mounts and knobs both safety guests want, and what the guest has
# (SAFETY-ENV).  Sourced first by the selftest and the stress script.
mount -t debugfs none /sys/kernel/debug 2>/dev/null
T=/sys/kernel/mm/transparent_hugepage
echo "SAFETY-ENV nodes=$(cat /sys/devices/system/node/has_memory) \
swap=$(awk 'NR>1{print $1}' /proc/swaps | tr '\n' ' ')\
mthp=$(ls -d $T/hugepages-* 2>/dev/null | wc -l) \
hugetlb=$(ls /sys/kernel/mm/hugepages | tr '\n' ' ')"
