"""utils.offline_models.build_random_model: a published architecture with random weights and a tokenizer that
decodes every id the model can sample (issue 46's speed runs at Qwen2.5's 151,936-token vocabulary)."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from utils.offline_models import REPO_MODELS, build_random_model, main

SHRINK = {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2}


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory):
    return build_random_model(REPO_MODELS / "qwen2.5-1.5b.json", tmp_path_factory.mktemp("m") / "qwen",
                              dtype="float32", **SHRINK)


def test_the_vocabulary_is_the_published_one_and_every_id_decodes(qwen_folder):
    tokenizer = AutoTokenizer.from_pretrained(qwen_folder)
    model = AutoModelForCausalLM.from_pretrained(qwen_folder)
    assert len(tokenizer) == model.config.vocab_size == 151936 and model.config.model_type == "qwen2"
    assert model.config.num_key_value_heads == 2 and model.config.tie_word_embeddings
    assert all(tokenizer.decode([i]) for i in range(0, 151936, 997))  # every byte, pair and triple decodes to text
    assert tokenizer.eos_token == "<|im_end|>" and model.config.eos_token_id == tokenizer.eos_token_id
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert tokenizer.decode(ids[0]) == prompt  # byte-level: the text round-trips
    out = model.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=True)
    assert out.shape[1] == ids.shape[1] + 8 and isinstance(tokenizer.decode(out[0, ids.shape[1]:]), str)


def test_a_second_build_reuses_the_folder_and_another_architecture_is_refused(qwen_folder):
    spec = json.loads((qwen_folder / "rg_grpo_model.json").read_text())
    assert spec["kind"] == "random" and spec["config"]["hidden_size"] == 64
    assert build_random_model(REPO_MODELS / "qwen2.5-1.5b.json", qwen_folder, dtype="float32", **SHRINK) == qwen_folder
    with pytest.raises(FileExistsError, match="different model"):
        build_random_model(REPO_MODELS / "smollm2-135m.json", qwen_folder, dtype="float32", **SHRINK)


def test_the_cli_names_what_random_needs(capsys):
    with pytest.raises(SystemExit):
        main(["random"])
    assert "--config" in capsys.readouterr().err


def test_a_random_model_path_names_a_shipped_architecture_or_lists_them(monkeypatch, tmp_path):
    """`actor_rollout_ref.model.path=random:<name>` (the GPU kit's speed stages) builds gpu_kit/models/<name>.json
    into the cache once; an unknown name lists the known ones."""
    from training.launch import config as launch_config
    from utils import offline_models

    built = []
    monkeypatch.setattr(offline_models, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(offline_models, "build_random_model",
                        lambda config, out, **kw: built.append((config.name, out)) or out)
    assert launch_config.resolve_model_path("random:qwen2.5-1.5b") == str(tmp_path / "random-qwen2.5-1.5b")
    assert built == [("qwen2.5-1.5b.json", tmp_path / "random-qwen2.5-1.5b")]
    with pytest.raises(ValueError, match=r"random:llama-70b.*random:qwen2.5-0.5b, random:qwen2.5-1.5b, "
                                         r"random:qwen3-1.7b, random:smollm2-135m"):
        launch_config.resolve_model_path("random:llama-70b")
