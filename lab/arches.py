"""The architectures the lab builds for and boots, and what differs on each.

The host's is x86-64; arm64 is cross-built on it and boots on QEMU's `virt`
machine (lab/vm.py).  Everything the lab does differently for an
architecture is a field here: how its kernel and its guest programs and
llama.cpp are compiled, the image its kernel build makes, the QEMU that
boots it, its name in Debian's packages, and what of the series and of the
lab's tests it does not have.  A module that needs one of these asks
ARCHES[name] for it instead of keeping its own table.
"""

import os
from dataclasses import dataclass, field

HOST = "x86-64"


@dataclass(frozen=True)
class Arch:
    name: str                   # the lab's: x86-64, arm64
    debian: str                 # Debian's: amd64, arm64 (packages)
    make_args: tuple            # make's variables for a kernel built here
    compiler: str               # the C compiler of its kernel and programs
    package: str                # the Debian package that has the compiler
    image: str                  # what make builds and boots, in its build dir
    guest_make_args: tuple      # guest/Makefile's variables
    suffix: str                 # of its guest programs' and archive's folders
    llama_compilers: tuple      # what llama.cpp's cmake build needs
    llama_options: tuple        # llama.cpp's cmake options for it
    qemu: str                   # the QEMU that boots it
    # the series' switches it has not (/sys/kernel/mm/tlb_batching/)
    missing_switches: tuple = ()
    # bench experiment groups it cannot run, and why
    refused_groups: dict = field(default_factory=dict)
    # guest/luf-hazards modes it cannot run, and why
    refused_luf_modes: dict = field(default_factory=dict)
    # the safety suite's parts it runs (None: all)
    safety_parts: tuple | None = None

    @property
    def cross(self):
        """Built here with a cross compiler (not the host's architecture)."""
        return self.name != HOST


ARCHES = {
    HOST: Arch(
        name=HOST, debian="amd64", make_args=(), compiler="gcc", package="gcc",
        image="arch/x86/boot/bzImage", guest_make_args=(), suffix="",
        llama_compilers=("g++",),
        # a generic CPU (SSE4.2)
        llama_options=("-DGGML_AVX=OFF", "-DGGML_AVX2=OFF", "-DGGML_FMA=OFF",
                       "-DGGML_F16C=OFF", "-DGGML_BMI2=OFF", "-DGGML_AVX512=OFF"),
        qemu=os.environ.get("UNFLUSH_QEMU", "qemu-system-x86_64")),
    "arm64": Arch(
        name="arm64", debian="arm64",
        make_args=("ARCH=arm64", "CROSS_COMPILE=aarch64-linux-gnu-"),
        compiler="aarch64-linux-gnu-gcc", package="gcc-aarch64-linux-gnu",
        image="arch/arm64/boot/Image",
        guest_make_args=("CC=aarch64-linux-gnu-gcc",), suffix="-arm64",
        llama_compilers=("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"),
        # a cross build for ARMv8-A
        llama_options=("-DCMAKE_SYSTEM_NAME=Linux", "-DCMAKE_SYSTEM_PROCESSOR=aarch64",
                       "-DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc",
                       "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++",
                       "-DGGML_CPU_ARM_ARCH=armv8-a"),
        qemu=os.environ.get("UNFLUSH_QEMU_ARM64", "qemu-system-aarch64"),
        # 6.12 has no hugetlb vmemmap optimisation (HVO) on arm64
        missing_switches=("hvo_flush",),
        refused_groups={"hugetlb": "arm64 6.12 has no hugetlb vmemmap optimisation (HVO)"},
        refused_luf_modes={
            # its pages are exclusive; only clearing their soft-dirty bits
            # makes the swap-in map them read-only, and arm64 has no
            # soft-dirty bit
            "anon-move": "needs CONFIG_MEM_SOFT_DIRTY, which arm64 does not have",
        },
        # the mm selftests; stress-ng and the rest are x86's
        safety_parts=("selftests",)),
}


def by_debian(name):
    """The architecture Debian calls @name (amd64, arm64)."""
    return next(a for a in ARCHES.values() if a.debian == name)
