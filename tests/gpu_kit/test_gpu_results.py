"""What a GPU stage's record says (gpu_kit/results.py, gpu_kit/summary.py): verl's step lines and metrics file read
into phases, generation speed and launch -> first rollout; the quickstart's and the evaluator's stages reported per
phase and mode; the summary rows the loan's first export carries."""

import json

from gpu_kit import results
from gpu_kit.summary import headline


def test_verl_step_lines_give_phases_generation_speed_and_launch_to_first_rollout(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("noise\n(TaskRunner pid=1) step:1 - timing_s/gen:np.float64(2.0) - timing_s/step:5.0 - "
                   "response_length/mean:100.0 - env/reward:0.25 - actor/lr:1e-6\n"
                   "step:2 - timing_s/gen:1.0 - timing_s/step:3.0 - response_length/mean:50.0\n")
    (tmp_path / "runs" / "r" / "ckpt").mkdir(parents=True)
    (tmp_path / "runs" / "r" / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2\n")
    found = results.train_run("runs/r", sequences=8)(tmp_path / "stage", log, {"step:1": 65.0, "step:2": 68.5})
    assert found["steps"][1] == {"timing_s/gen": 2.0, "timing_s/step": 5.0, "response_length/mean": 100.0,
                                 "env/reward": 0.25, "gen_tokens_per_s": 400.0}
    assert found["steps"][2]["gen_tokens_per_s"] == 400.0 and found["checkpoint_step"] == 2
    assert found["launch_to_first_rollout_s"] == 60.0 and found["launch_to_step_end_s"] == 65.0
    assert "startup" not in found  # a run from before the driver wrote its start-up breakdown


def test_the_summary_row_of_a_training_stage_gives_its_start_up_marks():
    from gpu_kit.summary import headline

    startup = [{"seconds": 0.0, "what": "launch (the driver's python starts)"},
               {"seconds": 9.8, "what": "Ray started"},
               {"seconds": 30.1, "what": "worker up: WorkerDict (pid 3)"},
               {"seconds": 31.0, "what": "worker up: WorkerDict (pid 4)"},
               {"seconds": 50.0, "what": "workers ready (the trainer's first line)"},
               {"seconds": 61.0, "what": "vLLM vLLMHttpServer (pid 5): torch.compile took 7.33 s in total"},
               {"seconds": 64.0, "what": "vLLM vLLMHttpServer (pid 5): init engine (profile, create kv cache, "
                                         "warmup model) took 12.80 s"},
               {"seconds": 70.2, "what": "first rollout done (step 1's generation: 13.0 s)"}]
    record = {"results": {"steps": {"1": {"timing_s/step": 5.0}}, "startup": startup, "checkpoint_step": 1}}
    assert headline(record) == ("step 1: 5.0 s; start-up: Ray started 9.8 s, worker up: WorkerDict 30.1 s, "
                                "workers ready 50.0 s, init engine 64.0 s, first rollout done 70.2 s; checkpoint 1")


def test_a_runs_metrics_file_wins_over_its_console_lines(tmp_path):
    """Step 1's console line cut in two (Ray's log monitor does that to a ~4 KiB line): the metrics come from
    ckpt/logs/metrics.jsonl, whole; the marks still time the step lines."""
    from training.trainer.progress import ProgressTracking

    log = tmp_path / "log.txt"
    log.write_text("(TaskRunner pid=1) step:1 - timing_s/gen:np.float64(2.0) - timing_s/st\n"
                   "(TaskRunner pid=1) ep:5.0 - response_length/mean:100.0\n")
    logs = tmp_path / "runs" / "r" / "ckpt" / "logs"

    class Tracking:
        def log(self, data, step, backend=None):
            pass

    ProgressTracking(Tracking(), logs, total_steps=1).log(
        data={"timing_s/gen": 2.0, "timing_s/step": 5.0, "response_length/mean": 100.0, "env/reward": 0.25}, step=1)
    found = results.train_run("runs/r", sequences=8)(tmp_path / "stage", log, {"step:1": 65.0})
    assert found["steps"][1] == {"timing_s/gen": 2.0, "timing_s/step": 5.0, "response_length/mean": 100.0,
                                 "env/reward": 0.25, "gen_tokens_per_s": 400.0}
    assert found["launch_to_first_rollout_s"] == 60.0


def test_the_quickstart_stage_reports_each_phases_seconds_and_the_verdict(tmp_path):
    """Stage f_quickstart's record: the pipeline's stage records' seconds, the comparison's overall and beyond-prior
    rows, and the verdict sentence it printed."""
    run = tmp_path / "runs" / "quickstart"
    (run / "stages").mkdir(parents=True)
    for stage, seconds in (("train", 301.25), ("export", 12.0), ("eval-base", 40.0)):
        (run / "stages" / f"{stage}.json").write_text(json.dumps({"cmd": [], "key": {}, "seconds": seconds}))
    (run / "eval" / "compare" / "greedy").mkdir(parents=True)
    row = {"base": 0.3, "trained": 0.4, "paired_items": 400, "paired_delta": 0.1, "ci95": [0.05, 0.15],
           "verdict": "better (resolved)"}
    (run / "eval" / "compare" / "greedy" / "comparison.json").write_text(
        json.dumps({"overall": row, "beyond_prior": {**row, "tasks": ["in_mix/chain_sum"]}}))
    log = tmp_path / "log.txt"
    log.write_text("[pipeline] compare: finished in 3 s\n[pipeline] verdict: Training helped: on the tasks ...\n")
    # the training run's start-up breakdown, as train_grpo.py writes it when training ends (training/report/startup.py)
    from training.report.startup import stamp_seconds, write_startup

    logs = run / "checkpoints" / "logs"
    logs.mkdir(parents=True)
    ray_line = "2026-11-28 13:27:27,660\tINFO worker.py:2038 -- Started a local Ray instance.\n"
    (logs / "driver.log").write_text(ray_line)
    ready = {"kind": "ready", "step": 0, "time": stamp_seconds(ray_line) + 40.0}
    (logs / "progress.jsonl").write_text(json.dumps(ready) + "\n")
    write_startup(logs)
    found = results.pipeline_run("runs/quickstart")(tmp_path / "f_quickstart", log, {})
    assert found["startup"] == [{"seconds": 0.0, "what": "Ray started"},
                                {"seconds": 40.0, "what": "workers ready (the trainer's first line)"}]
    assert found["stage_seconds"] == {"eval-base": 40.0, "export": 12.0, "train": 301.2}
    assert found["to_verdict_s"] == 353.2 and found["verdict"] == "Training helped: on the tasks ..."
    assert found["comparisons"]["greedy"]["beyond_prior"] == row


def test_the_evaluator_stage_reports_each_modes_overall_accuracy_and_speed(tmp_path):
    """Stage c2's row gives the numbers of the evaluator's own results.json (its first GPU run gave an empty row)."""
    from evaluation.metrics import aggregate

    records = [{"item_id": f"t/{i}", "group": "in_mix", "task": "chain_sum", "task_key": "chain_sum",
                "accuracy": float(i % 2), "score": 0.5} for i in range(8)]
    for mode, rate in (("greedy", 93.8), ("sampled", 214.4)):
        (tmp_path / "eval" / mode).mkdir(parents=True)
        written = {**aggregate(records, [1], {"in_mix": "category"}, resamples=50), "run": {"samples_per_s": rate}}
        (tmp_path / "eval" / mode / "results.json").write_text(json.dumps(written))
    log = tmp_path / "log.txt"
    log.write_text("wrote results.json\n")
    found = results.evaluation("eval")(tmp_path / "stage", log, {})
    assert found["evaluations"]["greedy/results.json"]["accuracy"] == 0.5
    assert found["evaluations"]["sampled/results.json"]["samples"] == 8
    line = headline({"results": found})
    assert line.startswith("greedy: overall 0.500 [") and "8 samples, 93.8 samples/s; sampled: overall 0.500" in line
