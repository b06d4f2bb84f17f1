"""Boot a lab kernel in QEMU, run one shell command in it, bring back the result.

The guest has two serial ports: ttyS0 is the kernel console (kept whole as
console.log), ttyS1 carries only the command's output and a closing
`UNFLUSH-EXIT <status>` line written by guest/init.sh.  A run fails with a
LabError when

  - the guest never reports an exit status (panic, oops=panic, failed boot),
  - it does not power off within the time-out (a hang),
  - the console shows a kernel splat (WARNING, BUG, lockdep, KASAN, ...):
    a test must not pass over one, so this is checked even when the command
    itself succeeded.

An arm64 kernel (vanilla-arm64, patched-arm64) boots on QEMU's `virt`
machine under TCG (qemu_command_arm64()): its console is the one UART,
ttyAMA0, and the command's output goes to a virtio console, hvc0, read and
judged the same way.
"""

import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab import arches, build, guest_output, initramfs, paths
from lab.errors import LabError
from lab.progress import Progress

SPLAT = re.compile(
    r"(WARNING: |BUG: |BUG kmalloc|Oops|Kernel panic|general protection fault|"
    r"KASAN: |UBSAN: |possible circular locking|possible recursive locking|"
    r"inconsistent lock state|suspicious RCU usage|INFO: task .* blocked|"
    r"rcu: INFO: |soft lockup|hard LOCKUP|page_table_check|Bad page state|"
    r"unflush: stale)")
SIZE = re.compile(r"^\d+[KMG]$")
ARM64_CPU = "max"


@dataclass
class VMShape:
    """What the guest machine looks like; recorded with every result."""
    cpus: int = 2
    mem: str = "2G"
    node1: str | None = None      # size of a CPU-less second NUMA node
    zram: str | None = None       # size of a zram swap device
    append: str = ""              # extra kernel command line
    accel: str = "auto"           # auto | tcg | kvm
    icount: bool = False          # -icount shift=0: guest time = instructions
    data_disk: Path | None = None  # ext2 image, mounted read-only at /data
    nvme: str | None = None       # size of a blank NVMe disk (nvme_args())
    timeout: float = 600.0
    # lab/insnprof.py: DIR/window.N (x86: needs icount; arm64: TLBIs and
    # DSBs in any mode, instructions under icount)
    insn_profile: Path | None = None

    def validate(self):
        if self.cpus < 1 or self.cpus > 64:
            raise LabError(f"--cpus {self.cpus}: choose 1 to 64", exit_code=2)
        for name in ("mem", "node1", "zram", "nvme"):
            value = getattr(self, name)
            if value is not None and not SIZE.match(value):
                raise LabError(f"--{name} {value!r}: give a size like 512M or 2G",
                               exit_code=2)
        if self.accel not in ("auto", "tcg", "kvm"):
            raise LabError(f"--accel {self.accel!r}: choose auto, tcg or kvm",
                           exit_code=2)
        if self.timeout <= 0:
            raise LabError("--timeout must be positive", exit_code=2)
        if self.icount and self.accel == "kvm":
            raise LabError("--icount is a TCG mode: drop --accel kvm", exit_code=2)

    def describe(self):
        return {"cpus": self.cpus, "mem": self.mem, "node1": self.node1,
                "zram": self.zram, "append": self.append, "icount": self.icount,
                **({"nvme": self.nvme} if self.nvme else {})}


@dataclass
class RunResult:
    exit_code: int
    output: str
    console: str
    seconds: float
    logdir: Path
    accel: str
    splats: list = field(default_factory=list)

    def records(self, tag):
        """The `TAG {json}` records the guest programs printed."""
        return guest_output.records(self.output, tag)


def to_mib(size):
    return int(size[:-1]) * {"K": 1 / 1024, "M": 1, "G": 1024}[size[-1]]


def kernel_args(kernel):
    """Command-line options a kernel needs because of how it was built.

    KASAN kernels boot with 4-level paging (no5lvl).  In 6.12 KASAN's idea
    of where shadow memory starts follows pgtable_l5_enabled(), which until
    alternatives are applied reads boot_cpu_data's LA57 bit; identify_cpu()
    zeroes those bits while it runs, and an interrupt that lands then gets
    "BUG: KASAN: wild-memory-access" for any direct-map address (seen at
    boot in 2 of 31 debug guests of a CI run on a loaded host, under QEMU's
    -cpu max, which has LA57).  A false report in vanilla code, and a splat
    fails the run.
    """
    return ["no5lvl"] if built_option(kernel, "CONFIG_KASAN") == "y" else []


def built_option(kernel, name):
    """The value of CONFIG_`name` in the kernel's .config, 'n' if unset."""
    config = Path(kernel.objdir) / ".config"
    if not config.exists():
        return "n"
    return build.wanted_options([config]).get(name, "n")


def check_jump_labels(kernel, shape, accel):
    """Jump labels and multi-threaded TCG do not mix (config/lab.config): a
    vCPU can run the int3 of a static key flipped under it, and the guest
    dies of "Oops: int3".  Under --icount the vCPUs share one thread."""
    if (accel == "tcg" and not shape.icount and shape.cpus > 1
            and built_option(kernel, "CONFIG_JUMP_LABEL") == "y"):
        raise LabError(f"{kernel.variant} is built with jump labels, which QEMU's "
                       f"multi-threaded TCG can break when a static key flips: "
                       f"add --icount, which runs the vCPUs in one thread",
                       exit_code=2)


# Every guest's: scsi_debug, built in for luf-hazards' scsi-passthrough
# (config/lab.config), makes no disk and allocates no store at boot; the
# mode asks for both (guest/lib/scsi.c), the store this large
SCSI_DEBUG_ARGS = ("scsi_debug.add_host=0", "scsi_debug.fake_rw=1",
                   "scsi_debug.dev_size_mb=32")


def check_insn_profile(shape):
    """x86's profile is instructions only, which one host thread counts."""
    if shape.insn_profile and not shape.icount:
        raise LabError("--insn-profile counts instructions of one host thread: "
                       "add --icount", exit_code=2)


def qemu_command(image, initrd, shape, console_log, output_log, accel, extra_args=()):
    cmdline = ["console=ttyS0", "panic=-1", "oops=panic", "loglevel=6",
               "nokaslr", "mitigations=off" if accel == "tcg" else "",
               *SCSI_DEBUG_ARGS, *extra_args]
    if shape.zram:
        cmdline.append(f"unflush.zram={shape.zram}")
    if shape.data_disk:
        cmdline.append("unflush.data=1")
    cmd = [arches.ARCHES[arches.HOST].qemu, "-nodefaults", "-no-user-config", "-no-reboot",
           "-display", "none", "-smp", str(shape.cpus)]
    if accel == "kvm":
        cmd += ["-accel", "kvm", "-cpu", "host"]
    elif shape.icount:
        cmd += ["-accel", "tcg,thread=single", "-icount", "shift=0", "-cpu", "max"]
        if shape.insn_profile:
            from lab import insnprof
            cmd += ["-plugin", f"{insnprof.plugin()},out={shape.insn_profile}/window"]
    else:
        cmd += ["-accel", "tcg,thread=multi", "-cpu", "max"]
    if shape.node1:
        cmd += ["-machine", "pc,hmat=on"]
    cmd += memory_args(shape)
    if shape.data_disk:
        cmd += ["-drive", f"file={shape.data_disk},if=virtio,format=raw,readonly=on"]
    cmd += nvme_args(shape, Path(console_log).parent)
    cmd += ["-kernel", str(image), "-initrd", str(initrd),
            "-append", " ".join(a for a in cmdline + [shape.append] if a),
            "-serial", f"file:{console_log}", "-serial", f"file:{output_log}"]
    return cmd


def nvme_args(shape, logdir):
    """QEMU's NVMe controller with two namespaces of shape.nvme each, for
    the passthrough routes of luf-hazards (NVME_IOCTL_IO_CMD, io_uring): 1
    a plain one, 2 a zoned one (ZNS, NVME_ZONE zones) for zone resets.
    Their blank images are in the run's @logdir, sparse, removed after the
    run (run())."""
    if not shape.nvme:
        return []
    cmd = ["-device", "nvme,serial=unflush0,id=nvme0"]
    for nsid, (image, zoned) in enumerate(((NVME_IMAGE, ""),
                                           (NVME_ZONED_IMAGE, NVME_ZONED)), 1):
        path = Path(logdir) / image
        with open(path, "wb") as f:
            f.truncate(int(to_mib(shape.nvme)) << 20)
        cmd += ["-drive", f"file={path},if=none,id=nvme0n{nsid},format=raw",
                "-device", f"nvme-ns,drive=nvme0n{nsid},bus=nvme0,nsid={nsid}{zoned}"]
    return cmd


# a zone: 64 KiB, so that a trial's reset and rewrite of one stays small
NVME_ZONED = ",zoned=true,zoned.zone_size=64K"
NVME_IMAGE = "nvme.img"
NVME_ZONED_IMAGE = "nvme-zoned.img"


def memory_args(shape):
    """-m, and with shape.node1 a CPU-less node 1 that the ACPI HMAT says is
    far slower than node 0: the guest puts it in a lower memory tier, which
    gives reclaim a demotion target (lab-notes.md).  The machine must have
    hmat=on."""
    mem0 = to_mib(shape.mem)
    if not shape.node1:
        return ["-m", f"{int(mem0)}M"]
    mem1 = to_mib(shape.node1)
    args = ["-m", f"{int(mem0 + mem1)}M",
            "-object", f"memory-backend-ram,id=m0,size={int(mem0)}M",
            "-object", f"memory-backend-ram,id=m1,size={int(mem1)}M",
            "-numa", f"node,nodeid=0,cpus=0-{shape.cpus - 1},memdev=m0",
            "-numa", "node,nodeid=1,memdev=m1,initiator=0"]
    for node, lat, bw in ((0, 10, "10G"), (1, 200, "1G")):
        base = f"hmat-lb,initiator=0,target={node},hierarchy=memory"
        args += ["-numa", f"{base},data-type=access-latency,latency={lat}",
                 "-numa", f"{base},data-type=access-bandwidth,bandwidth={bw}"]
    return args


# arm64's UEFI firmware (Debian's qemu-efi-aarch64): code and a template of
# the variable store, each a 64 MiB flash image
AAVMF = Path(os.environ.get("UNFLUSH_AAVMF", "/usr/share/AAVMF"))


def check_arm64_shape(shape, accel):
    """What an arm64 guest cannot have, each said in one line."""
    if accel == "kvm":
        raise LabError("arm64: no KVM for another architecture than the host's: "
                       "drop --accel kvm (arm64 guests run under TCG)", exit_code=2)
    if shape.node1 and not (AAVMF / "AAVMF_CODE.fd").is_file():
        raise LabError(f"arm64: --node1 boots through UEFI and {AAVMF}/AAVMF_CODE.fd "
                       f"is missing: run `make setup` (installs qemu-efi-aarch64)",
                       exit_code=2)


def kpti(kernel):
    """Whether an arm64 kernel booted by the lab unmaps itself from user
    space (KPTI), which doubles every user TLBI, and why."""
    if built_option(kernel, "CONFIG_UNMAP_KERNEL_AT_EL0") != "y":
        return "off (built without CONFIG_UNMAP_KERNEL_AT_EL0)"
    return "off (mitigations=off)"


def qemu_command_arm64(image, initrd, shape, console_log, output_log, accel,
                       extra_args=()):
    """QEMU's `virt` machine with a GICv3 (GICv2 stops at 8 CPUs), booted from
    a device tree (through UEFI, with ACPI, when it has a node 1); the
    command's output on a virtio console (unflush.out=hvc0: `virt` has one
    UART, the kernel console).  No nokaslr: the arm64 kernels
    are built without KASLR, and would hand the word to /init."""
    cmdline = ["console=ttyAMA0", "panic=-1", "oops=panic", "loglevel=6",
               "mitigations=off", "unflush.out=hvc0", *SCSI_DEBUG_ARGS,
               *extra_args]
    if shape.zram:
        cmdline.append(f"unflush.zram={shape.zram}")
    if shape.data_disk:
        cmdline.append("unflush.data=1")
    machine = "virt,gic-version=3"
    if shape.node1:
        # SRAT and HMAT come with ACPI, which arm64 takes only from UEFI:
        # edk2 boots the -kernel image through its EFI stub.  Writes to the
        # variable store go to a throw-away overlay (snapshot=on).  Every
        # arm64 kernel of the lab has patches/arm64-lab/, without which 6.12
        # would ignore the SRAT on this machine.
        machine += ",hmat=on"
    cmd = [arches.ARCHES["arm64"].qemu, "-nodefaults", "-no-user-config", "-no-reboot",
           "-display", "none", "-machine", machine, "-smp", str(shape.cpus)]
    if shape.node1:
        cmd += ["-drive", f"if=pflash,format=raw,readonly=on,file={AAVMF}/AAVMF_CODE.fd",
                "-drive", f"if=pflash,format=raw,snapshot=on,file={AAVMF}/AAVMF_VARS.fd"]
    if shape.icount:
        cmd += ["-accel", "tcg,thread=single", "-icount", "shift=0"]
    else:
        cmd += ["-accel", "tcg,thread=multi"]
    # the CPU model decides which TLBIs the kernel can use: max has the
    # range TLBIs (FEAT_TLBIRANGE) that ARM64_TLB_RANGE needs
    cmd += ["-cpu", ARM64_CPU]
    if shape.insn_profile:
        # TLBIs and DSBs in either mode; instructions only in one host thread
        from lab import insnprof
        cmd += ["-plugin", f"{insnprof.plugin()},out={shape.insn_profile}/window,"
                "arch=arm64" + ("" if shape.icount else ",insns=0")]
    cmd += memory_args(shape)
    if shape.data_disk:
        cmd += ["-drive", f"file={shape.data_disk},if=virtio,format=raw,readonly=on"]
    cmd += nvme_args(shape, Path(console_log).parent)
    cmd += ["-kernel", str(image), "-initrd", str(initrd),
            "-append", " ".join(a for a in cmdline + [shape.append] if a),
            "-serial", f"file:{console_log}",
            "-chardev", f"file,id=out,path={output_log}",
            "-device", "virtio-serial-pci", "-device", "virtconsole,chardev=out"]
    return cmd


# The first faulting instruction of an oops: with it a one-line error says
# where the kernel died even when the console log is gone (a CI machine).
RIP = re.compile(r"^\[[ \d.]+\] RIP: \S+:(\S+)", re.M)


def find_splats(console):
    lines = console.splitlines()
    return [ln.strip() for ln in lines if SPLAT.search(ln)]


def choose_accel(kernel, shape):
    if kernel.arch != arches.HOST:     # no KVM for another architecture
        return "kvm" if shape.accel == "kvm" else "tcg"
    if shape.accel != "auto":
        return shape.accel
    if shape.icount:            # an emulator's instruction count: TCG only
        return "tcg"
    return "kvm" if kvm_works(kernel) else "tcg"


def kvm_works(kernel):
    """Does this host's KVM run a stock kernel?  Decided by booting one.

    A /dev/kvm that answers the KVM API is not enough: on the project's
    machines it is a PVM hypervisor that kills a stock kernel during boot.
    The answer is cached per kernel release and QEMU version.
    """
    if not Path("/dev/kvm").exists():
        return False
    qemu = subprocess.run([arches.ARCHES[arches.HOST].qemu, "--version"], capture_output=True,
                          text=True).stdout.split("\n")[0]
    cache = paths.work_dir() / "kvm-probe.json"
    key = f"{kernel.release} {qemu}"
    try:
        known = json.loads(cache.read_text())
    except (FileNotFoundError, ValueError):
        known = {}
    if key not in known:
        probe = VMShape(cpus=1, mem="512M", accel="kvm", timeout=60)
        try:
            result = run(kernel, "echo probe", probe, quiet=True)
            known[key] = result.exit_code == 0 and "probe" in result.output
        except LabError:
            known[key] = False
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(known))
    return known[key]


def new_logdir(kernel):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = paths.work_dir() / "runs" / f"{stamp}-{kernel.variant}"
    logdir, n = base, 1
    while logdir.exists():
        n += 1
        logdir = Path(f"{base}-{n}")
    logdir.mkdir(parents=True)
    return logdir


def run(kernel, command, shape=None, logdir=None, quiet=False, allow_splats=False,
        dry_run=False, layers=()):
    """Boot `kernel`, run `command` (a shell string) in it, return RunResult.
    `layers`: extra initramfs archives unpacked before the command runs."""
    shape = shape or VMShape()
    shape.validate()
    if shape.data_disk and not Path(shape.data_disk).is_file():
        raise LabError(f"data disk {shape.data_disk} not found")
    accel = choose_accel(kernel, shape)
    host = kernel.arch == arches.HOST
    if host:
        check_insn_profile(shape)
    else:
        check_arm64_shape(shape, accel)
    check_jump_labels(kernel, shape, accel)
    logdir = Path(logdir) if logdir else new_logdir(kernel)
    logdir.mkdir(parents=True, exist_ok=True)
    console_log, output_log = logdir / "console.log", logdir / "output.log"
    if host:
        initrd = initramfs.run_image(command, logdir / "initrd.cpio.gz", layers)
        cmd = qemu_command(kernel.image, initrd, shape, console_log, output_log, accel,
                           kernel_args(kernel))
    else:
        initrd = initramfs.run_image(command, logdir / "initrd.cpio.gz", layers,
                                     arch=kernel.arch)
        cmd = qemu_command_arm64(kernel.image, initrd, shape, console_log, output_log,
                                 accel, kernel_args(kernel))
    (logdir / "qemu.cmd").write_text(shlex.join(cmd) + "\n")
    if dry_run:
        print(shlex.join(cmd))
        return None
    for f in (console_log, output_log):
        f.write_text("")
    prog = None if quiet else Progress(f"guest {kernel.variant}", interval=60)
    how = f"{accel}, icount" if accel == "tcg" and shape.icount else accel
    start = time.monotonic()
    qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    timed_out = False
    while qemu.poll() is None:
        if time.monotonic() - start > shape.timeout:
            timed_out = True
            qemu.kill()
            qemu.wait()
            break
        if prog:
            prog.update(f"running ({how}) {_last_line(output_log, PROGRESS_SKIP)}")
        time.sleep(0.2)
    seconds = time.monotonic() - start
    qemu_out = qemu.stdout.read() if qemu.stdout else ""
    for image in (NVME_IMAGE, NVME_ZONED_IMAGE):
        (logdir / image).unlink(missing_ok=True)
    console = console_log.read_text(errors="replace")
    output = output_log.read_text(errors="replace").replace("\r\n", "\n")
    (logdir / "qemu.out").write_text(qemu_out)
    splats = find_splats(console)
    where = f"(console log: {console_log})"
    if timed_out:
        raise LabError(f"guest {kernel.variant} timed out after {shape.timeout:.0f} s "
                       f"and was killed; last console line: "
                       f"{_last_line(console_log)!r} {where}")
    setup = guest_output.SETUP_FAILED.search(output)
    if setup:
        raise LabError(f"guest {kernel.variant} set-up failed: {setup.group(1)} {where}")
    status = guest_output.EXIT.search(output)
    if status is None:
        why = next((s for s in splats if "panic" in s or "Oops" in s),
                   splats[0] if splats else None)
        if why is None and qemu.returncode != 0:
            why = f"QEMU exited with {qemu.returncode}: {qemu_out.strip()[-200:]}"
        rip = RIP.search(console)
        at = f" at {rip.group(1)}" if rip else ""
        raise LabError(f"guest {kernel.variant} died before the command finished: "
                       f"{why or _last_line(console_log)!r}{at} {where}")
    if splats and not allow_splats:
        raise LabError(f"guest {kernel.variant}: kernel splat in the console: "
                       f"{splats[0]!r} {where}")
    if prog:
        prog.done(f"exit {status.group(1)} ({how})")
    output = guest_output.EXIT.sub("", output).rstrip("\n") + "\n" if output.strip() else ""
    return RunResult(int(status.group(1)), output, console, seconds, logdir, accel,
                     splats)


# machine-read lines that say nothing to a person watching the progress
PROGRESS_SKIP = (guest_output.WINDOW + " ", guest_output.RESULT + " ")


def _last_line(path, skip=()):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 400))
            tail = f.read().decode(errors="replace").replace("\r", "")
    except FileNotFoundError:
        return ""
    # a rule (run_vmtests.sh draws one under each program's name) says nothing
    lines = [ln for ln in tail.split("\n")
             if ln.strip("#-= \t") and not ln.startswith(skip)]
    return lines[-1][:100] if lines else ""
