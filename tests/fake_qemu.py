#!/usr/bin/env python3
"""Stands in for qemu-system-x86_64 (and qemu-system-aarch64) in the runner's
tests.

Writes a canned kernel console (first -serial) and command output (second
-serial, or arm64's virtio console) chosen by FAKE_QEMU_MODE: ok, splat,
panic, oops, hang, setup-failed.
"""

import os
import sys
import time

args = sys.argv[1:]
serials = [args[i + 1][len("file:"):] for i, a in enumerate(args) if a == "-serial"]
# an arm64 guest's output goes to a virtio console: -chardev file,id=out,path=F
serials += [args[i + 1].split("path=", 1)[1] for i, a in enumerate(args)
            if a == "-chardev" and args[i + 1].startswith("file,id=out,")]
console, output = serials
mode = os.environ.get("FAKE_QEMU_MODE", "ok")
boot = "[    0.000000] Linux version 6.12.117 (fake)\n[    0.5] Run /init as init process\n"
with open(console, "w") as c, open(output, "w") as o:
    c.write(boot)
    if mode == "ok":
        o.write("hello\r\nUNFLUSH-EXIT 3\r\n")
    elif mode == "splat":
        c.write("[    1.0] WARNING: CPU: 1 PID: 42 at mm/rmap.c:100 try_to_unmap_one+0x1/0x2\n")
        o.write("fine\r\nUNFLUSH-EXIT 0\r\n")
    elif mode == "panic":
        c.write("[    1.0] Kernel panic - not syncing: Attempted to kill init!\n")
    elif mode == "oops":
        c.write("[    9.013349] Oops: int3: 0000 [#1] SMP\n"
                "[    9.013774] RIP: 0010:can_migrate_task+0xfd/0x4c0\n"
                "[    9.025156] RIP: 0010:can_migrate_task+0xfd/0x4c0\n"
                "[    9.026000] Kernel panic - not syncing: Fatal exception in interrupt\n")
    elif mode == "setup-failed":
        o.write("UNFLUSH-SETUP-FAILED swapon /dev/zram0\r\n")
    elif mode == "hang":
        c.flush()
        time.sleep(3600)
