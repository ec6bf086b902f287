"""GRPO training on Reasoning Gym with verl.

    python training/train_grpo.py --config-name quickstart [hydra overrides]
    CUDA_VISIBLE_DEVICES=0,1 python training/train_grpo.py --config-name inter_algorithmic
    python training/train_grpo.py --config-name quickstart preflight=true     # CPU check of the whole data path

Configs are configs/NAME.yaml over verl's ppo_trainer. Before any worker starts, the config is resolved (offline
model folders, GPU count), checked (batch arithmetic, GPUs, model, task names, prompt lengths with the model's
tokenizer) and validated by verl. trainer.device=auto (default) trains on CUDA when torch can use a GPU and on the
CPU backend (training/cpu_backend) on a machine without NVIDIA GPUs; GPUs that torch cannot use stop the launch with
the fix (training/launch/devices.py). preflight=true runs the quick CPU check of the data path instead of training.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

LAUNCHED = time.time()  # the console counts start-up from here

# `python training/train_grpo.py` puts training/ first on sys.path, where our module names (config, data, metrics)
# would shadow real packages; the repository root is what belongs there.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from training.launch.checks import (  # noqa: E402
    ConfigProblem,
    batch_plan,
    check_config,
    prompt_length_problems,
    raise_if_problems,
    sample_prompt_lengths,
)
from training.launch.config import CONFIG_DIR, resolve_config, validate_with_verl, visible_gpu_count  # noqa: E402
from training.launch.console import Terminated, TrainingFailed, route_logs, say_stop, where_logs_are  # noqa: E402
from training.launch.devices import device_problem, probe_host, probe_torch  # noqa: E402
from training.launch.hardware import (  # noqa: E402
    apply_cpu_backend,
    apply_cpu_overrides,
    choose_attention,
    choose_vllm_sampler,
    cpu_rollout_problems,
    gpu_stack_problems,
    resolve_device,
    size_ray,
)
from training.launch.memory import apply_gpu_memory  # noqa: E402
from training.launch.resume import AlreadyFinished, check_resume  # noqa: E402
from training.launch.startup import apply_startup_settings  # noqa: E402
from training.zero_advantage.rules import load_skip_engine, skip_line, skip_refusal  # noqa: E402


def load_tokenizer(cfg: DictConfig):
    """Returns the model's tokenizer, or raises ConfigProblem saying which path to fix."""
    from transformers import AutoTokenizer

    path = cfg.actor_rollout_ref.model.get("tokenizer_path") or cfg.actor_rollout_ref.model.path
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as err:
        raise ConfigProblem(f"cannot load the tokenizer of actor_rollout_ref.model.path={path}: {err}\n"
                            "  set it to a local model folder, or a hub id with network access") from err


def config_problems(cfg: DictConfig, visible_gpus: int) -> list[str]:
    """Returns every problem of a resolved config: ours, verl's validate_config, and the reward options."""
    from envs.reward import RewardOptions
    from training.trainer.activity import WatchdogSettings

    problems = check_config(cfg, visible_gpus)
    try:
        validate_with_verl(cfg)
    except (AssertionError, ValueError) as err:
        problems.append(f"verl's validate_config: {err}")
    try:
        RewardOptions.from_kwargs(dict(cfg.env.reward or {}))
    except (TypeError, ValueError) as err:
        problems.append(f"env.reward: {err}")
    try:
        WatchdogSettings.from_config(cfg)
    except (TypeError, ValueError) as err:
        problems.append(str(err))
    return problems


def check_prompts(cfg: DictConfig, tokenizer) -> None:
    """Renders a sample of the stream with the model's tokenizer; raises if a task cannot fit, notes filtering."""
    limit = int(cfg.data.max_prompt_length)
    lengths = sample_prompt_lengths(cfg, tokenizer, int(cfg.env.preflight.length_check_items))
    raise_if_problems(prompt_length_problems(lengths, limit, str(cfg.env.on_long_prompt)), "prompt length check")
    for task, values in sorted(lengths.items()):
        over = sum(v > limit for v in values)
        if over:
            print(f"[check] note: {over} of {len(values)} sampled {task} prompts exceed data.max_prompt_length={limit} "
                  f"and will be skipped (env.on_long_prompt=filter); longest {max(values)} tokens")
    print(f"[check] longest sampled prompt per task (tokens): "
          f"{ {task: max(v) for task, v in sorted(lengths.items())} }; data.max_prompt_length={limit}")


def command_line_keys() -> set[str]:
    """Returns the config keys given as hydra overrides on the command line (empty outside a hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    return {o.split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task}


def prepare(cfg: DictConfig, visible_gpus: int):
    """Resolves and checks `cfg` (raises ConfigProblem with every problem, AlreadyFinished when the experiment's
    checkpoint is at trainer.total_training_steps); returns the tokenizer.

    Reads trainer.device (auto: CUDA when a GPU is visible, else the CPU backend, whose keys are set here) and
    env.gpu_memory (the model preset's settings for a smaller card, training/launch/memory.py)."""
    try:
        device = resolve_device(cfg, visible_gpus)
    except ValueError as err:
        raise ConfigProblem(str(err)) from err
    try:  # the card's size first, the CPU's sizes over it
        size, fitted = apply_gpu_memory(cfg, command_line_keys())
    except ValueError as err:
        raise ConfigProblem(str(err)) from err
    if fitted:
        print(f"[check] GPU memory: env.gpu_memory={cfg.env.gpu_memory} applies the model preset's settings for "
              f"{size} GB: {', '.join(f'{k}={v}' for k, v in fitted.items())}")
    if device == "cpu":
        try:
            overrides = apply_cpu_overrides(cfg, command_line_keys())
        except ValueError as err:
            raise ConfigProblem(str(err)) from err
        if overrides:
            print(f"[check] CPU backend: env.on_cpu sets {', '.join(f'{k}={v}' for k, v in overrides.items())}")
    resolve_config(cfg, gpu_count=visible_gpus if device == "cuda" else 1)
    if device == "cpu":
        apply_cpu_backend(cfg)
    else:
        attention = choose_attention(cfg)
        layout = "packed" if cfg.actor_rollout_ref.model.use_remove_padding else "padded (packing needs flash-attn)"
        print(f"[check] attention: {attention}, {layout} micro-batches (flash-attn is optional: make install-flash-attn)")
        if sampler := choose_vllm_sampler(cfg):
            print(f"[check] vLLM sampler: {sampler}")
        if skip_refusal(cfg) is None:  # the CUDA engine with the skip, in every worker (the CPU backend's has it)
            load_skip_engine(cfg)
    try:
        route_logs(cfg)
        apply_startup_settings(cfg)
    except ValueError as err:
        raise ConfigProblem(str(err)) from err
    problems = config_problems(cfg, visible_gpus if device == "cuda" else 0) + size_ray(cfg)
    if not cfg.get("preflight", False):
        problems += gpu_stack_problems(cfg) if device == "cuda" else cpu_rollout_problems(cfg)
    raise_if_problems(problems, "config check")
    # training/launch/resume.py: finished experiment -> AlreadyFinished; checkpoint of another mix/model/seed -> ConfigProblem
    check_resume(cfg, launching=not cfg.get("preflight", False))
    tokenizer = load_tokenizer(cfg)
    check_prompts(cfg, tokenizer)
    print(f"[check] device: {device}; batch: {batch_plan(cfg).describe()}")
    print(f"[check] reward: {reward_line(cfg)}")
    print(f"[check] {skip_line(cfg)}")
    return tokenizer



def reward_line(cfg: DictConfig) -> str:
    """What the reward reads and gives (env.reward), and the chat template's options when any are set."""
    from envs.reward import RewardOptions
    from training.trainer.data import chat_template_kwargs

    options = RewardOptions.from_kwargs(OmegaConf.to_container(cfg.env.reward, resolve=True) or {})
    template = chat_template_kwargs(cfg)
    return options.describe() + (f"; chat template with {template}" if template else "")


def launch(cfg: DictConfig) -> None:
    """Hands the checked config to verl: Ray, our TaskRunner (which imports our trainer), fit. The console shows
    our lines only (env.console=quiet, training/launch/console.py); raises TrainingFailed when a worker fails."""
    from training.launch.guardian import start as start_guardian
    from training.launch.hardware import activate_cpu_backend
    from training.launch.stops import AfterRayInit, stops_and_console
    from training.report.startup import write_launch

    print(f"[train] starting Ray and verl's workers; their output: {cfg.env.logs_dir}", flush=True)
    write_launch(Path(str(cfg.env.logs_dir)), LAUNCHED)  # `python -m training.report.startup RUN` reads it
    start_guardian(Path(str(cfg.env.logs_dir)))  # names a hung trainer; cleans up whatever the run leaves behind
    # Ray's GCS keeps up to 100k task events by default and grew without end over a long run (bench_soak: +47% from
    # step 20 to 200, +2.2% with this bound); the local cluster Ray starts here reads it from the environment.
    os.environ.setdefault("RAY_task_events_max_num_task_in_gcs", "1000")
    interrupted = []
    with stops_and_console(cfg, LAUNCHED, interrupted) as on_ray_ready:
        if cfg.trainer.device == "cpu":
            activate_cpu_backend(cfg)  # before verl is imported, so that it never guesses another platform
        from verl.trainer.main_ppo import run_ppo
        from verl.utils.device import auto_set_device

        from training.trainer.progress import PROGRESS_FILE, append_event
        from training.trainer.runner import ReasoningGymTaskRunner

        auto_set_device(cfg)
        for attempt in range(1, RAY_START_TRIES + 1):
            try:
                run_ppo(cfg, task_runner_class=AfterRayInit(ReasoningGymTaskRunner, on_ray_ready))
                break
            except Exception as err:  # noqa: BLE001 - only Ray's start-up timeout is tried again, before Ray is up
                if attempt == RAY_START_TRIES or not ray_did_not_start(err):
                    raise
                append_event(Path(str(cfg.env.logs_dir)) / PROGRESS_FILE, {"kind": "recovered", "text": (
                    "Ray's node did not start: its raylet waits a fixed 15 s for its dashboard agent, which a busy "
                    "machine can take longer to start (ray-project/ray#65983); starting Ray again")})
    if interrupted:  # a Ctrl-C that some library caught on its way up still ends the run as interrupted
        raise KeyboardInterrupt


RAY_START_TRIES = 2


def ray_did_not_start(err: BaseException) -> bool:
    """True when `ray.init` gave up on the local node before Ray was up: Ray 2.60's raylet aborts when its dashboard
    agent has not written its ports within 15 s (seen in CI on 2 busy cores: the agent was ready after 19 s)."""
    import ray

    return "The current node timed out during startup" in str(err) and not ray.is_initialized()


def run(cfg: DictConfig) -> int:
    """Checks, then the preflight (preflight=true) or training on CUDA or the CPU backend. Returns the exit code."""
    from training.launch.cluster import cluster_address
    from training.launch.ray_auth import auth_problem, forward_auth_mode

    # A cluster that refuses this driver's token is named first, in one line (Ray itself would retry for 26 s and
    # then say that no cluster answers).
    if cluster_address(cfg) and (refused := auth_problem(cluster_address(cfg))):
        print(f"[check] {refused}", file=sys.stderr)
        return 2
    forward_auth_mode(cfg)
    torch_cuda = probe_torch()
    # A launch never trains on another device than asked without saying so. A run that joins a Ray cluster is
    # checked against the cluster's resources instead: its driver may sit on a node without GPUs.
    if not cfg.get("preflight", False) and not cluster_address(cfg):
        problem = device_problem(str(cfg.trainer.get("device", "auto")), probe_host(), torch_cuda)
        if problem:
            print(f"[check] {problem}", file=sys.stderr)
            return 2
    visible = visible_gpu_count() if torch_cuda.usable else 0
    try:
        tokenizer = prepare(cfg, visible)
    except ConfigProblem as err:
        print(f"[check] {err}", file=sys.stderr)
        return 2
    except AlreadyFinished as done:  # nothing to train: say so and exit 0 without starting Ray
        print(f"[resume] {done}")
        return 0
    if cfg.get("preflight", False):
        from training.launch.preflight import run_preflight

        return run_preflight(cfg, tokenizer, "preflight=true")
    from envs.run_scoring import write_scoring

    write_scoring(cfg)  # how this run scores and samples, for `evaluate_model.py --from-run`
    try:
        launch(cfg)
    except TrainingFailed as err:  # a fault during training: what died or hung, where the logs are, how to resume
        from training.trainer.faults import explain

        if cfg.env.get("console", "quiet") == "verbose":
            print(err, file=sys.stderr)  # the error's last lines; quiet leaves them (Ray's tracebacks) in error.log
        print(explain(err.__cause__ or err, str(cfg.trainer.default_local_dir), logs=Path(str(cfg.env.logs_dir)),
                      worker_log=err.worker_log), file=sys.stderr)
        print(where_logs_are(cfg), file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (Terminated): asked from outside, not a failure
        sys.stderr.flush()
        say_stop(stop)  # said already where the stop passed the console (before Ray's shutdown)
        return 143 if isinstance(stop, Terminated) else 130
    print_report(cfg)
    record_startup(cfg)
    print(where_logs_are(cfg))
    return 0


def record_startup(cfg: DictConfig) -> None:
    """Writes the run's start-up breakdown to its logs (training/report/startup.py); a failure is said, not raised."""
    from training.report.startup import write_startup

    try:
        write_startup(Path(str(cfg.env.logs_dir)))
    except Exception as err:  # noqa: BLE001 - the finished run's exit code stays 0
        print(f"[report] no start-up breakdown: {type(err).__name__}: {err}", file=sys.stderr)


def print_report(cfg: DictConfig) -> None:
    """After training: prints the run's table (training/report/report.py) and where its files are. A report that fails
    is said, never raised: the training run is done. Reads trainer.default_local_dir, env.dump.dir and
    trainer.validation_data_dir."""
    from training.report.report import write_report
    from training.trainer.generations import DumpSettings

    try:
        report = write_report(cfg.trainer.default_local_dir, DumpSettings.from_config(cfg).directory,
                              cfg.trainer.get("validation_data_dir"))
    except Exception as err:  # noqa: BLE001 - any failure here must leave the finished run's exit code alone
        print(f"[report] no training report: {type(err).__name__}: {err}", file=sys.stderr)
        return
    quiet = cfg.env.get("console", "quiet") == "quiet"  # the step lines stood for the per-step table
    print(report.summary if quiet else report.text)
    print(f"[report] {'per-step table' if quiet else 'table'}: {report.markdown}"
          + (f"; curves: {report.png}" if report.png else ""))


@hydra.main(config_path=str(CONFIG_DIR), config_name="quickstart", version_base="1.3")
def main(cfg: DictConfig) -> None:
    code = run(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    main()
