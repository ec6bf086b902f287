"""The run report (training/report/report.py) on a run folder written by the real writers: our per-step summaries through
training/trainer/generations.py's `dump_step`, verl's validation dumps through its own `_write_generations` with envs' real
reward dicts, as the trainer and verl's `_validate` write them."""

from __future__ import annotations

import struct
from pathlib import Path
from statistics import fmean

import pytest

from training.report import report
from training.trainer.generations import DumpSettings, dump_step
from training.trainer.metrics import SampleRecord

TASKS = ("chain_sum", "spell_backward")
STEPS = (1, 2, 3)
VALIDATIONS = (0, 3)


def step_records(step: int) -> list[SampleRecord]:
    """Two tasks x two groups x four responses; group 1 of chain_sum is flat (all scores equal) at every step."""
    records = []
    for t, task in enumerate(TASKS):
        for g in range(2):
            for s in range(4):
                flat = task == "chain_sum" and g == 1
                correct = 0.0 if flat else float((s + step + t) % 3 == 0)
                found = float(s != 3 or flat)
                records.append(SampleRecord(task, f"{step}-{task}-{g}", score=correct + 0.1 * found, accuracy=correct,
                                            answer_found=found, response_length=10 + s, truncated=float(s == 2)))
    return records


def write_steps(directory: Path, steps=STEPS) -> None:
    """The trainer's per-step summary: dump_step with no groups to dump (no TransferQueue read)."""
    settings = DumpSettings(directory=str(directory), every_steps=1, groups_per_step=0)
    for step in steps:
        records = step_records(step)
        dump_step(settings, step, [f"k{i}" for i in range(len(records))], records, "train", tokenizer=None)


def validation_responses(step: int) -> list[tuple[str, dict, str]]:
    """(task, entry, response) of the validation set at `step`: 3 chain_sum and 3 spell_backward items."""
    import reasoning_gym

    items = []
    for task in TASKS:
        for i, entry in enumerate(reasoning_gym.create_dataset(task, seed=11, size=3)):
            right = i == 0 if step == 0 else i != 2  # 1 of 3 right before training, 2 of 3 after
            response = f"<answer>{entry['answer']}</answer>" if right else ("<answer>no</answer>" if i else "no idea")
            items.append((task, entry, response))
    return items


def write_validation(directory: Path, steps=VALIDATIONS) -> dict[int, dict[str, list[dict]]]:
    """verl's _write_generations with envs' reward dicts, as _validate calls it; returns {step: {task: [result]}}."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from envs.reward import score_response

    written = {}
    for step in steps:
        items = validation_responses(step)
        results = [score_response(response, entry, task, response_length=7) for task, entry, response in items]
        extra = {"reward": [r["score"] for r in results], **{key: [r[key] for r in results] for key in results[0]}}
        PPOTrainer._write_generations(
            inputs=[f"user\n{entry['question']}\nassistant\n" for _, entry, _ in items],
            outputs=[response for _, _, response in items], gts=[entry["answer"] for _, entry, _ in items],
            scores=extra["reward"], reward_extra_infos_dict=extra | {"uid": [f"v{i}_0_0" for i in range(len(items))]},
            dump_path=str(directory), global_steps=step)
        written[step] = {task: [r for (t, _, _), r in zip(items, results) if t == task] for task in TASKS}
    return written


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the markdown table under `heading` (header and rule left out)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows[2:]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run folder: steps 1-3 in generations/train/steps.jsonl, validations at steps 0 and 3, a checkpoint."""
    run_dir = tmp_path_factory.mktemp("run")
    write_steps(run_dir / "generations" / "train")
    validation = write_validation(run_dir / "generations" / "val")
    (run_dir / "latest_checkpointed_iteration.txt").write_text("3")
    return run_dir, validation, report.write_report(run_dir)


def test_summaries_carry_the_zero_variance_share(run):
    run_dir, _, _ = run
    steps = report.read_steps(run_dir / "generations" / "train" / "steps.jsonl")
    assert list(steps) == list(STEPS)
    assert all(s["zero_variance_groups"] == pytest.approx(0.25) for s in steps.values())  # 1 flat group of 4


def test_per_step_rows_are_the_means_of_what_was_written(run):
    _, _, result = run
    rows = table_rows(result.text, "## Training, per step")
    assert [r[0] for r in rows if r[0]] == ["1", "2", "3"]
    step = None
    for row in rows:
        step = int(row[0]) if row[0] else step
        records = [r for r in step_records(step) if row[1] in (r.task, "all")]
        expected = [fmean(r.score for r in records), fmean(r.accuracy for r in records),
                    fmean(r.answer_found for r in records), fmean(r.truncated for r in records)]
        assert row[2:6] == [f"{value:.3f}" for value in expected], row
        assert int(row[6]) == len(records)
        assert row[7] == ("0.25" if row[1] == "all" else "")
    assert [r[1] for r in rows[:3]] == ["all", "chain_sum", "spell_backward"]


def test_validation_before_and_after_per_task(run):
    _, validation, result = run
    rows = {r[0]: r for r in table_rows(result.text, "## Validation: step 0 (before) -> step 3 (after)")}
    assert set(rows) == {"all", *TASKS}
    for task in TASKS:
        before, after = validation[0][task], validation[3][task]
        for column, key in ((2, "acc"), (3, "score"), (4, "answer_found")):
            expected = f"{fmean(r[key] for r in before):.3f} -> {fmean(r[key] for r in after):.3f}"
            assert rows[task][column] == expected, (task, key)
        assert rows[task][1] == "3"
    everything = [r for task in TASKS for r in validation[3][task]]
    assert rows["all"][2].endswith(f"{fmean(r['acc'] for r in everything):.3f}") and rows["all"][1] == "6"


def test_first_vs_last_steps_and_the_header(run):
    run_dir, _, result = run
    rows = {r[0]: r for r in table_rows(result.text, "## Training: step 1 -> step 3")}
    for task in TASKS:
        first = [r for r in step_records(1) if r.task == task]
        last = [r for r in step_records(3) if r.task == task]
        assert rows[task][2] == f"{fmean(r.accuracy for r in first):.3f} -> {fmean(r.accuracy for r in last):.3f}"
        assert rows[task][3] == f"{fmean(r.score for r in first):.3f} -> {fmean(r.score for r in last):.3f}"
    assert "- training steps: 3 (1-3)" in result.text and "- validation at steps: 0, 3" in result.text
    assert f"- checkpoint: {run_dir / 'global_step_3'}" in result.text and "missing" not in result.text


def test_files_are_written_whole(run):
    run_dir, _, result = run
    assert result.markdown == run_dir / "report.md" and result.markdown.read_text() == result.text
    assert result.png == run_dir / "report.png"
    width, height = png_size(result.png)
    assert 800 <= width <= 2000 and 500 <= height <= 1400 and result.png.stat().st_size > 20_000
    assert not [p.name for p in run_dir.iterdir() if ".tmp" in p.name]


def test_a_long_run_is_shown_in_blocks_of_steps(tmp_path):
    write_steps(tmp_path / "generations" / "train", steps=range(1, 71))
    text = report.write_report(tmp_path).text
    rows = table_rows(text, "## Training, per step (in blocks")
    labels = [r[0] for r in rows if r[0]]
    assert len(labels) <= report.MAX_STEP_ROWS and labels[:2] == ["1-3", "4-6"] and labels[-1] == "70"
    block = [r for step in (1, 2, 3) for r in step_records(step)]
    assert rows[0][2:7] == [f"{fmean(r.score for r in block):.3f}", f"{fmean(r.accuracy for r in block):.3f}",
                            f"{fmean(r.answer_found for r in block):.3f}", "0.250", str(len(block))]
    assert "## Training: steps 1-17 -> steps 54-70" in text  # a quarter of the run each


def test_missing_validation_and_a_single_step(tmp_path, capsys):
    write_steps(tmp_path / "generations" / "train", steps=(1,))
    assert report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "- missing: no validation dumps in" in out and "One training step: no trend to compare." in out
    assert "- checkpoint: none written" in out and "## Validation" not in out
    assert png_size(tmp_path / "report.png")[0] >= 800


def test_one_validation_and_no_steps(tmp_path, capsys):
    write_validation(tmp_path / "generations" / "val", steps=(0,))
    (tmp_path / "generations" / "val" / "1.jsonl").write_text('{"input": "x", "output": "y", "sco')  # being written
    assert report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "- missing: no per-step summaries in" in out and "one validation only (step 0)" in out
    assert "## Validation at step 0 (the only one)" in out and "## Training" not in out
    assert (tmp_path / "report.png").is_file()


def test_a_missing_run_folder_is_said(tmp_path, capsys):
    assert report.main([str(tmp_path / "nowhere")]) == 2
    assert "no run folder at" in capsys.readouterr().err
