"""The whole pipeline as a user runs it, through `python training/train_grpo.py` on the tiny model:
two GRPO steps with a checkpoint; a new process resumes and takes step 3 with exactly the prompts that follow;
the checkpoint exports with utils/load_fsdp_to_hf.py and the export evaluates with evaluation/evaluate_model.py;
`python -m training.pipeline` takes that run through export, evaluation and comparison.
The same tests run on the CPU backend and, marked `gpu`, on CUDA. The other ways a run trains (dynamic sampling, two
ranks, async mode): test_train_modes.py.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from tests.training.grpo_by_hand import group_advantages, on_policy_loss

REPO = Path(__file__).resolve().parents[2]
PROMPTS, SAMPLES = 2, 4
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
NOISY = [f"reward.custom_reward_function.path={REPO / 'tests' / 'noisy_reward.py'}",
         "reward.custom_reward_function.name=compute_score"]


def train(tiny_run: list[str], run_dir: Path, device: str, steps: int, *overrides: str,
          config: str = "quickstart") -> str:
    """Runs train_grpo.py in a new process with the `tiny_run` overrides (conftest); returns its output (exit 0)."""
    assert f"data.train_batch_size={PROMPTS}" in tiny_run and f"actor_rollout_ref.rollout.n={SAMPLES}" in tiny_run
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", config, *tiny_run, f"trainer.device={device}",
           f"trainer.total_training_steps={steps}", "trainer.save_freq=2",
           f"trainer.default_local_dir={run_dir / 'ckpt'}", f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
           f"hydra.run.dir={run_dir / 'hydra'}", "env.console=verbose", *overrides]  # verl's metric lines
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output


def step_metrics(logs: Path, step: int) -> dict[str, float]:
    """Every number verl logged for `step`, from the run's `<logs>/metrics.jsonl` (training/trainer/progress.py), not
    from verl's console line: Ray's log monitor can cut that line in two (CI of 21748d5 lost its last key so)."""
    from utils.metrics_file import read_metrics

    steps = read_metrics(logs)
    assert step in steps, f"no metrics for step {step} in {logs}/metrics.jsonl (steps {sorted(steps)})"
    return steps[step]


def run_logs(run_dir: Path) -> Path:
    """The logs folder of a run that `train` launched (env.logs_dir's default under trainer.default_local_dir)."""
    return run_dir / "ckpt" / "logs"


def expected_prompts(tokenizer, first: int, count: int) -> list[str]:
    """The stream's prompts at positions first .. first+count-1, rendered and decoded as verl's dump does."""
    from envs.mix import mix_path
    from envs.stream import TaskStream
    from training.launch.config import compose_config

    env = compose_config("quickstart").env
    stream = TaskStream(str(mix_path(env.mix)), split="train", seed=0, system_prompt=env.system_prompt,
                        tokenizer=tokenizer, max_prompt_length=768)
    try:
        items = stream.take(first + count)[first:]
    finally:
        stream.close()
    return [tokenizer.decode(tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True,
                                                           tokenize=True, return_dict=False), skip_special_tokens=True)
            for item in items]


def dumped_prompts(run_dir: Path, step: int) -> list[str]:
    rows = [json.loads(line) for line in (run_dir / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    assert len(rows) == PROMPTS * SAMPLES
    return sorted(set(row["input"] for row in rows))  # n samples per prompt; verl orders rows by random uid


@pytest.fixture(scope="module", params=DEVICES)
def trained(request, tmp_path_factory, tiny_run):
    """Two steps and a checkpoint, then a resumed process for step 3. Returns (run_dir, outputs). The untrained
    tiny model never answers right: a 0/1 bonus on the score (tests/noisy_reward.py) makes its groups differ, so
    that the quickstart's update (which leaves out zero-advantage groups) has something to train on."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    run_dir = tmp_path_factory.mktemp(f"train_{request.param}")
    first = train(tiny_run, run_dir, request.param, 2, *NOISY)
    resumed = train(tiny_run, run_dir, request.param, 3, "trainer.save_freq=3", *NOISY)
    return run_dir, first, resumed


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_steps_checkpoint_then_resume_takes_the_next_prompts(trained, tiny_tokenizer, tiny_run):
    run_dir, first, resumed = trained
    device = "cpu" if "cpu" in run_dir.name else "cuda"
    ckpt = run_dir / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert (ckpt / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    if device == "cpu":  # one CPU rank trains the module unwrapped (training/cpu_backend/engine.py), FSDP2 on CUDA
        fsdp = json.loads((ckpt / "global_step_2" / "actor" / "fsdp_config.json").read_text())
        assert fsdp["FSDP_version"] == 0 and fsdp["world_size"] == 1
    for step in (1, 2, 3):  # steps 1-2 of the first process, step 3 of the resumed one (the file is appended)
        metrics = step_metrics(run_logs(run_dir), step)
        # bypass mode (the CPU default; a GPU run recomputes): the rollout's log-probs are the old ones, so the
        # first update's ratio to them is 1 exactly when rollout and actor agree
        if device == "cpu":
            assert abs(metrics["actor/ppo_kl"]) < 1e-3 and metrics["actor/pg_clipfrac"] == 0.0
            # the rollout server's own seconds, beside what the agent loop saw of each request
            assert 0 < metrics["rollout/sampler_seconds"] <= metrics["timing/rollout_request_max"]
            assert metrics["rollout/gather_seconds"] >= 0
        else:
            assert metrics["training/rollout_probs_diff_mean"] < 1e-3  # rollout and actor log-probs agree
        assert metrics["env/samples"] == PROMPTS * SAMPLES and "env/zero_variance_groups" in metrics
        tasks = [key.split("/")[1] for key in metrics if re.fullmatch(r"env/[^/]+/samples", key)]
        assert tasks and all(f"env/{task}/answer_collapse" in metrics for task in tasks)
        assert all(metrics[f"env/{task}/full_marks_not_gold"] == 0.0 for task in tasks)  # a right answer is the gold
        assert metrics["timing/reward_max"] >= metrics["timing/reward_mean"] > 0
        assert metrics["actor/grad_norm"] > 0
    assert "step:1 - " not in resumed  # the new process started from the checkpoint, not from scratch
    assert "reward hole?" not in first + resumed  # the step lines (training/launch/console.py) warn of none
    if device == "cpu":  # the quickstart's loss (test_shipped_configs.py holds every other config's step so)
        from training.launch.config import compose_config

        check_policy_loss(compose_config("quickstart", [*tiny_run, *NOISY]), step_rows(run_dir, 1),
                          step_metrics(run_logs(run_dir), 1))
    # the report printed after training covers the steps of both processes (steps.jsonl is appended on resume)
    assert "- training steps: 3 (1-3)" in (ckpt / "report.md").read_text() and "[report] table:" in resumed
    assert (ckpt / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for step in (1, 2, 3):
        assert dumped_prompts(run_dir, step) == sorted(expected_prompts(tiny_tokenizer, (step - 1) * PROMPTS, PROMPTS))


def step_rows(run_dir: Path, step: int) -> list[dict]:
    """The step's dumped responses (every group: env.dump.groups_per_step, 4 unless set, is at least the batch's 2)."""
    rows = [json.loads(line) for line in (run_dir / "ckpt/generations/train" / f"{step}.jsonl").read_text().splitlines()]
    assert len(rows) == PROMPTS * SAMPLES
    return rows


def check_policy_loss(cfg, rows: list[dict], metrics: dict) -> None:
    """actor/pg_loss of the step's one update (pi = pi_old: the CPU rollout's log-probs are the old ones) equals the
    hand computation from the dumped scores and lengths with the config's advantage and aggregation settings."""
    actor = cfg.actor_rollout_ref.actor
    groups, scores, lengths = ([row[k] for row in rows] for k in ("group", "score", "response_length"))
    advantages = group_advantages(groups, scores, bool(cfg.algorithm.norm_adv_by_std_in_grpo))
    scale = OmegaConf.select(cfg, "actor_rollout_ref.actor.loss_scale_factor")
    expected = on_policy_loss(advantages, lengths, actor.loss_agg_mode, scale)
    assert metrics["actor/pg_loss"] == pytest.approx(expected, abs=2e-3), (groups, scores, lengths)
    print(f"pg_loss {metrics['actor/pg_loss']:.5f} = {expected:.5f} by hand ({actor.loss_agg_mode}); lengths {lengths}")


def rollout_rows(run_dir: Path, step: int) -> list[dict]:
    """The step's dumped responses (prompt, response, score, ...) without verl's random uid, sorted (verl's dump
    orders rows by uid)."""
    rows = [json.loads(line) for line in (run_dir / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    return sorted(({k: v for k, v in row.items() if k != "uid"} for row in rows), key=lambda row: json.dumps(row))


def reproducible(metrics: dict[str, float]) -> dict[str, float]:
    """The step metrics a repeated run must reproduce: all but times, rates and memory (utils/compare_runs.py's
    rule, so the test and the tool agree on what a repeated run is)."""
    from utils.compare_runs import VOLATILE

    return {key: value for key, value in metrics.items() if not any(word in key for word in VOLATILE)}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_one_seed_gives_one_run_resumed_or_not_validating_or_not(trained, tiny_run, tmp_path):
    """A new run of the same seed and config takes the very steps the fixture's run took, step 3 included (which the
    fixture took in a resumed process): the same prompts, responses and rewards, and the same step metrics to the last
    bit (sums over the batch, so the batch's order counts too). docs/reproducibility.md; the CPU backend only:
    vLLM's batches on a GPU are not reproduced. The new run also validates (before training, at step 2 and at its
    last step), which the fixture's does not: validation samples through the same rollout server, and training must
    not notice (the CPU quickstart leaves validation out on that ground, configs/quickstart.yaml)."""
    run_dir, first, resumed = trained
    if "cuda" in run_dir.name:
        pytest.skip("a GPU run repeats its seeds but not its batches' numbers (docs/reproducibility.md)")
    output = train(tiny_run, tmp_path, "cpu", 3, "trainer.save_freq=3", "trainer.val_before_train=true",
                   "trainer.test_freq=2", *NOISY)
    assert "[val] before training" in output and "[val] at step 2" in output, output[-3000:]
    for step in (1, 2, 3):
        expected = reproducible(step_metrics(run_logs(run_dir), step))
        got = reproducible(step_metrics(run_logs(tmp_path), step))
        validated = {key for key in got if key.startswith("val-")}  # a validation is logged with its step
        assert bool(validated) == (step >= 2), (step, sorted(validated))  # at test_freq and at the last step
        got = {key: value for key, value in got.items() if key not in validated}
        assert got == expected, {k: (expected.get(k), got.get(k)) for k in expected.keys() | got.keys()
                                 if expected.get(k) != got.get(k)}
        assert rollout_rows(tmp_path, step) == rollout_rows(run_dir, step)
    assert len({row["output"] for step in (1, 2, 3) for row in rollout_rows(tmp_path, step)}) > 1
    # the same through utils/compare_runs.py, which also compares the actor's weights at step 3 bitwise
    compare = subprocess.run([sys.executable, "utils/compare_runs.py", str(run_dir / "ckpt"), str(tmp_path / "ckpt"),
                              "--training-only"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0 and "actor weights at step 3: bitwise identical" in compare.stdout, (
        compare.stdout + compare.stderr[-3000:])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_checkpoint_exports_and_evaluates(trained, tiny_model_dir, tmp_path):
    run_dir, _, _ = trained
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    export = subprocess.run([sys.executable, "utils/load_fsdp_to_hf.py", str(run_dir / "ckpt"), str(tmp_path / "hf"),
                             "--dtype", "fp32", "--verify", "--quiet"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert export.returncode == 0, export.stdout[-3000:] + export.stderr[-3000:]
    assert (tmp_path / "hf" / "config.json").is_file()
    evaluate = subprocess.run([sys.executable, "evaluation/evaluate_model.py", "--config", "configs/eval/smoke.yaml",
                               "--model", str(tmp_path / "hf"), "--backend", "hf", "--output", str(tmp_path / "eval"),
                               "suite.size=2", "suite.composites.mixed.size=2", "sampling.n=1",
                               "sampling.max_tokens=16", "pass_k=[1]"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert evaluate.returncode == 0, evaluate.stdout[-3000:] + evaluate.stderr[-3000:]
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert results and (tmp_path / "eval" / "generations.jsonl").read_text().count("\n") == 6
    # external benchmarks beside a Reasoning Gym category, base against trained: GSM8K- and MATH-format rows (local
    # files, lm-eval's engine and task files), every row paired item by item
    data = REPO / "tests" / "evaluation" / "data" / "benchmarks"
    suite = ["suite.size=2", "suite.composites.mixed.size=2", "sampling.n=1", "pass_k=[1]",
             "sampling.max_tokens=8", "suite.benchmarks.limit=2",
             "suite.benchmarks.tasks.gsm8k.task=gsm8k_cot_llama", "suite.benchmarks.tasks.gsm8k.num_fewshot=0",
             f"suite.benchmarks.tasks.gsm8k.data_files={data / 'gsm8k.jsonl'}",
             "suite.benchmarks.tasks.math.task=hendrycks_math_algebra",
             f"suite.benchmarks.tasks.math.data_files={data / 'math_algebra.jsonl'}"]
    for side, model in (("base", tiny_model_dir), ("trained", tmp_path / "hf")):  # the fixture trains model=tiny
        done = subprocess.run([sys.executable, "evaluation/evaluate_model.py", "--config", "configs/eval/smoke.yaml",
                               "--model", str(model), "--output", str(tmp_path / side), *suite], cwd=REPO,
                              env={**env, "HF_DATASETS_OFFLINE": "1"}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "benchmark gsm8k: lm-eval gsm8k_cot_llama, 2 documents" in done.stdout
    compare = subprocess.run([sys.executable, "evaluation/evaluate_model.py", "--compare", str(tmp_path / "base"),
                              str(tmp_path / "trained"), "--output", str(tmp_path / "cmp")], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert compare.returncode == 0, compare.stdout[-3000:] + compare.stderr[-3000:]
    for row in ("| arithmetic/basic_arithmetic |", "| external/gsm8k |", "| external/math |", "| external |"):
        assert re.search(re.escape(row) + r" [\d.]+ \| [\d.]+ \| [+-][\d.]+ \| \[[+-][\d.]+, [+-][\d.]+\] \| "
                         r"\d+ \(\d+\) \|", compare.stdout), row  # items (questions)
    assert "  overall (without external) " in compare.stdout  # benchmarks inform; the overall row is Reasoning Gym's


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_checkpoint_missing_a_shard_is_refused_before_ray_with_a_command_that_works(trained, tiny_run, tmp_path):
    """The fixture's checkpoints copied and damaged as a partial copy leaves them (step 3's model shard gone): the
    launch refuses before Ray starts, names the file, and its command resumes from step 2 (run here to the point
    where it would train: with 2 steps asked, the experiment is finished at step 2 and exits 0, no Ray)."""
    fixture_dir, _, _ = trained
    device = "cpu" if "cpu" in fixture_dir.name else "cuda"
    ckpt = tmp_path / "ckpt"
    shutil.copytree(fixture_dir / "ckpt", ckpt)
    (ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt").unlink()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = ["training/train_grpo.py", "--config-name", "quickstart", *tiny_run, *NOISY, f"trainer.device={device}",
           "trainer.total_training_steps=4", f"trainer.default_local_dir={ckpt}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    refused = subprocess.run([sys.executable, *cmd], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    output = refused.stdout + refused.stderr
    assert refused.returncode == 2 and "starting Ray" not in output, output[-3000:]
    assert f"{ckpt / 'global_step_3'} is damaged" in output and "missing: actor/model_world_size_1_rank_0.pt" in output
    command = output.split("resume from the last complete step, global_step_2: ")[1].splitlines()[0]
    assert command.endswith(f"trainer.resume_mode=resume_path trainer.resume_from_path={ckpt / 'global_step_2'}")
    args = [arg.replace("trainer.total_training_steps=4", "trainer.total_training_steps=2")
            for arg in shlex.split(command)[1:]]
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "already finished at step 2" in done.stdout, (done.stdout + done.stderr)[-3000:]


EVAL = ["--eval-config", "configs/eval/smoke.yaml", "--eval-backend", "hf", "--eval-override", "suite.size=2",
        "--eval-override", "suite.composites.mixed.size=2", "--eval-override", "sampling.n=1",
        "--eval-override", "sampling.max_tokens=8", "--eval-override", "pass_k=[1]"]


def pipeline(run_dir: Path, tiny_run: list[str], model: Path, device: str, *extra: str) -> str:
    """`python -m training.pipeline` on the fixture's config (3 steps, as trained); returns its console (exit 0)."""
    cmd = [sys.executable, "-m", "training.pipeline", "--config-name", "quickstart", "--run-dir", str(run_dir), *EVAL,
           *extra, *tiny_run, *NOISY, "trainer.total_training_steps=3", "trainer.save_freq=3",
           # the fixture's model, which the moved cache below would rebuild
           f"trainer.device={device}", f"actor_rollout_ref.model.path={model}"]
    # the evaluation cache (base results) in the test's own folder
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RG_GRPO_CACHE=str(run_dir.parent / "cache"))
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_pipeline_takes_a_trained_run_through_every_stage_and_skips_what_is_done(trained, tiny_run,
                                                                                tiny_model_dir, tmp_path):
    """`python -m training.pipeline` (training/report/pipeline.py) on the fixture's run: its train stage runs
    train_grpo.py on the run folder's checkpoints, which hold the fixture's finished run (copied: the training itself
    is the fixture's, a launch costs two minutes of CI), then export, both evaluations, the comparison, the summary
    PNG and the one-sentence verdict; a rerun skips every stage; `--trained` (what `make quickstart` runs) uses an
    existing run and the cached base results."""
    fixture_dir, _, _ = trained
    device = "cpu" if "cpu" in fixture_dir.name else "cuda"
    run_dir = tmp_path / "run"
    shutil.copytree(fixture_dir / "ckpt", run_dir / "checkpoints")
    first = pipeline(run_dir, tiny_run, tiny_model_dir, device)
    for stage in ("train", "export", "eval-base", "eval-trained", "compare"):
        assert re.search(f"\\[pipeline\\] {stage}: finished( beside training)? in", first), stage
        assert (run_dir / "stages" / f"{stage}.json").is_file()
    # training's own console lines are shown; a finished run launches nothing and writes no new scoring.json, so
    # the base model is evaluated after it, not beside it (tests/training/report/test_pipeline_beside.py: beside)
    assert "[resume] " in first and "started beside" not in first
    assert "already finished at step 3" in (run_dir / "logs" / "train.log").read_text()  # our checkpoints, not fresh
    assert (run_dir / "model" / "config.json").is_file()
    for side in ("base", "trained"):
        assert json.loads((run_dir / "eval" / side / "results.json").read_text())
    compare = run_dir / "eval" / "compare"
    assert any(compare.glob("*.md")) and any(compare.glob("*.png"))
    # both sides scored as the quickstart trains (its env.reward, via --from-run), and the verdict printed
    for side in ("base", "trained"):
        run = json.loads((run_dir / "eval" / side / "results.json").read_text())["run"]
        assert run["reward"]["answer_fallback"] == "last_number" and run["reward"]["partial_credit"] is True
        assert run["system_prompt"].startswith("Answer with the final result only")
    assert "[pipeline] held-out evaluation, base vs trained (step 3)" in first
    assert "  overall " in first and "resolved" in first
    # the console gives the verdict in one sentence (under "Not resolved", what it means and the command to try
    # next follow it); summary.png draws it beside the validation curve
    last = [line for line in first.splitlines() if line.startswith("[pipeline] verdict: ")][-1]
    assert last.count(". ") == 0 and "accuracy went from" in last
    # under "Not resolved" the advice follows, except where no task is free of an answer prior (no steps would tell)
    if last.startswith("[pipeline] verdict: Not resolved") and "skill cannot be told" not in last:
        assert "[pipeline] what it means: Not resolved means" in first
        assert "[pipeline] try next: " in first and "trainer.total_training_steps=6" in first
    assert (run_dir / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = pipeline(run_dir, tiny_run, tiny_model_dir, device)
    assert all(f"[pipeline] {stage}: done earlier" in again
               for stage in ("train", "export", "eval-base", "eval-trained", "compare"))
    # an existing run (--trained, as `make quickstart` does): no training, the base model's results from the cache
    other = pipeline(tmp_path / "other", tiny_run, tiny_model_dir, device, "--trained", str(run_dir / "checkpoints"))
    assert "[pipeline] train" not in other and "[pipeline] compare: finished" in other
    assert "(hit)" in (tmp_path / "other" / "logs" / "eval-base.log").read_text()
