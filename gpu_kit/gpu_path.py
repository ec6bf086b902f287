"""The GPU path's stages, in order: each one a command a user would type (training/train_grpo.py,
utils/load_fsdp_to_hf.py, evaluation/evaluate_model.py, pytest), so the kit tests what users run.

a  the machine (image); the actor's attention and log-prob paths timed at the presets' shapes (gpu_kit/actor_bench.py:
   the image's torch and transformers, so the first call measures them); the kit's install (core, then the optional
   kernels), the kit's venv
b  2 GRPO steps + a checkpoint, then a resumed process for step 3, on the tiny model; then SmolLM2-135M: 4 timed
   steps at the quickstart's GPU sizes + a checkpoint, and a resumed process that validates and takes step 5
c  the SmolLM2 checkpoint exported to Hugging Face, and the vLLM evaluator on the export
d  the timing: the SmolLM2 run's phases, generation tokens/s and launch -> first rollout (from b3), against vLLM
   alone on the same prompts with the same sampling
g  speed at the sizes people train (issue 46): SmolLM2-135M and the Qwen2.5-1.5B / 0.5B architectures with random
   weights (`random:` model paths), every response to its limit, 1 + 3 timed steps, no checkpoint; the update's
   skip on and off (g4); sync against async mode with thinking-length responses at the Qwen3-1.7B shape (g5)
f  make quickstart's job (training.pipeline: train, export, the vLLM evaluator on base and trained, the verdict),
   each phase timed: run before e, whose tests take minutes
e  the tests marked `gpu`
The vLLM rollout on CUDA is the configs' own (`actor_rollout_ref.rollout.name: vllm` in configs/base/grpo.yaml).
"""

from __future__ import annotations

from pathlib import Path

from gpu_kit import results
from gpu_kit.install import ABSENT, DAMAGED, WAITING
from gpu_kit.run import Stage

REPO = Path(__file__).resolve().parents[1]
# tests/conftest.py's TINY_RUN: 2 prompts x 4 samples, 24-token responses, no validation
TINY = ["model=tiny", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "data.max_prompt_length=768",
        "data.max_response_length=24", "env.validation_size=4", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "trainer.logger=[console]"]
# configs/quickstart.yaml's GPU sizes, said explicitly: 16 prompts x 8 samples, 256-token responses
QUICKSTART_GPU = ["data.train_batch_size=16", "actor_rollout_ref.rollout.n=8", "data.max_response_length=256"]
# issue 46: a published architecture with random weights (the `random:` model path, utils.offline_models), every
# response run to its limit, so that speed does not depend on what a model says; 1 warm-up step + 3 timed. GRPO as
# configs/base/grpo.yaml trains the presets (a reference model for the KL loss, activation recomputation), with two
# updates a step: the settings of the GPU steps measured on 2026-11-26, which the quickstart has since dropped
SPEED = ["actor_rollout_ref.rollout.ignore_eos=true", "trainer.val_before_train=false", "trainer.test_freq=-1",
         "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
         "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.model.enable_gradient_checkpointing=true"]
# the update's zero-advantage skip (training/zero_advantage/rules.py) at the 1.5B shape, on and off: no KL loss and
# no entropy bonus (the skip's condition), one update a step, half the groups flat by a speed-only reward
SKIP = ["actor_rollout_ref.rollout.ignore_eos=true", "trainer.val_before_train=false", "trainer.test_freq=-1",
        "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.ppo_mini_batch_size=16",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true", "model=qwen2.5-1.5b",
        "actor_rollout_ref.model.path=random:qwen2.5-1.5b", "data.max_response_length=1024",
        "reward.custom_reward_function.path=gpu_kit/half_flat_reward.py",
        "reward.custom_reward_function.name=compute_score"]
# issue 71: verl's sync and colocated async trainers at the Qwen3-1.7B shape (random weights) with thinking-length
# responses: each request runs to a length drawn from a long tail (training/trainer/thinking_lengths.py: 15% to
# the 4,096 limit, the rest log-uniform from 256), the same in both arms; one update a step, no KL loss, no entropy
# bonus, half the groups flat (the update's skip as the quickstart trains); 16 prompts x 8 samples, 1 + 3 timed steps
THINKING = ["actor_rollout_ref.rollout.ignore_eos=true", "actor_rollout_ref.rollout.agent.default_agent_loop="
            "rg_thinking_lengths", "trainer.val_before_train=false", "trainer.test_freq=-1",
            "data.train_batch_size=16", "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.model.enable_gradient_checkpointing=true",
            "model=qwen3-1.7b", "actor_rollout_ref.model.path=random:qwen3-1.7b", "data.max_response_length=4096",
            "reward.custom_reward_function.path=gpu_kit/half_flat_reward.py",
            "reward.custom_reward_function.name=compute_score"]
# after a training stage that failed or was stopped: Ray's node agents outlive a killed driver (docs/faults.md).
# It stops every Ray process of the machine: the kit's machine runs nothing else.
RAY_STOP = ["{kit}", "-m", "ray.scripts.scripts", "stop", "--force"]
STEP_MARK = r"\bstep:\d+ - "


def train_stage(stage_id: str, title: str, run: str, overrides: list[str], steps: int, sequences: int,
                estimate_s: int, needs: tuple[str, ...] = ("install_core",), save: bool = True) -> Stage:
    """`python training/train_grpo.py --config-name quickstart ...` on CUDA into OUT/runs/<run>, a checkpoint at
    the last step (unless `save` is off). A first run (needing no other training stage) starts in an empty folder,
    also when a cut-off attempt left a checkpoint there; a resume continues from what its first run saved."""
    run_dir = "{out}/runs/" + run
    overrides = [*overrides, "trainer.device=cuda", f"trainer.total_training_steps={steps}",
                 f"trainer.save_freq={steps if save else -1}", f"trainer.default_local_dir={run_dir}/ckpt",
                 f"trainer.rollout_data_dir={run_dir}/rollouts", f"hydra.run.dir={run_dir}/hydra",
                 "env.console=verbose"]
    return Stage(stage_id, title, ["{kit}", "training/train_grpo.py", "--config-name", "quickstart", *overrides],
                 estimate_s=estimate_s, needs=needs, compose=("quickstart", overrides), marks=STEP_MARK,
                 cleanup=RAY_STOP, collect=results.train_run(f"runs/{run}", sequences),
                 fresh=run_dir if needs == ("install_core",) else None)


def quickstart_stage(stage_id: str, title: str, seed: int, estimate_s: int = 480) -> Stage:
    """`python -m training.pipeline --config-name quickstart` on CUDA into OUT/runs/quickstart[-seedN]: train, export,
    the vLLM evaluator (greedy, bf16 as stage c2's, which ran) on base and trained, the comparison and its verdict."""
    run = "quickstart" if seed == 0 else f"quickstart-seed{seed}"
    overrides = ["trainer.device=cuda", *([f"env.seed={seed}"] if seed else [])]
    return Stage(stage_id, title,
                 ["{kit}", "-m", "training.pipeline", "--config-name", "quickstart", "--run-dir", f"{{out}}/runs/{run}",
                  "--eval-backend", "vllm", "--eval-override", "decoding=[greedy]", "--eval-override",
                  "model.dtype=bfloat16", *overrides],
                 estimate_s=estimate_s, needs=("install_core",), compose=("quickstart", overrides), cleanup=RAY_STOP,
                 check=["{kit}", "-m", "training.pipeline", "--help"], collect=results.pipeline_run(f"runs/{run}"))


def gpu_test_files() -> list[str]:
    """Test files that mark tests `gpu` (pytest -m gpu selects within them; collecting all files costs minutes)."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in p.read_text())


def build_stages() -> list[Stage]:
    machine = ["{image}", "-m", "gpu_kit.machine", "--out", "{out}/a_machine"]
    actor_bench = ["{image}", "-m", "gpu_kit.actor_bench"]
    install = ["{image}", "-m", "gpu_kit.install", "install", "--tiers"]
    smollm2 = [*QUICKSTART_GPU, "trainer.val_before_train=false", "trainer.test_freq=-1"]
    tests = gpu_test_files()
    pytest = ["{kit}", "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider"]
    return [
        Stage("a_machine", "the machine and the image: nvidia-smi, torch.cuda, versions, the image's freeze",
              machine, estimate_s=30, check=machine, collect=results.json_file("a_machine/machine.json")),
        Stage("a_actor_bench", "the actor's forward + backward and log-probs, path against path, at the presets' "
              "shapes (random weights; the image's Python: nothing carried, nothing installed)",
              [*actor_bench, "--out", "{out}/a_actor_bench"], estimate_s=420,
              check=[*actor_bench, "--out", "{out}/a_actor_bench", "--dry-run", "--steps", "1", "--models",
                     "smollm2-135m"], collect=results.json_file("a_actor_bench/actor_bench.json")),
        Stage("install_core", "reassemble the core tier's parts, check the sums, install into .venv-kit",
              [*install, "core", "--report", "{out}/install_core/report.json"], estimate_s=240,
              exit_codes={WAITING: "waiting", DAMAGED: "damaged"}, check=["{image}", "-m", "gpu_kit.install", "status"],
              collect=results.json_file("install_core/report.json")),
        Stage("install_kernels", "the optional kernel tier (flashinfer, cutlass-dsl, tilelang, ...) when its parts "
              "are here", [*install, "kernels", "--report", "{out}/install_kernels/report.json"], estimate_s=240,
              needs=("install_core",), exit_codes={WAITING: "waiting", ABSENT: "absent", DAMAGED: "damaged"},
              collect=results.json_file("install_kernels/report.json")),
        Stage("a_kit_env", "the kit's venv: versions and import times of torch, verl, ray, vllm, flash-attn",
              ["{kit}", "-m", "gpu_kit.machine", "--kit", "--out", "{out}/a_kit_env"], estimate_s=90,
              needs=("install_core",), check=["{kit}", "-m", "gpu_kit.machine", "--help"],
              collect=results.json_file("a_kit_env/machine.json")),
        train_stage("b1_tiny_train", "tiny model: 2 GRPO steps on CUDA with the vLLM rollout, a checkpoint", "tiny",
                    TINY, 2, 8, 240),
        train_stage("b2_tiny_resume", "tiny model: a new process resumes from the checkpoint for step 3", "tiny",
                    TINY, 3, 8, 240, needs=("b1_tiny_train",)),
        train_stage("b3_smollm2_train", "SmolLM2-135M: 4 timed steps of 16 prompts x 8 samples x 256 tokens, a "
                    "checkpoint", "smollm2", smollm2, 4, 128, 360),
        train_stage("b4_smollm2_resume", "SmolLM2-135M: a new process resumes, validates (48 items), takes step 5",
                    "smollm2", [*QUICKSTART_GPU, "trainer.val_before_train=true", "trainer.test_freq=-1"], 5, 128,
                    300, needs=("b3_smollm2_train",)),
        Stage("c1_export", "export the SmolLM2 checkpoint to Hugging Face (bf16, verified)",
              ["{kit}", "utils/load_fsdp_to_hf.py", "{out}/runs/smollm2/ckpt", "{out}/export/smollm2", "--dtype",
               "bf16", "--verify", "--force"], estimate_s=120, needs=("b3_smollm2_train",),
              check=["{kit}", "utils/load_fsdp_to_hf.py", "--help"], collect=results.exported("export/smollm2")),
        Stage("c2_eval_vllm", "the vLLM evaluator on the export (quickstart's held-out suite, scored as trained)",
              ["{kit}", "evaluation/evaluate_model.py", "--config", "configs/eval/quickstart.yaml", "--from-run",
               "{out}/runs/smollm2/ckpt", "--model", "{out}/export/smollm2", "--backend", "vllm", "--output",
               "{out}/eval/smollm2", "model.dtype=bfloat16"], estimate_s=300, needs=("c1_export",),
              check=["{kit}", "evaluation/evaluate_model.py", "--help"], collect=results.evaluation("eval/smollm2")),
        Stage("d_vllm_alone", "vLLM alone on b3's prompts (its steps 2-4), same sampling: tokens/s to compare",
              ["{kit}", "-m", "gpu_kit.vllm_alone", "--run", "{out}/runs/smollm2", "--out", "{out}/d_vllm_alone",
               "--batches", "4", "--train-record", "{out}/stages/b3_smollm2_train.json"], estimate_s=240,
              needs=("b3_smollm2_train",),
              check=["{kit}", "-m", "gpu_kit.vllm_alone", "--help"],
              collect=results.json_file("d_vllm_alone/vllm_alone.json")),
        train_stage("g1_speed_smollm2", "speed, SmolLM2-135M architecture, random weights: 16 x 8 x 256 tokens "
                    "(ignore_eos), 1 + 3 timed steps", "speed-smollm2",
                    [*SPEED, "model=smollm2-135m", "actor_rollout_ref.model.path=random:smollm2-135m",
                     "data.max_response_length=256"], 4, 128, 360, save=False),
        train_stage("g2_speed_qwen15b", "speed, Qwen2.5-1.5B architecture, random weights: 16 x 8 x 1024 tokens "
                    "(ignore_eos), 1 + 3 timed steps", "speed-qwen15b",
                    [*SPEED, "model=qwen2.5-1.5b", "actor_rollout_ref.model.path=random:qwen2.5-1.5b",
                     "data.max_response_length=1024"], 4, 128, 540, save=False),
        train_stage("g3_speed_qwen05b", "speed, Qwen2.5-0.5B architecture, random weights: 16 x 8 x 1024 tokens "
                    "(ignore_eos), 1 + 3 timed steps", "speed-qwen05b",
                    [*SPEED, "model=qwen2.5-0.5b", "actor_rollout_ref.model.path=random:qwen2.5-0.5b",
                     "data.max_response_length=1024"], 4, 128, 480, save=False),
        train_stage("g4_skip_qwen15b", "the update's zero-advantage skip, Qwen2.5-1.5B architecture, random weights: "
                    "16 x 8 x 1024 tokens, half the groups flat (gpu_kit/half_flat_reward.py), 1 + 3 timed steps",
                    "skip-qwen15b", SKIP, 4, 128, 480, save=False),
        train_stage("g4_noskip_qwen15b", "g4_skip_qwen15b with env.skip_zero_advantage=false: every sequence updated",
                    "noskip-qwen15b", [*SKIP, "env.skip_zero_advantage=false"], 4, 128, 540, save=False),
        train_stage("g5_sync_qwen3", "verl's sync trainer, Qwen3-1.7B architecture, random weights: 16 x 8, "
                    "thinking-length responses (15% to 4,096 tokens, training/trainer/thinking_lengths.py), "
                    "1 + 3 timed steps",
                    "sync-qwen3", [*THINKING, "trainer.v1.trainer_mode=reasoning_gym"], 4, 128, 600, save=False),
        train_stage("g5_async_qwen3", "g5_sync_qwen3 in async mode (verl's colocated async trainer, partial "
                    "rollout): the same prompts and lengths", "async-qwen3",
                    [*THINKING, "trainer.v1.trainer_mode=reasoning_gym_async"], 4, 128, 600, save=False),
        quickstart_stage("f_quickstart", "make quickstart's job on CUDA, timed: 20 steps, export, the vLLM "
                         "evaluator on base and trained (greedy, the base cached), the comparison and its verdict", 0),
        # issue 47 item 2: a recipe is judged on 3 seeds or more; the base model's evaluation is cached by the first
        *(quickstart_stage(f"f_quickstart_seed{seed}", f"f_quickstart's job with env.seed={seed} (training and the "
                           "trained model's evaluation; the base's is cached)", seed, estimate_s=420)
          for seed in (1, 2)),
        Stage("e_gpu_tests", f"pytest -m gpu ({', '.join(tests)})",
              [*pytest, "--junitxml", "{out}/e_gpu_tests/junit.xml", *tests], estimate_s=480, needs=("install_core",),
              check=[*pytest, "--collect-only", "-q", *tests], cleanup=RAY_STOP,
              collect=results.junit("e_gpu_tests/junit.xml")),
    ]
