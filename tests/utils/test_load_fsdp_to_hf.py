"""The exporter on real verl checkpoints (FSDPCheckpointManager, FSDP2, gloo, one and two ranks, LoRA).

Checkpoints are written once per session by bench/make_fsdp_checkpoint.py under torchrun, with the gathered fp32
state dict beside them as the reference. Compared with verl's own merger and with peft's merge.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from utils.fsdp_checkpoint import Entry, Region
from utils.fsdp_export import ExportOptions, Output, clean_key, stream_output
from utils.fsdp_verify import VerifyError, verify_export
from utils.load_fsdp_to_hf import main
from utils.offline_models import build_tiny_model

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
MAKER = ROOT / "bench" / "make_fsdp_checkpoint.py"


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    """Real checkpoints written in parallel: 2 ranks, 1 rank, HSDP (2 replicas x 1 shard), LoRA (rank 4, alpha 16)."""
    root = tmp_path_factory.mktemp("fsdp")
    model = build_tiny_model(root / "tiny")
    jobs = {"w2": ["--world-size", "2"], "w1": ["--world-size", "1"], "hsdp": ["--world-size", "2", "--replicas", "2"],
            "lora": ["--world-size", "2", "--lora-rank", "4", "--steps", "2"]}
    procs = {name: subprocess.Popen([sys.executable, str(MAKER), "--model", str(model), "--out", str(root / name),
                                     "--reference", *extra], env=ENV, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT) for name, extra in jobs.items()}
    for name, proc in procs.items():
        out = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, f"{name}: {out[-3000:]}"
    return {"model": model, **{name: root / name for name in jobs}}


def export(src, dst, *flags):
    assert main([str(src), str(dst), "--quiet", *flags]) == 0
    return Path(dst)


def weights(folder):
    out = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        out.update(load_file(path))
    return out


def reference(exp):
    ref = load_file(exp / "reference_fp32.safetensors")
    ref.pop("lm_head.weight")  # tied to the embedding: HF stores it once
    return ref


def test_bf16_equals_verl_merger_bit_for_bit(ckpts, tmp_path):
    ours = weights(export(ckpts["w2"], tmp_path / "ours", "--dtype", "bf16"))
    actor = ckpts["w2"] / "global_step_1" / "actor"
    subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                    str(actor), "--target_dir", str(tmp_path / "verl")], env=ENV, check=True, capture_output=True)
    theirs = weights(tmp_path / "verl")
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == torch.bfloat16
        assert torch.equal(ours[key].view(torch.int16), value.view(torch.int16)), key
    for name in ("config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja"):
        assert (tmp_path / "ours" / name).read_text() == (tmp_path / "verl" / name).read_text(), name


@pytest.mark.parametrize("name", ["w1", "w2", "hsdp"])
def test_fp32_equals_full_state_dict(ckpts, tmp_path, name):
    ours = weights(export(ckpts[name], tmp_path / "out", "--dtype", "fp32", "--max-shard-size", "300KB"))
    ref = reference(ckpts[name])
    assert set(ours) == set(ref)
    assert all(torch.equal(ours[k], ref[k]) for k in ref)
    assert len(list((tmp_path / "out").glob("model-*-of-*.safetensors"))) > 1
    assert json.loads((tmp_path / "out" / "config.json").read_text())["dtype"] == "float32"


def test_hsdp_checkpoint_has_a_replicated_mesh_dim(ckpts):
    shard = torch.load(ckpts["hsdp"] / "global_step_1" / "actor" / "model_world_size_2_rank_1.pt",
                       weights_only=False, mmap=True)
    weight = shard["model.embed_tokens.weight"]
    assert weight.device_mesh.mesh_dim_names == ("ddp", "fsdp") and weight.placements[0].is_replicate()


def test_exported_model_loads_and_generates(ckpts, tmp_path):
    out = export(ckpts["w2"] / "global_step_1", tmp_path / "out", "--verify")
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.dtype == torch.bfloat16 and model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    batch = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                    return_tensors="pt", return_dict=True)
    assert tok.decode(batch["input_ids"][0]).startswith("<|im_start|>system")
    generated = model.generate(**batch, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] == batch["input_ids"].shape[1] + 5 or tok.eos_token_id in generated[0]


def test_plain_tensor_single_rank_layout(ckpts, tmp_path):
    """A one-GPU run without a device mesh saves plain tensors, not DTensors (verl issue #903)."""
    src = ckpts["w1"] / "global_step_1" / "actor"
    actor = tmp_path / "global_step_5" / "actor"
    shutil.copytree(src / "huggingface", actor / "huggingface")
    state = torch.load(src / "model_world_size_1_rank_0.pt", weights_only=False)
    torch.save({k: v._local_tensor for k, v in state.items()}, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": 1}))
    ours = weights(export(tmp_path, tmp_path / "out", "--dtype", "fp32"))
    ref = reference(ckpts["w1"])
    assert set(ours) == set(ref) and all(torch.equal(ours[k], ref[k]) for k in ref)


def _separate_tied_copies(actor, change=False):
    """Rewrites each rank's shard as verl saves on CUDA (offload_to_cpu=True copies every tensor on its own): the
    tied lm_head.weight becomes a second storage, equal to the embedding unless `change`."""
    from torch.distributed.tensor import DTensor

    for shard in sorted(actor.glob("model_world_size_*_rank_*.pt")):
        state = torch.load(shard, weights_only=False)
        head, embedding = state["lm_head.weight"], state["model.embed_tokens.weight"]
        if not change:  # one storage, as a CPU run saves
            assert head._local_tensor.data_ptr() == embedding._local_tensor.data_ptr()
        local = head._local_tensor.clone() + (1.0 if change else 0.0)
        state["lm_head.weight"] = DTensor.from_local(local, head.device_mesh, head.placements, run_check=False)
        torch.save(state, shard)


def test_tied_weights_saved_as_two_copies_export_once(ckpts, tmp_path, capsys):
    """A CUDA run's checkpoint (H100, 2026-11-26): lm_head.weight is an equal copy, not the embedding's storage."""
    actor = _copy_actor(ckpts, tmp_path)
    _separate_tied_copies(actor)
    ours = weights(export(actor, tmp_path / "out", "--dtype", "fp32", "--verify"))
    ref = reference(ckpts["w2"])
    assert set(ours) == set(ref) and all(torch.equal(ours[k], ref[k]) for k in ref)
    _separate_tied_copies(actor, change=True)
    assert main([str(actor), str(tmp_path / "out2"), "--quiet"]) == 1
    assert "ties 'lm_head.weight' to 'model.embed_tokens.weight'" in capsys.readouterr().err


def _peft_merged(ckpts):
    from peft import LoraConfig, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(ckpts["model"], dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=16, task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    peft_model = get_peft_model(base, config)
    missing = peft_model.load_state_dict(load_file(ckpts["lora"] / "reference_fp32.safetensors"), strict=False)
    assert not missing.unexpected_keys
    return peft_model.merge_and_unload()


def test_lora_merged_equals_peft_merge(ckpts, tmp_path):
    pytest.importorskip("peft")
    ours = weights(export(ckpts["lora"], tmp_path / "out", "--dtype", "fp32", "--verify"))
    expected = _peft_merged(ckpts).state_dict()
    expected.pop("lm_head.weight")
    assert set(ours) == set(expected)
    assert all(torch.allclose(ours[k], expected[k], rtol=0, atol=1e-6) for k in expected)
    changed = [k for k in expected if "q_proj.weight" in k]
    base = load_file(next((ckpts["model"]).glob("model*.safetensors")))
    assert not torch.equal(ours[changed[0]], base[changed[0]])  # the update is really in there


def test_lora_adapter_loads_with_peft(ckpts, tmp_path):
    peft = pytest.importorskip("peft")
    out = export(ckpts["lora"], tmp_path / "out", "--dtype", "fp32", "--lora", "adapter", "--verify")
    assert not any("lora" in k for k in weights(out))
    model = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(out), out / "lora_adapter")
    ids = torch.tensor([[1, 5, 9, 33, 2]])
    with torch.no_grad():
        diff = (model(ids).logits - _peft_merged(ckpts)(ids).logits).abs().max()
    assert diff < 1e-4


def _copy_actor(ckpts, tmp_path):
    return Path(shutil.copytree(ckpts["w2"] / "global_step_1" / "actor", tmp_path / "ckpt" / "actor",
                                ignore=shutil.ignore_patterns("optim_*")))


def test_truncated_shard_is_named_and_nothing_is_left(ckpts, tmp_path, capsys):
    actor = _copy_actor(ckpts, tmp_path)
    shard = actor / "model_world_size_2_rank_1.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    assert main([str(actor), str(tmp_path / "out"), "--quiet"]) == 1
    assert "model_world_size_2_rank_1.pt" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_missing_shard_and_world_size_mismatch(ckpts, tmp_path, capsys):
    actor = _copy_actor(ckpts, tmp_path)
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 4}))
    assert main([str(actor), str(tmp_path / "out"), "--quiet"]) == 1
    assert "world_size=4" in capsys.readouterr().err
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
    (actor / "model_world_size_2_rank_0.pt").unlink()
    assert main([str(actor), str(tmp_path / "out"), "--quiet"]) == 1
    assert "model_world_size_2_rank_0.pt" in capsys.readouterr().err


def test_existing_output_needs_force(ckpts, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main([str(ckpts["w2"]), str(out), "--quiet"]) == 1
    assert "--force" in capsys.readouterr().err and (out / "keep.txt").exists()
    export(ckpts["w2"], out, "--force")
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_verify_catches_a_corrupted_export(ckpts, tmp_path):
    out = export(ckpts["w2"], tmp_path / "out", "--dtype", "fp32")
    assert verify_export(ckpts["w2"], out, ExportOptions(dtype="fp32"))["verified_tensors"] == 26
    data = bytearray((out / "model.safetensors").read_bytes())
    data[-4:] = b"\x00\x00\xc0\x7f"  # last float -> NaN
    (out / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(VerifyError, match="differ"):
        verify_export(ckpts["w2"], out, ExportOptions(dtype="fp32"))


def test_fp16_overflow_is_refused():
    entry = Entry("w", (2,), torch.float32, [Region(0, (0,), torch.tensor([1.0, 1e6]))])
    with pytest.raises(ValueError, match="float16"):
        list(stream_output(Output("w", entry), torch.float16))


def test_cli_script_runs(ckpts, tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "utils" / "load_fsdp_to_hf.py"), str(ckpts["w1"]),
                          str(tmp_path / "out"), "--quiet"], env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["world_size"] == 1


def test_clean_key_strips_wrappers_and_peft():
    assert clean_key("model._fsdp_wrapped_module.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight") == \
        "model.layers.0.mlp.up_proj.weight"
    assert clean_key("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") == \
        "model.layers.0.self_attn.q_proj.weight"
    assert clean_key("_orig_mod.lm_head.weight") == "lm_head.weight"


VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_SCRIPT = """
import json, sys
from vllm import LLM, SamplingParams
if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=512)
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, repetition_penalty=1.0)
    out = llm.generate([{"prompt_token_ids": json.loads(sys.argv[2])}], params)
    print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)))
"""


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PY.exists(), reason=".venv-vllm is missing: run evaluation/install_vllm_cpu.sh")
def test_exported_model_runs_in_vllm_like_transformers(ckpts, tmp_path):
    out = export(ckpts["w2"], tmp_path / "out", "--dtype", "fp32")
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Add 2 and 3."}], add_generation_prompt=True,
                                     return_dict=False)
    model = AutoModelForCausalLM.from_pretrained(out)
    hf = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, min_new_tokens=12,
                        repetition_penalty=1.0)[0, len(prompt):].tolist()
    (tmp_path / "run_vllm.py").write_text(VLLM_SCRIPT)
    env = {**ENV, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    proc = subprocess.run([str(VLLM_PY), str(tmp_path / "run_vllm.py"), str(out), json.dumps(prompt)], env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tokens = json.loads(proc.stdout.split("TOKENS", 1)[1].splitlines()[0])
    assert tokens == hf


def test_lora_only_checkpoint_needs_and_uses_the_base_model(ckpts, tmp_path, capsys):
    """verl's save_lora_only keeps only the LoRA factors (same filter as FSDPCheckpointManager)."""
    src = ckpts["lora"] / "global_step_1" / "actor"
    actor = Path(shutil.copytree(src, tmp_path / "ckpt" / "actor", ignore=shutil.ignore_patterns("optim_*")))
    for rank in (0, 1):
        path = actor / f"model_world_size_2_rank_{rank}.pt"
        state = torch.load(path, weights_only=False)
        torch.save({k: v for k, v in state.items() if "lora_" in k}, path)
    assert main([str(actor), str(tmp_path / "none"), "--quiet"]) == 1
    assert "--base-model" in capsys.readouterr().err
    ours = weights(export(actor, tmp_path / "out", "--dtype", "fp32", "--base-model", str(ckpts["model"]),
                          "--verify"))
    full = weights(export(ckpts["lora"], tmp_path / "full", "--dtype", "fp32"))
    assert set(ours) == set(full) and all(torch.equal(ours[k], full[k]) for k in full)


def _snapshot(folder: Path) -> dict:
    """Every file under `folder` with its bytes' hash and mtime: a write anywhere inside changes it."""
    import hashlib

    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_three_path_form_reads_config_from_hf_dir_and_writes_nothing_there(ckpts, tmp_path, monkeypatch):
    """reasoning-gym's README form: ACTOR_DIR HF_DIR OUTPUT, OUTPUT relative to the working directory."""
    actor = _copy_actor(ckpts, tmp_path)
    hf_dir = Path(shutil.copytree(actor / "huggingface", tmp_path / "base"))
    (hf_dir / "chat_template.jinja").write_text((hf_dir / "chat_template.jinja").read_text() + "{# from HF_DIR #}")
    before = {"actor": _snapshot(actor), "hf": _snapshot(hf_dir)}
    monkeypatch.chdir(tmp_path)
    assert main([str(actor), str(hf_dir), "qwen_tiny", "--dtype", "fp32", "--quiet", "--verify"]) == 0
    out = tmp_path / "qwen_tiny"
    assert (out / "chat_template.jinja").read_text().endswith("{# from HF_DIR #}")
    assert AutoTokenizer.from_pretrained(out).chat_template.endswith("{# from HF_DIR #}")
    ref = reference(ckpts["w2"])
    ours = weights(out)
    assert set(ours) == set(ref) and all(torch.equal(ours[k], ref[k]) for k in ref)
    assert {"actor": _snapshot(actor), "hf": _snapshot(hf_dir)} == before


def test_three_path_form_equals_two_path_form_with_verls_hf_folder(ckpts, tmp_path):
    actor = ckpts["w2"] / "global_step_1" / "actor"
    three = tmp_path / "three"
    assert main([str(actor), str(actor / "huggingface"), str(three), "--quiet"]) == 0
    two = export(actor, tmp_path / "two")
    assert sorted(p.name for p in three.iterdir()) == sorted(p.name for p in two.iterdir())
    assert all((three / p.name).read_bytes() == p.read_bytes() for p in two.iterdir())


def test_three_path_form_refuses_bad_hf_dir_and_output_inside_a_source(ckpts, tmp_path, capsys):
    actor = _copy_actor(ckpts, tmp_path)
    before = _snapshot(actor)
    assert main([str(actor), str(tmp_path), str(tmp_path / "out"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"HF_DIR {tmp_path} has no config.json" in err and "actor/huggingface" in err
    for inside in (actor / "huggingface" / "merged", actor / "hf"):
        assert main([str(actor), str(actor / "huggingface"), str(inside), "--quiet"]) == 1
        assert "never writes into" in capsys.readouterr().err
    assert _snapshot(actor) == before and not (tmp_path / "out").exists()


def test_help_shows_both_forms_and_four_paths_are_refused(tmp_path):
    script = [sys.executable, str(ROOT / "utils" / "load_fsdp_to_hf.py")]
    shown = subprocess.run([*script, "--help"], env=ENV, capture_output=True, text=True)
    assert shown.returncode == 0
    assert "CHECKPOINT OUTPUT_DIR [options]" in shown.stdout and "ACTOR_DIR HF_DIR OUTPUT_DIR" in shown.stdout
    wrong = subprocess.run([*script, "a", "b", "c", "d"], env=ENV, capture_output=True, text=True)
    assert wrong.returncode == 2 and "got 4" in wrong.stderr
