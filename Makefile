# unflush: the two commands a newcomer needs are `make bench` and `make test`.
# Everything else is a step of those, exposed for development.

PYTHON ?= python3
LAB = $(PYTHON) -m lab
BENCH_ARGS ?=
TEST_ARGS ?=

.PHONY: bench test test-x86 idle-debug idle-builds test-arm64 deb setup tree build export guest clean

# Build vanilla and patched kernels, boot both, run every experiment, report.
# BENCH_ARCH=arm64: the same for vanilla-arm64 and patched-arm64, on QEMU's
# virt machine, every experiment arm64 has; a run of its own, as long as
# the x86 one, so that each report compares one architecture's pair.
BENCH_ARCH ?= x86-64
COMMA = ,
ifeq ($(BENCH_ARCH),arm64)
BENCH_PAIR = vanilla-arm64,patched-arm64
else ifeq ($(BENCH_ARCH),x86-64)
BENCH_PAIR = vanilla,patched
else
$(error BENCH_ARCH=$(BENCH_ARCH): choose x86-64 (the default) or arm64)
endif
bench: setup
	$(LAB) build $(subst $(COMMA), ,$(BENCH_PAIR))
	$(LAB) bench --no-build -k $(BENCH_PAIR) $(BENCH_ARGS)

# First the fast layer (tests/conftest.py): the lab's host logic, no kernel
# source, no build, no VM, in seconds, so that a broken lab fails before
# the builds; it always runs whole (TEST_ARGS are for the rest).  Then the
# kernels, and every other test: those that configure or check the kernel
# source, and those that boot each kernel.  `broken` is the series plus
# patches/testing/: a kernel that skips a flush on purpose, so the safety
# tests are seen to fail where they must; `debug` has the LUF checker, whose
# switches let the LUF tests break one rule at a time, and the KUnit test of
# LUF's generations.  The slowest tests' times end the log (CI's budget).
# The debug kernel builds beside the other tests, at idle priority
# (SCHED_IDLE): a TCG guest leaves a core idle much of the time, and a cold
# build of it in its own slot would not fit CI's 90 minutes; the tests
# that boot it run last (tests/conftest.py) and wait for its build.
#
# Then arm64's quick form.  Its two kernels build the same way, after
# llama.cpp for the smoke test (README.md, "arm64").
test: setup
	$(PYTHON) -m pytest -ra -m fast tests
	$(LAB) build vanilla patched broken
	$(LAB) tree --arm64
	$(MAKE) -j3 --no-print-directory test-x86 idle-debug idle-builds
	$(PYTHON) -m pytest -ra --arm64 $(TEST_ARGS) $(ARM64_QUICK)

test-x86:
	$(PYTHON) -m pytest -ra --durations=25 -m 'not fast' $(TEST_ARGS) tests

# What builds at idle priority beside the x86 tests, each chain's output to
# a log, not between the tests' lines, and its tail on failure: the debug
# kernel, whose build lock it takes at once (build.built() waits on it);
# and first llama.cpp, which the smoke test's llama-tiering needs (it waits
# for this build if it gets there first), then arm64's two kernels.
IDLE = chrt --idle 0
idle_failed = { tail -n 20 $(1); echo "building at idle priority failed: $(1)"; exit 1; }
idle-debug:
	$(IDLE) $(LAB) build debug >build/idle-debug.log 2>&1 || \
		$(call idle_failed,build/idle-debug.log)
idle-builds:
	{ $(IDLE) $(PYTHON) -m lab.llama && \
	  $(IDLE) $(LAB) build patched-arm64 broken-arm64; } >build/idle-builds.log 2>&1 || \
		$(call idle_failed,build/idle-builds.log)

# arm64's quick form: patched-arm64 boots, its switches and counters move,
# it migrates to a node 1 in a lower tier (UEFI), passes every LUF hazard
# mode and the series' stale-translation selftest, which broken-arm64
# fails, passes its selftest of LUF's rules, and puts a failed swap-out
# batch of a contpte block back and leaks no swap count of folios shared
# past its limit, which broken-arm64 does not.
ARM64_ANON_UNMAP = \
	"tests/test_anon_unmap.py::test_pages_keep_their_state_with_the_switch_on_and_off[patched-arm64]" \
	"tests/test_anon_unmap.py::test_switch_moves_swap_out_between_the_paths[patched-arm64]" \
	tests/test_anon_unmap.py::test_the_series_selftest_passes_on_patched_arm64 \
	"tests/test_anon_unmap.py::test_the_series_selftest_catches_the_broken_kernel[broken-arm64]"
ARM64_QUICK = $(ARM64_ANON_UNMAP) \
	"tests/test_arm64.py::test_arm64_guest_runs_and_reports[patched-arm64]" \
	"tests/test_arm64.py::test_arm64_node1_is_a_lower_tier_and_pages_migrate_to_it[patched-arm64]" \
	tests/test_arm64_luf.py::test_every_mode_passes_on_arm64_with_lazy_trials \
	tests/test_arm64_luf.py::test_the_series_selftest_passes_on_patched_arm64 \
	tests/test_arm64_luf.py::test_the_series_selftest_catches_broken_arm64 \
	tests/test_arm64_luf.py::test_the_series_luf_selftest_passes_on_patched_arm64

# Every arm64 test: the four arm64 kernels (vanilla's and the debug
# kernel's too), then both files whole, the swap-out batch's and the KUnit
# test on debug-arm64.
test-arm64: setup
	$(LAB) build vanilla-arm64 patched-arm64 debug-arm64 broken-arm64
	$(PYTHON) -m pytest -ra --arm64 $(TEST_ARGS) tests/test_arm64.py tests/test_arm64_luf.py \
		$(ARM64_ANON_UNMAP) \
		"tests/test_luf_kunit.py::test_luf_generations_kunit_passes_on_debug_kernel[debug-arm64]"

# Debian packages (linux-image-...) of the series' kernel, into build/deb/.
# DEB_CONFIG=lab: the patched kernel's config, a re-link of its build, what
# tests/test_package.py boots; DEB_CONFIG=debian: Debian's own amd64 config
# plus the series', to install on a Debian 12 machine (hours on 2 cores).
# DEB_ARCH=arm64: the lab config of patched-arm64, cross-built.
DEB_CONFIG ?= lab
DEB_ARCH ?= amd64
deb: setup
	$(LAB) package --config $(DEB_CONFIG) --arch $(DEB_ARCH)

setup:
	$(LAB) setup

tree: setup
	$(LAB) tree

build: setup
	$(LAB) build vanilla patched

# Write the commits of build/patched back to patches/.
export:
	$(LAB) export

guest:
	$(MAKE) -C guest O=$(CURDIR)/build/guest

clean:
	rm -rf build/guest build/initramfs build/guest-arm64 build/initramfs-arm64 build/runs
