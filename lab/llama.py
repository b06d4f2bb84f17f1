"""llama.cpp and its model files for seed 001's own workload (llama-tiering).

llama.cpp comes from PyPI: the source distribution of llama-cpp-python
carries it under vendor/llama.cpp.  The lab builds one program of it,
llama-simple (greedy sampling, fixed prompt and token count, mmap on),
static and for any x86-64 with SSE4.2 (GGML_NATIVE off: the guest CPU is
emulated), without GPU backends, OpenMP, curl or OpenSSL, so it runs in the
busybox guest and on any host.  For the arm64 guest it is cross-built
with Debian's aarch64 toolchain, for any ARMv8-A CPU.  Each build is
cached by version and architecture under the lab's cache directory, and
made afresh when it is not there.

The models are real GGUF files of the llama architecture, written with the
`gguf` package from PyPI: pseudo-random f32 weights from a fixed seed (no
weights can be downloaded here; what matters is the access pattern of
inference over mmapped weights, not the text) and a small SentencePiece
vocabulary with byte fallback, so any prompt tokenizes.  The rows of the
output layer for the special tokens are zero, so greedy sampling never picks
end-of-text and every run generates all the tokens asked for.

Both go on a data disk of their own (an ext2 image, read-only at /data in
the guest): the models' page cache is clean, so reclaim drops or demotes it
without writing, as for seed 001's model files.  The binary goes there too,
not into the initramfs, whose files would sit in unreclaimable memory of
every boot of every group.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from lab import arches, datadisk, paths
from lab.build import build_lock
from lab.errors import LabError
from lab.progress import Progress

VERSION = "0.3.36"        # llama-cpp-python, whose sdist carries llama.cpp
GGUF_VERSION = "0.19.0"
PROGRAM = "llama-simple"
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_STATIC=ON",
    # GGML_STATIC links ggml's own programs statically, not the examples
    "-DCMAKE_EXE_LINKER_FLAGS=-static",
    # not this host's CPU, whatever the guest's architecture
    "-DGGML_NATIVE=OFF",
    # ggml's own thread pool: a static libgomp is one more thing to go wrong
    "-DGGML_OPENMP=OFF", "-DGGML_CCACHE=OFF",
    "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF",
    # examples/ (llama-simple) is only configured with common/; only the
    # one target is built
    "-DLLAMA_BUILD_COMMON=ON", "-DLLAMA_BUILD_EXAMPLES=ON",
]

MODELS = 3
# (embedding, feed-forward, layers): f32 weights, so each token reads every
# byte of the file and computes one multiply-add per 4 bytes.  ~100 MiB and
# ~39 MiB a model: under TCG, with llama-simple's fixed 4 threads a process
# on 4 vCPUs beside two more such processes, the quick form took 311 s of
# guest time for 4 tokens each (44 s a token), so a few hundred MiB and 20
# tokens would not end within a group's hour
SHAPES = {False: (1024, 2816, 2), True: (512, 1408, 3)}   # full, quick
HEAD_DIM = 128
WORDS = 256               # vocabulary beside the 3 special and 256 byte tokens


def _arch_suffix(arch):
    """What names @arch's builds and disks: nothing for x86-64, whose
    names came first, else -<arch>."""
    return "" if arch == "x86-64" else f"-{arch}"


def binary(arch="x86-64"):
    return paths.cache_dir() / f"llama.cpp-{VERSION}{_arch_suffix(arch)}" / PROGRAM


def _run(cmd, what, log, **kw):
    with open(log, "a") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, **kw)
    if proc.returncode != 0:
        tail = (Path(log).read_text().strip().splitlines() or ["(no output)"])[-1]
        raise LabError(f"{what} failed ({tail}); the whole log is {log}")


def build(arch="x86-64"):
    """The static llama-simple for @arch, built once per version (`nice -n
    10`).  A second build waits for the first: `make test` starts one at
    idle priority beside the tests, one of which needs it."""
    dest = binary(arch)
    if dest.is_file():
        return dest
    with build_lock(f"llama.cpp-{arch}"):
        return dest if dest.is_file() else _build(arch, dest)


def _build(arch, dest):
    compilers = arches.ARCHES[arch].llama_compilers
    arch_options = list(arches.ARCHES[arch].llama_options)
    for tool in ("cmake", *compilers):
        if not shutil.which(tool):
            raise LabError(f"{tool} is missing: run `make setup`")
    dest.parent.mkdir(parents=True, exist_ok=True)
    log = dest.parent / "build.log"
    log.write_text("")
    prog = Progress(f"llama.cpp {VERSION} ({arch})")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        prog.update("downloading llama-cpp-python's source from PyPI", force=True)
        _run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
              "--no-deps", "-d", tmp, f"llama-cpp-python=={VERSION}"],
             "pip download llama-cpp-python", log)
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp) / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
        out = Path(tmp) / "build"
        prog.update("configuring", force=True)
        _run(["nice", "-n", "10", "cmake", "-S", str(src), "-B", str(out), *CMAKE_OPTIONS,
              *arch_options],
             "cmake (configure llama.cpp)", log)
        cmd = ["nice", "-n", "10", "cmake", "--build", str(out), "--target", PROGRAM,
               "-j", str(os.cpu_count() or 1)]
        with open(log, "a") as f, subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT, text=True) as p:
            for line in p.stdout:
                f.write(line)
                if line.startswith("["):
                    prog.update(f"building {line.split(']')[0].strip('[ ')}")
        if p.returncode != 0:
            raise LabError(f"building {PROGRAM} failed; the log is {log}")
        tmp_bin = dest.with_name(f"{PROGRAM}.{os.getpid()}.tmp")
        shutil.copy2(out / "bin" / PROGRAM, tmp_bin)
        tmp_bin.rename(dest)
    prog.done(str(dest))
    return dest


def gguf_dir():
    """Where `make setup` puts the gguf package (pip --target: Debian's own
    python3 refuses plain pip installs, and Debian has no gguf package)."""
    return paths.cache_dir() / "pypi" / f"gguf-{GGUF_VERSION}"


def _gguf():
    if str(gguf_dir()) not in sys.path and gguf_dir().is_dir():
        sys.path.insert(0, str(gguf_dir()))
    try:
        import gguf
    except ImportError:
        raise LabError("the gguf package is missing: run `make setup`") from None
    return gguf


def write_model(path, shape, seed):
    """One GGUF file of the llama architecture, weights from @seed."""
    gguf = _gguf()
    import numpy as np
    d, ff, layers = shape
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(d // HEAD_DIM)
    w.add_head_count_kv(d // HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    # SentencePiece: unknown, begin, end; 256 byte tokens; WORDS words
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["\u2581" + chr(97 + i % 26) + chr(97 + i // 26 % 26) for i in range(WORDS)]
    T = gguf.TokenType
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(WORDS)])
    w.add_token_types([T.UNKNOWN, T.CONTROL, T.CONTROL] + [T.BYTE] * 256 + [T.NORMAL] * WORDS)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def weights(*rows_cols):
        return rng.standard_normal(rows_cols, dtype=np.float32) * np.float32(0.02)

    ones = np.ones(d, dtype=np.float32)
    w.add_tensor("token_embd.weight", weights(len(tokens), d))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(d, d))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weights(ff, d))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weights(ff, d))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weights(d, ff))
    w.add_tensor("output_norm.weight", ones)
    output = weights(len(tokens), d)
    output[:3] = 0      # never <unk>, <s> or </s>: a fixed token count
    w.add_tensor("output.weight", output)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model_names():
    return [f"model{i}.gguf" for i in range(MODELS)]


def write_models(folder, quick):
    for i, name in enumerate(model_names()):
        write_model(Path(folder) / name, SHAPES[quick], seed=i)


def data_disk(quick, arch="x86-64"):
    """The ext2 image with @arch's llama-simple and the models, made once
    per size and architecture."""
    llama = build(arch)
    d, ff, layers = SHAPES[quick]

    def populate(folder):
        shutil.copy2(llama, Path(folder) / PROGRAM)
        write_models(folder, quick)

    return datadisk.image(f"llama-{VERSION}{_arch_suffix(arch)}-{MODELS}x{d}d{ff}f{layers}l",
                          populate,
                          what=f"{PROGRAM} and {MODELS} GGUF models")


if __name__ == "__main__":
    # `python3 -m lab.llama [ARCH]`: only the build, for `make test`
    if sys.argv[2:] or sys.argv[1:2] and sys.argv[1] not in arches.ARCHES:
        print(f"usage: python3 -m lab.llama [{'|'.join(arches.ARCHES)}]", file=sys.stderr)
        sys.exit(2)
    try:
        build(*sys.argv[1:2])
    except LabError as e:
        sys.exit(f"llama.cpp: {e}")
