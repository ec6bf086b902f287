"""Every shipped training config (configs/*.yaml, a new one included without editing this file) that changes what a
GRPO step computes takes a real step on the CPU backend with the tiny model at CPU sizes, its mix, reward,
curriculum and algorithm settings as shipped: `python training/train_grpo.py --config-name NAME`, every launch
joining one Ray cluster started once for this module (RAY_ADDRESS).

"Changes the step" is read from the composed config against configs/grpo.yaml: the advantage, the policy loss, LoRA,
the reward manager, a curriculum in its mix. A config that differs from plain GRPO only in its data (mix, reward
options, prompt lengths, held-out tasks, model preset) runs the step tests/training/test_train.py takes for real, on
other items; its own settings are checked without a launch (tests/training/test_algorithm_presets.py: its advantage,
loss and reward options; tests/training/launch/test_configs.py: composition, verl's validation, batch arithmetic; the
envs tests: every mix and task). A verl start costs half a minute of CI, so one launch per config does not fit.

Each run checks that its metrics are finite and that its settings took effect:
- the policy loss verl logged equals the loss computed by hand (tests/training/grpo_by_hand.py) from the step's
  dumped scores and response lengths, with the config's advantage normalisation and loss aggregation;
- LoRA: only the adapters moved, and the merged export (utils/load_fsdp_to_hf.py) is base + alpha/r B A, not the base;
- DAPO's overlong penalty: every response's reward carries exactly the configured penalty of its length;
- dynamic sampling: every trained group differs in the filter's metric, dropped groups were observed;
- a curriculum: a task whose accuracy crossed the shipped threshold moved up a level.
An untrained tiny model never answers right, so these runs score with tests/noisy_reward.py's `lucky` (half of the
responses count as right, over the real reward) or, for a curriculum without dynamic sampling, `always_right`; and a
copy of the tiny model whose end-of-turn token is likely ends its responses at varied lengths, so that the loss
aggregation modes and the overlong buffer give different numbers.
"""

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from envs.mix import load_mix, mix_path
from tests.training.grpo_by_hand import finite, overlong_reward
from tests.training.shipped import BASELINE, CONFIGS, composed, step_settings
from tests.training.test_train import PROMPTS, SAMPLES, check_policy_loss, run_logs, step_metrics, step_rows, train
from training.launch.config import compose_config
from utils import generation_viewer as viewer

REPO = Path(__file__).resolve().parents[2]
LAUNCH = ["data.max_prompt_length=2048", "env.preflight.length_check_items=8", "env.dump.groups_per_step=64",
          "trainer.save_freq=-1"]

# configs whose step another test trains for real: its launch here would repeat that one
TRAINED_ELSEWHERE = {"quickstart": "tests/training/test_train.py: every run there, the policy loss by hand too"}
LAUNCHED = [name for name in CONFIGS if step_settings(name) and name not in TRAINED_ELSEWHERE]


def test_configs_that_change_the_step_are_the_ones_launched():
    assert {"lora_algorithmic", "dapo", "dr_grpo", "curriculum_spell_backward"} <= set(LAUNCHED)
    assert step_settings("quickstart") and "quickstart" not in LAUNCHED  # trained in test_train.py
    assert BASELINE not in LAUNCHED and "inter_algorithmic" not in LAUNCHED
    assert step_settings("dr_grpo")["algorithm.norm_adv_by_std_in_grpo"] is False


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray cluster for every launch of this module (each launch joins it through RAY_ADDRESS): 16 logical
    CPUs and one logical GPU slot, what a one-rank CPU run reserves."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 16, "num_gpus": 1})
    before = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = cluster.address
    try:
        yield cluster.address
    finally:
        if before is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = before
        cluster.shutdown()


@pytest.fixture(scope="module")
def varied_length_model(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny model with its end-of-turn token's (tied) embedding scaled 24x: its logit is then large in many
    contexts, so sampled responses of up to 24 tokens end anywhere between 2 and 24 instead of all at 24."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("tiny_varied_length")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids("<|im_end|>")] *= 24
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def launch_overrides(name: str, settings: dict, model: Path, run_dir: Path, tiny_run: list[str]) -> list[str]:
    """The overrides of a real run of config `name` at CPU sizes (on top of `tiny_run`, conftest's TINY_RUN)."""
    cfg = composed(name)
    response_tokens = int(next(o for o in tiny_run if o.startswith("data.max_response_length=")).split("=")[1])
    dynamic = bool(OmegaConf.select(cfg, "algorithm.filter_groups.enable"))
    reward = "always_right" if settings.get("curriculum") and not dynamic else "lucky"
    overrides = [*LAUNCH, f"actor_rollout_ref.model.path={model}", f"reward.custom_reward_function.name={reward}",
                 f"reward.custom_reward_function.path={REPO / 'tests' / 'noisy_reward.py'}"]
    if "actor_rollout_ref.model.lora_rank" in settings:
        overrides.append("trainer.save_freq=1")
    shaping = OmegaConf.select(cfg, "reward.reward_kwargs.overlong_buffer_cfg")
    if shaping is not None and shaping.enable:  # the same share of the (CPU-sized) response length
        share = int(shaping.len) / int(cfg.reward.reward_kwargs.max_resp_len)
        overrides.append(f"reward.reward_kwargs.overlong_buffer_cfg.len={max(1, round(share * response_tokens))}")
    if settings.get("curriculum"):  # the shipped thresholds over one group's scores instead of thousands
        mix = dict(OmegaConf.to_container(OmegaConf.load(mix_path(cfg.env.mix))))
        mix["curriculum"] = {**mix["curriculum"], "window": SAMPLES, "min_samples": SAMPLES}
        (run_dir / "mix.yaml").write_text(json.dumps(mix))
        overrides.append(f"env.mix={run_dir / 'mix.yaml'}")
    return overrides


def check_overlong(cfg, rows: list[dict]) -> None:
    """Under verl's dapo reward manager each reward is the lucky bonus (acc) plus the configured penalty of the
    response's length in tokens (0 below the buffer; which lengths a step samples is chance: the fast test
    tests/training/test_algorithm_presets.py puts responses inside the buffer on purpose)."""
    kwargs = cfg.reward.reward_kwargs
    top, shaping = int(kwargs.max_resp_len), kwargs.overlong_buffer_cfg
    for row in rows:
        penalty = overlong_reward(row["response_length"], top, int(shaping.len), float(shaping.penalty_factor))
        assert row["score"] - row["acc"] == pytest.approx(penalty), row
    print(f"overlong: {sum(row['response_length'] > top - int(shaping.len) for row in rows)} of {len(rows)} responses "
          f"in the last {shaping.len} of {top} tokens")


def check_dynamic_sampling(cfg, rows: list[dict], metrics: dict) -> None:
    """Every trained group differs in the filter's metric (verl dropped the flat ones and refilled from the stream),
    and the responses of the groups verl dropped were read before it cleared them (they count in the step's
    feedback). On the CPU this is the test of dynamic sampling through train_grpo.py (test_train.py runs it on CUDA)."""
    key = {"acc": "acc", "reward": "score"}[str(cfg.algorithm.filter_groups.metric)]
    by_group = {}
    for row in rows:
        by_group.setdefault(row["group"], set()).add(row[key])
    assert all(len(values) > 1 for values in by_group.values()), by_group
    assert metrics["sampling/dropped_read_failures"] == 0.0, metrics
    print(f"dynamic sampling: verl dropped {metrics['sampling/dropped_groups']:.0f} flat groups and refilled")


def check_curriculum(cfg, rows: list[dict], metrics: dict) -> None:
    """Every leveled task of the step scored above the shipped promotion threshold, so it moved up a level."""
    from envs.curriculum import Curriculum
    from envs.tasks import max_level

    mix = load_mix(mix_path(cfg.env.mix))
    for task, start in Curriculum(mix).levels().items():
        if any(row["task"] == task for row in rows) and start < max_level(mix.task(task).task):
            assert metrics[f"curriculum/{task}/level"] == start + 1, metrics


def safetensors_folder(folder: Path) -> dict:
    """Every tensor of a Hugging Face model folder, whatever its shards."""
    from safetensors.torch import load_file

    return {key: value for path in sorted(folder.glob("*.safetensors")) for key, value in load_file(path).items()}


def check_lora(run_dir: Path, base_dir: Path, tmp_path: Path) -> None:
    """The step moved the adapters only; the merged export is W + alpha/r B A for every adapted weight, not W."""
    import torch

    from utils.load_fsdp_to_hf import main as export

    actor = run_dir / "ckpt/global_step_1/actor"
    trained = torch.load(actor / "model_world_size_1_rank_0.pt", map_location="cpu", weights_only=False)
    base = safetensors_folder(base_dir)
    meta = json.loads((actor / "lora_train_meta.json").read_text())
    adapted = {}
    for key, value in trained.items():
        value = value.to_local() if hasattr(value, "to_local") else value  # a DTensor on one rank holds it all
        name = key.removeprefix("base_model.model.").replace(".base_layer", "")
        if ".lora_" in key:
            module, ab = name.split(".lora_")
            adapted.setdefault(module, {})[ab[0]] = value
        else:
            assert torch.equal(value, base.get(name, base["model.embed_tokens.weight"])), \
                f"{name} is not an adapter weight, yet it changed"  # lm_head: tied to the embedding
    assert adapted and any(ab["B"].abs().sum() > 0 for ab in adapted.values())  # B starts at zero
    assert export([str(run_dir / "ckpt"), str(tmp_path / "hf"), "--dtype", "fp32", "--quiet"]) == 0
    merged = safetensors_folder(tmp_path / "hf")
    for module, ab in adapted.items():
        update = meta["lora_alpha"] / meta["r"] * ab["B"] @ ab["A"]
        assert torch.allclose(merged[f"{module}.weight"], base[f"{module}.weight"] + update, atol=1e-6)
    assert any(not torch.equal(merged[f"{m}.weight"], base[f"{m}.weight"]) for m in adapted)


# Dr. GRPO changes only the advantage's std normalisation and the loss aggregation, which the other launches' loss
# checks read through the same code; its launch (2 minutes of CI) runs with `make test-extended`.
EXTENDED = {"dr_grpo"}


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.extended) if name in EXTENDED else name
                                  for name in LAUNCHED])
def test_config_takes_real_grpo_steps(name, ray_address, varied_length_model, tiny_run, tmp_path):
    settings = step_settings(name)
    print(f"{name} changes the step: {settings}")
    overrides = launch_overrides(name, settings, varied_length_model, tmp_path, tiny_run)
    output = train(tiny_run, tmp_path, "cpu", 1, *overrides, config=name)
    assert f"joining the Ray cluster at {ray_address}" in output
    metrics = step_metrics(run_logs(tmp_path), 1)
    assert finite(metrics) == [] and metrics["env/samples"] == PROMPTS * SAMPLES and metrics["actor/grad_norm"] > 0
    cfg = compose_config(name, [*tiny_run, *overrides])  # the settings of the run, as trained
    rows = step_rows(tmp_path, 1)
    # the generation viewer reads the run's real dump (its own real run, with validation dumps, is extended)
    viewed, summaries = viewer.load([tmp_path / "ckpt"])
    assert len([r for r in viewed if r["source"] == "train"]) == PROMPTS * SAMPLES and sorted(summaries) == [1]
    assert all(r["task"] != "unknown" and r["expected"] is not None for r in viewed)
    check_policy_loss(cfg, rows, metrics)
    if OmegaConf.select(cfg, "reward.reward_kwargs.overlong_buffer_cfg.enable"):
        check_overlong(cfg, rows)
    if cfg.algorithm.filter_groups.enable:
        check_dynamic_sampling(cfg, rows, metrics)
    if settings.get("curriculum"):
        check_curriculum(cfg, rows, metrics)
    if "actor_rollout_ref.model.lora_rank" in settings:
        check_lora(tmp_path, varied_length_model, tmp_path)
