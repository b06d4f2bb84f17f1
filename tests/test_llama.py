"""llama-tiering's pieces that need no VM: the GGUF models the lab writes,
its place in the suite, and --host's refusals of missing models or binary."""

import hashlib

import numpy as np
import pytest

from lab import bench, host, llama, suite
from lab.errors import LabError
from tests.test_host_bench import bench_args

TINY = (128, 256, 2)     # embedding, feed-forward, layers: one head


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_models_are_llama_gguf_files_that_never_predict_a_special_token(tmp_path):
    path = tmp_path / "m.gguf"
    llama.write_model(path, TINY, seed=0)
    gguf = llama._gguf()
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.block_count"].contents() == 2
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and "<0x41>" in tokens
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 9 * TINY[2]
    assert tensors["blk.1.ffn_down.weight"].data.shape == (TINY[0], TINY[1])
    output = np.asarray(tensors["output.weight"].data)
    assert output.shape == (len(tokens), TINY[0])
    # end of text can never win greedy sampling: every run makes -n tokens
    assert not output[:3].any() and output[3:].any()


def test_models_are_the_same_for_a_seed_and_differ_between_seeds(tmp_path):
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        llama.write_model(tmp_path / name, TINY, seed)
    assert sha(tmp_path / "a") == sha(tmp_path / "b") != sha(tmp_path / "c")


def test_full_models_outgrow_the_cgroup_and_the_quick_ones_too():
    # f32 weights: 4 bytes a parameter; the guest's default limits
    for quick, limit_mib in ((False, 160), (True, 64)):
        d, ff, layers = llama.SHAPES[quick]
        mib = llama.MODELS * 4 * layers * (4 * d * d + 3 * d * ff) / (1 << 20)
        assert mib > 1.5 * limit_mib, quick
    exp = next(e for e in suite.EXPERIMENTS if e.id == "llama-tiering")
    assert (exp.group, exp.switch, exp.seed) == ("llama", "luf", "001")
    assert suite.GROUPS["llama"].data_disk == "llama"
    assert all(f"/data/{m}" in exp.command for m in llama.model_names())


def test_host_llama_tiering_needs_the_users_models(tmp_path):
    exps = suite.select(["llama-tiering"])
    with pytest.raises(LabError, match="--model PATH three times"):
        host.llama_args(exps, bench_args(tmp_path, "llama-tiering"))
    with pytest.raises(LabError, match="no such file"):
        host.llama_args(exps, bench_args(tmp_path, "llama-tiering",
                                         model=[str(tmp_path / "none.gguf")]))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    not_exec = tmp_path / "llama-simple"
    not_exec.write_text("")
    with pytest.raises(LabError, match="not an executable llama-simple"):
        host.llama_args(exps, bench_args(tmp_path, "llama-tiering", model=[str(model)] * 3,
                                         llama=str(not_exec)))
    not_exec.chmod(0o755)
    got = host.llama_args(exps, bench_args(tmp_path, "llama-tiering",
                                           model=[str(model)] * 3, llama=str(not_exec)))
    assert got == (f"--llama {not_exec} --models {model},{model},{model} "
                   "--memcg-limit 0")
    assert host.llama_args(suite.select(["swap-loop"]),
                           bench_args(tmp_path, "swap-loop")) is None


def test_models_outside_a_host_run_are_refused(tmp_path):
    args = bench_args(tmp_path, "llama-tiering", model=["x.gguf"])
    args.host = False
    with pytest.raises(LabError, match="for --host runs"):
        bench.main(args)


def test_arm64_build_is_its_own_and_says_what_is_missing(tmp_path, monkeypatch):
    """llama-simple for the arm64 guest is cached apart from x86-64's, and a
    missing cross compiler is named before anything is downloaded."""
    monkeypatch.setattr(llama.paths, "cache_dir", lambda: tmp_path)
    assert llama.binary("arm64").parent != llama.binary().parent
    monkeypatch.setattr(llama.shutil, "which",
                        lambda tool: None if tool.startswith("aarch64-") else "/bin/" + tool)
    monkeypatch.setattr(llama, "_run", lambda *a, **k: pytest.fail("downloaded"))
    with pytest.raises(LabError, match="aarch64-linux-gnu-gcc is missing: run `make setup`"):
        llama.build("arm64")
