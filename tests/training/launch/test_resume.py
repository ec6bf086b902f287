"""The resume check before Ray starts (training/launch/resume.py): on checkpoint folders laid out as verl writes them,
a fresh start, a resume, a finished experiment (exit 0, nothing started) and a checkpoint of another mix, model or
seed (exit 2), and the run manifest each launch writes."""

import inspect
import json
import re

import pytest

from training.launch.checks import ConfigProblem
from training.launch.config import compose_config, resolve_config
from training.launch.resume import MANIFEST, AlreadyFinished, check_resume, read_manifest, resume_point


def config(ckpt, *overrides, steps=5):
    return compose_config("quickstart", [f"trainer.default_local_dir={ckpt}", f"trainer.total_training_steps={steps}",
                                         "actor_rollout_ref.model.path=/models/a", *overrides])


def save_checkpoint(ckpt, step, world_size=1):
    """What verl's _save_checkpoint leaves: global_step_N/actor with fsdp_config.json and the model, optimizer and
    extra-state shard of each rank, global_step_N/data.pt, and the tracker file with N."""
    folder = ckpt / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (folder / "actor" / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    for rank in range(world_size):
        for prefix in ("model", "optim", "extra_state"):
            (folder / "actor" / f"{prefix}_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"")
    (folder / "data.pt").write_bytes(b"")
    (ckpt / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def test_fresh_start_writes_the_manifest_atomically(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    assert check_resume(config(ckpt, "env.seed=3")) == f"starting fresh in {ckpt}"
    assert f"[resume] starting fresh in {ckpt}" in capsys.readouterr().out
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert manifest["env.mix"] == "quickstart" and len(manifest["mix_fingerprint"]) == 64
    assert manifest["env.seed"] == 3 and manifest["actor_rollout_ref.model.path"] == "/models/a"
    assert manifest["trainer.total_training_steps"] == 5 and manifest["start_step"] == 0
    assert sorted(p.name for p in ckpt.iterdir()) == [MANIFEST]  # no temporary file left behind


def test_resume_says_from_which_step_and_updates_the_manifest(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    check_resume(config(ckpt, steps=2))
    save_checkpoint(ckpt, 2)
    assert check_resume(config(ckpt, steps=4)) == f"resuming {ckpt} from step 2 of 4"
    assert f"[resume] resuming {ckpt} from step 2 of 4" in capsys.readouterr().out
    assert read_manifest(ckpt)["trainer.total_training_steps"] == 4 and read_manifest(ckpt)["start_step"] == 2


def test_finished_experiment_stops_before_ray_and_says_how_to_continue(tmp_path):
    ckpt = tmp_path / "ckpt"
    check_resume(config(ckpt))
    save_checkpoint(ckpt, 5)
    before = (ckpt / MANIFEST).read_bytes()
    with pytest.raises(AlreadyFinished) as done:
        check_resume(config(ckpt))
    message = str(done.value)
    assert f"experiment {ckpt} already finished at step 5 (trainer.total_training_steps=5)" in message
    assert "raise trainer.total_training_steps" in message
    assert "trainer.resume_mode=disable or a new trainer.experiment_name" in message
    assert (ckpt / MANIFEST).read_bytes() == before
    assert "already finished" in check_resume(config(ckpt), launching=False)  # preflight: a note, no stop
    assert check_resume(config(ckpt, "trainer.val_only=true")).startswith(f"resuming {ckpt} from step 5")
    assert check_resume(config(ckpt, steps=8)) == f"resuming {ckpt} from step 5 of 8"


@pytest.mark.parametrize("override, named", [
    ("env.mix=algebra", "env.mix: checkpoint quickstart (fingerprint"),
    ("env.seed=1", "env.seed: checkpoint 0, now 1"),
    ("actor_rollout_ref.model.path=/models/b", "actor_rollout_ref.model.path: checkpoint /models/a, now /models/b"),
])
def test_checkpoint_of_another_mix_model_or_seed_is_refused(tmp_path, override, named):
    ckpt = tmp_path / "ckpt"
    check_resume(config(ckpt))
    save_checkpoint(ckpt, 2)
    before = (ckpt / MANIFEST).read_bytes()
    with pytest.raises(ConfigProblem) as refused:
        check_resume(config(ckpt, override))
    message = str(refused.value)
    assert message.startswith("resume check: 1 problem(s), nothing was started")
    assert named in message and f"{ckpt}/global_step_2 was trained with other settings" in message
    assert "trainer.resume_mode=disable or a new trainer.experiment_name" in message and f"delete {ckpt}" in message
    assert (ckpt / MANIFEST).read_bytes() == before
    assert check_resume(config(ckpt, override, "trainer.resume_mode=disable")).startswith(f"starting fresh in {ckpt}")
    assert read_manifest(ckpt)["start_step"] == 0


def test_an_edited_mix_file_is_another_mix_and_a_copy_is_the_same(tmp_path, repo):
    ckpt, mix = tmp_path / "ckpt", tmp_path / "mine.yaml"
    mix.write_text((repo / "configs" / "mix" / "easy.yaml").read_text())
    check_resume(config(ckpt, f"env.mix={mix}"))
    save_checkpoint(ckpt, 1)
    check_resume(config(ckpt, "env.mix=easy"), launching=False)  # same content under another name: the same mix
    mix.write_text(mix.read_text().replace("spell_backward: {weight: 1.0", "spell_backward: {weight: 2.0"))
    with pytest.raises(ConfigProblem, match="the mix file changed since"):
        check_resume(config(ckpt, f"env.mix={mix}"))


def test_checkpoints_without_a_manifest_resume_with_a_note(tmp_path):
    ckpt = tmp_path / "ckpt"
    save_checkpoint(ckpt, 3)
    line = check_resume(config(ckpt))
    assert line.startswith(f"resuming {ckpt} from step 3 of 5 (no {MANIFEST} there")
    assert read_manifest(ckpt)["start_step"] == 3


def test_resume_point_follows_verls_rules(tmp_path, monkeypatch):
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    ckpt = tmp_path / "ckpt"
    assert resume_point(config(ckpt)) == (None, 0) and find_latest_ckpt_path(str(ckpt)) is None
    folder = save_checkpoint(ckpt, 4)
    assert resume_point(config(ckpt)) == (folder, 4) and find_latest_ckpt_path(str(ckpt)) == str(folder)
    (ckpt / "latest_checkpointed_iteration.txt").write_text("6")  # tracker ahead of its folder: verl starts fresh
    assert resume_point(config(ckpt)) == (None, 0) and find_latest_ckpt_path(str(ckpt)) is None
    assert resume_point(config(ckpt, "trainer.resume_mode=disable")) == (None, 0)
    monkeypatch.chdir(tmp_path)  # a relative default_local_dir is under the working directory, as in verl
    (ckpt / "latest_checkpointed_iteration.txt").write_text("4\n")
    assert resume_point(config("ckpt")) == (tmp_path / "ckpt" / "global_step_4", 4)
    other = save_checkpoint(tmp_path / "other", 7)
    assert resume_point(config(ckpt, "trainer.resume_mode=resume_path",
                               "trainer.resume_from_path=other/global_step_7")) == (other, 7)


def test_a_half_written_checkpoint_is_never_resumed_from(tmp_path, capsys):
    """A save cut short (driver killed, disk full) leaves global_step_N without data.pt and the tracker at N-1."""
    ckpt = tmp_path / "ckpt"
    check_resume(config(ckpt, steps=4))
    save_checkpoint(ckpt, 2)
    (ckpt / "global_step_3" / "actor").mkdir(parents=True)  # the weights' folder, written first; no data.pt
    line = check_resume(config(ckpt, steps=4))
    assert line.startswith(f"resuming {ckpt} from step 2 of 4; global_step_3 past it or incomplete")
    with pytest.raises(ConfigProblem, match="is damaged .* missing: data.pt, actor/fsdp_config.json"):
        resume_point(config(ckpt, "trainer.resume_mode=resume_path",
                            f"trainer.resume_from_path={ckpt / 'global_step_3'}"))


def test_a_damaged_latest_step_is_refused_with_the_command_that_resumes_from_the_last_complete_one(tmp_path,
                                                                                                   monkeypatch):
    """A step that lacks a shard (a partial copy between machines, a disk fault) is named before Ray starts, with
    every missing file; the refusal's command resumes from the last complete step, and the damaged one is left as is."""
    ckpt = tmp_path / "ckpt"
    check_resume(config(ckpt))
    two = save_checkpoint(ckpt, 2, world_size=2)
    four = save_checkpoint(ckpt, 4, world_size=2)
    (four / "actor" / "optim_world_size_2_rank_1.pt").unlink()
    (four / "actor" / "model_world_size_2_rank_0.pt").unlink()
    monkeypatch.setattr("sys.argv", ["training/train_grpo.py", "--config-name", "quickstart", "trainer.resume_mode=auto"])
    with pytest.raises(ConfigProblem) as refused:
        check_resume(config(ckpt))
    message = str(refused.value)
    assert f"{ckpt}/latest_checkpointed_iteration.txt names step 4, but {four} is damaged" in message
    assert ("2 file(s) verl loads are missing: actor/model_world_size_2_rank_0.pt, actor/optim_world_size_2_rank_1.pt"
            in message)
    command = (f"python training/train_grpo.py --config-name quickstart trainer.resume_mode=resume_path "
               f"trainer.resume_from_path={two}")
    assert message.endswith(f"or resume from the last complete step, global_step_2: {command}")
    resumed = check_resume(config(ckpt, *command.split()[4:]))  # the command's overrides: a resume from step 2
    assert resumed.startswith(f"resuming {ckpt} from step 2 of 5; global_step_4 past it")
    assert sorted(p.name for p in (four / "actor").iterdir()) == [
        "extra_state_world_size_2_rank_0.pt", "extra_state_world_size_2_rank_1.pt", "fsdp_config.json",
        "model_world_size_2_rank_1.pt", "optim_world_size_2_rank_0.pt"]  # left for a copy to be finished
    with pytest.raises(ConfigProblem, match=f"trainer.resume_from_path={four}, but {four} is damaged"):
        check_resume(config(ckpt, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={four}"))


def test_which_files_a_step_needs_follow_its_world_size_and_what_verl_loads(tmp_path):
    ckpt = tmp_path / "ckpt"
    one = save_checkpoint(ckpt, 1)
    (one / "data.pt").unlink()  # a lost data state, and no earlier step: only a fresh start is offered
    with pytest.raises(ConfigProblem, match=r"missing: data.pt\. Restore .* no earlier step is complete; start fresh"):
        check_resume(config(ckpt))
    three = save_checkpoint(ckpt, 3, world_size=2)
    (three / "actor" / "fsdp_config.json").unlink()  # the shards' names still say the world size
    (three / "actor" / "extra_state_world_size_2_rank_1.pt").unlink()
    with pytest.raises(ConfigProblem, match=r"missing: actor/extra_state_world_size_2_rank_1\.pt\. .* start fresh"):
        check_resume(config(ckpt))
    only_model = "actor_rollout_ref.actor.checkpoint.load_contents=[model]"  # verl then opens the model shards only
    assert check_resume(config(ckpt, only_model)).startswith(f"resuming {ckpt} from step 3 of 5")


def test_resume_path_is_checked_against_the_manifest_of_its_experiment(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    check_resume(config(old))
    folder = save_checkpoint(old, 2)
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={folder}"]
    assert check_resume(config(new, *resume)) == f"resuming {old} from step 2 of 5"
    assert read_manifest(new)["start_step"] == 2
    with pytest.raises(ConfigProblem, match="env.seed: checkpoint 0, now 9"):
        check_resume(config(new, *resume, "env.seed=9"))


@pytest.mark.parametrize("overrides, message", [
    (["trainer.resume_mode=resume_path"], "needs trainer.resume_from_path=<...>/global_step_N, got None"),
    (["trainer.resume_mode=resume_path", "trainer.resume_from_path=/nowhere/global_step_3"], "no such folder"),
    (["trainer.resume_mode=resume_path", "trainer.resume_from_path=/nowhere/global_step_3/"], "no trailing '/'"),
    (["trainer.resume_mode=latest"], "trainer.resume_mode=latest: use auto, disable or resume_path"),
])
def test_what_verl_would_crash_on_is_a_config_problem(tmp_path, overrides, message):
    with pytest.raises(ConfigProblem, match=re.escape(message)):
        check_resume(config(tmp_path / "ckpt", *overrides))


def test_garbled_tracker_is_a_config_problem(tmp_path):
    save_checkpoint(tmp_path, 2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("two")
    with pytest.raises(ConfigProblem, match="holds 'two', not a step number"):
        check_resume(config(tmp_path))


def test_verl_load_checkpoint_still_works_as_mirrored():
    """Contract: the lines of verl's _load_checkpoint and find_latest_ckpt_path that resume_point copies."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.checkpoint import checkpoint_manager

    load = inspect.getsource(PPOTrainer._load_checkpoint)
    for line in ('if self.config.trainer.resume_mode == "disable":',
                 "global_step_folder = find_latest_ckpt_path(checkpoint_folder)",
                 "checkpoint_folder = os.path.join(working_dir, checkpoint_folder)",
                 "global_step_folder = self.config.trainer.resume_from_path",
                 'self.global_steps = int(global_step_folder.split("global_step_")[-1])'):
        assert line in load, line
    find = inspect.getsource(checkpoint_manager.find_latest_ckpt_path)
    assert 'directory_format="global_step_{}"' in find and "iteration = int(f.read().decode())" in find
    assert checkpoint_manager.get_checkpoint_tracker_filename("x") == "x/latest_checkpointed_iteration.txt"


def test_train_grpo_exits_0_on_a_finished_experiment_and_2_on_another_mix(tmp_path, monkeypatch, capsys):
    """What `python training/train_grpo.py` does on a re-run, without starting Ray (launch must not be reached)."""
    from training import train_grpo

    def no_launch(cfg):
        raise AssertionError("Ray must not start")

    monkeypatch.setattr(train_grpo, "launch", no_launch)
    ckpt = tmp_path / "ckpt"
    base = ["model=tiny", "trainer.device=cpu", f"trainer.default_local_dir={ckpt}"]
    cfg = resolve_config(compose_config("quickstart", base), gpu_count=1)
    check_resume(cfg)  # the first run's manifest
    last = cfg.trainer.total_training_steps  # env.on_cpu's step count
    save_checkpoint(ckpt, last)
    assert train_grpo.run(compose_config("quickstart", base)) == 0
    assert f"[resume] experiment {ckpt} already finished at step {last}" in capsys.readouterr().out
    assert train_grpo.run(compose_config("quickstart", base + ["env.mix=algebra"])) == 2
    assert "env.mix: checkpoint quickstart" in capsys.readouterr().err
