"""training/report/startup.py: a run's start-up read back from the files a run writes (written here as the driver,
verl's workers, Ray and the trainer write them)."""

import json
import time

from training.report.startup import main, startup_events, write_launch, write_startup


def stamp(epoch: float) -> str:
    """A log line's timestamp as the loggers write it: local time, milliseconds after a comma."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) + f",{int(epoch % 1 * 1000):03d}"


def test_the_start_up_in_order_from_launch_to_the_first_step(tmp_path, capsys):
    logs = tmp_path / "logs"
    t0 = 1_795_872_430.25
    write_launch(logs, t0)
    record = json.loads((logs / "launch.json").read_text())
    assert record["launched"] == t0 and record["ray_starting"] >= t0  # "now": the moment Ray is about to start
    record["ray_starting"] = t0 + 10.0
    (logs / "launch.json").write_text(json.dumps(record))
    (logs / "driver.log").write_text(f"[{stamp(t0 + 12)}][verl.plugin][INFO] - Platform override\n"
                                     f"{stamp(t0 + 16.5)}\tINFO worker.py:2038 -- Started a local Ray instance.\n")
    workers = logs / "workers"
    workers.mkdir()
    (workers / "_ReasoningGymTaskRunner-17234.err").write_text(f":job_id:01\nINFO:{stamp(t0 + 22)}:Platform\n")
    (workers / "WorkerDict-17388.out").write_text(f"INFO:{stamp(t0 + 45)}:later line of the same pid\n")
    (workers / "WorkerDict-17388.err").write_text(f"INFO:{stamp(t0 + 40)}:Platform override\n")
    (workers / "get_master_addr_port-17359.err").write_text(":job_id:01\n:actor_name:get_master_addr_port\n")
    (workers / "SimpleStorageUnit-17318.err").write_text(f"{stamp(t0 + 330)} - INFO - [Performance] ...\n")
    (workers / "WorkerDict-9001.err").write_text(f"INFO:{stamp(t0 - 600)}:an earlier launch of a resumed run\n")
    ray = logs / "ray"  # Ray's own log of each worker process: its start, and its actor's __init__ returning
    ray.mkdir()
    core = "core_worker_process.cc:872: Constructing CoreWorkerProcess. pid: {}"
    (ray / "python-core-worker-b7af6aedb3_17388.log").write_text(
        f"[{stamp(t0 + 36)} I 17388 17388] {core.format(17388)}\n"
        f"[{stamp(t0 + 36.1)} I 17388 17388] core_worker.cc:3247: Creating actor actor_id=41f4\n"
        f"[{stamp(t0 + 42)} I 17388 17388] task_receiver.cc:117: Actor creation task finished, task_id: ff\n")
    (ray / "python-core-worker-59685c4978_17359.log").write_text(f"[{stamp(t0 + 35)} I 17359 17359] "
                                                                 f"{core.format(17359)}\n")  # a task: no actor
    (ray / "python-core-worker-983bdb12a3_4870.log").write_text(f"[{stamp(t0 + 17)} I 4870 4870] "
                                                                f"{core.format(4870)}\n")  # prestarted, never used
    (logs / "progress.jsonl").write_text("\n".join(json.dumps(row) for row in [
        {"kind": "ready", "step": 0, "time": t0 + 55},
        {"kind": "validating", "step": 0, "time": t0 + 55.5},
        {"kind": "train_begin", "step": 1, "time": t0 + 90},
        {"kind": "step", "step": 1, "time": t0 + 130, "step_seconds": 40.0, "gen_seconds": 13.0},
        {"kind": "step", "step": 2, "time": t0 + 170, "step_seconds": 40.0, "gen_seconds": 12.0}]) + "\n")
    events = [(round(e.seconds, 1), e.what) for e in startup_events(logs)]
    assert events == [
        (0.0, "launch (the driver's python starts)"),
        (10.0, "driver: imports, config and checks done; starting Ray"),
        (16.5, "Ray started"),
        (22.0, "worker up: _ReasoningGymTaskRunner (pid 17234)"),
        (35.0, "process started: get_master_addr_port (pid 17359)"),
        (36.0, "process started: WorkerDict (pid 17388)"),
        (40.0, "worker up: WorkerDict (pid 17388)"),  # the earlier of its .err and .out
        (42.0, "ready (__init__ done): WorkerDict (pid 17388)"),
        (55.0, "workers ready (the trainer's first line)"),
        (90.0, "validation before training done"),
        (103.0, "first rollout done (step 1's generation: 13.0 s)"),
        (130.0, "step 1 done (40.0 s)"),
    ]  # get_master_addr_port writes no line of its own; the storage unit's first line is 5 minutes later, not its
    # start; the worker of an earlier launch is not this one's, and a process Ray started but never used is left out
    assert main([str(tmp_path)]) == 0  # the run folder or its logs folder
    assert "+  4.0)  worker up: WorkerDict" in capsys.readouterr().out
    # what the driver writes when training ends, for the GPU kit's records (stdlib readers)
    written = json.loads(write_startup(logs).read_text())
    assert written[6] == {"seconds": 40.0, "what": "worker up: WorkerDict (pid 17388)"} and len(written) == 12


def test_a_run_without_a_launch_record_counts_from_its_first_event_and_an_empty_folder_says_so(tmp_path, capsys):
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = 1_795_872_430.0
    (logs / "driver.log").write_text(f"{stamp(t0)}\tINFO worker.py:2038 -- Started a local Ray instance.\n")
    (logs / "progress.jsonl").write_text(json.dumps({"kind": "ready", "step": 0, "time": t0 + 30}) + "\n")
    assert [(round(e.seconds, 1), e.what) for e in startup_events(logs)] == [
        (0.0, "Ray started"), (30.0, "workers ready (the trainer's first line)")]
    assert main([str(logs)]) == 0
    assert main([str(tmp_path / "nothing")]) == 1 and write_startup(tmp_path / "nothing") is None
    assert "no start-up record in" in capsys.readouterr().err


def test_vllms_own_start_up_lines_show_where_its_engine_spent_the_time(tmp_path):
    """A GPU run's rollout server: vLLM logs its model load, torch.compile, CUDA graphs and engine init with their
    seconds (second-precision stamps without a year) into the server actor's worker log, from its engine process too."""
    logs = tmp_path / "logs"
    t0 = 1_795_872_430.0
    write_launch(logs, t0)
    workers = logs / "workers"
    workers.mkdir()

    def vllm(at: float, where: str, message: str, engine: bool = True) -> str:
        prefix = "(EngineCore_DP0 pid=17640) " if engine else ""
        return f"{prefix}INFO {time.strftime('%m-%d %H:%M:%S', time.localtime(t0 + at))} [{where}] {message}\n"

    (workers / "vLLMHttpServer-17601.err").write_text("".join([
        vllm(61, "api_server.py:1890", "vLLM API server version 0.24.0", engine=False),
        vllm(70, "gpu_model_runner.py:2602", "Starting to load model /models/smollm2..."),
        vllm(72, "default_loader.py:267", "Loading weights took 0.21 seconds"),
        vllm(72, "gpu_model_runner.py:2653", "Model loading took 0.2557 GiB memory and 1.512003 seconds"),
        vllm(88, "backends.py:548", "Dynamo bytecode transform time: 14.92 s"),
        vllm(101, "monitor.py:34", "torch.compile took 27.33 s in total"),
        vllm(103, "gpu_model_runner.py:3480", "Graph capturing finished in 1 secs, took 0.35 GiB"),
        vllm(104, "core.py:210", "init engine (profile, create kv cache, warmup model) took 32.80 s"),
        vllm(130, "gpu_model_runner.py:3480", "Graph capturing finished in 1 secs, took 0.35 GiB"),  # a later wake
    ]))
    whats = [(round(e.seconds), e.what) for e in startup_events(logs)]
    assert [what for _, what in whats if what.startswith("vLLM")] == [
        f"vLLM vLLMHttpServer (pid 17601): {message}" for message in (
            "Starting to load model /models/smollm2...", "Loading weights took 0.21 seconds",
            "Model loading took 0.2557 GiB memory and 1.512003 seconds", "Dynamo bytecode transform time: 14.92 s",
            "torch.compile took 27.33 s in total", "Graph capturing finished in 1 secs, took 0.35 GiB",
            "init engine (profile, create kv cache, warmup model) took 32.80 s")]  # each once: its start-up's
    assert (104, "vLLM vLLMHttpServer (pid 17601): init engine (profile, create kv cache, warmup model) took 32.80 s") \
        in whats
