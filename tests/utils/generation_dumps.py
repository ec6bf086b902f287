"""Synthetic generation dumps, written by the real writers: our training dump through `dump_step` (its TransferQueue
read stubbed), verl's validation dump through verl's own `_write_generations` with envs' real reward dicts, the
evaluator's `generations.jsonl` through its `make_record` and `GenerationStore`."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.trainer.generations import DumpSettings, dump_step
from training.trainer.metrics import SampleRecord

TASKS = ("chain_sum", "spell_backward", "number_sorting")


def training_records(step: int, groups_per_task: int = 2, n: int = 4) -> tuple[list[str], list[SampleRecord], dict]:
    """(keys, records, {key: fields/prompt/response}) of one step: every task with `groups_per_task` groups of n."""
    keys, records, content = [], [], {}
    for t, task in enumerate(TASKS):
        for g in range(groups_per_task):
            group = f"uid-{step}-{task}-{g}"
            for s in range(n):
                correct = (s + g + step) % 3 == 0
                key = f"{group}_{s}_0"
                answer = f"{task}-answer-{step}-{g}"
                response = (f"<think>step {step}, try {s}</think>\n<answer>{answer if correct else 'wrong'}</answer>"
                            if s != 3 else "I do not know <b>bold</b> </script><script>window.pwned=1</script>")
                keys.append(key)
                records.append(SampleRecord(task, group, float(correct), float(correct), float(s != 3), 10 + s))
                content[key] = ({"extra_info": {"task": task, "entry": {"answer": answer}},
                                 "reward": {"pred": (answer if correct else "wrong") if s != 3 else None,
                                            "reason": "" if s != 3 else "no <answer>...</answer> block"}},
                                f"system\nSolve it.\nuser\nQuestion {task} {g} at step {step}?\nassistant\n", response)
    return keys, records, content


def write_training_dumps(directory: Path, steps: range, groups_per_step: int = 4) -> dict[int, list[str]]:
    """Runs dump_step for each step (TransferQueue read stubbed); returns {step: dumped keys}."""
    settings = DumpSettings(directory=str(directory), every_steps=1, groups_per_step=groups_per_step)
    dumped = {}
    for step in steps:
        keys, records, content = training_records(step)

        def read(wanted, partition_id, tokenizer):
            dumped[step] = list(wanted)
            return ([content[k][0] for k in wanted], [content[k][1] for k in wanted], [content[k][2] for k in wanted])

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("training.trainer.generations.read_generation_fields", read)
            dump_step(settings, step, keys, records, "train", tokenizer=None)
    return dumped


def write_validation_dumps(directory: Path, steps: tuple[int, ...]) -> int:
    """verl's _write_generations with envs' reward dicts on real chain_sum entries, as _validate calls it."""
    import reasoning_gym
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from envs.reward import score_response

    entries = list(reasoning_gym.create_dataset("chain_sum", seed=3, size=4))
    for step in steps:
        responses = [f"<answer>{e['answer']}</answer>" if (i + step) % 2 else "the answer is 12" for i, e in
                     enumerate(entries)]
        results = [score_response(r, e, "chain_sum", response_length=7) for r, e in zip(responses, entries)]
        extra = {"reward": [r["score"] for r in results]}
        for key in results[0]:
            extra[key] = [r[key] for r in results]
        PPOTrainer._write_generations(
            inputs=[f"user\n{e['question']}\nassistant\n" for e in entries], outputs=responses,
            gts=[e["answer"] for e in entries], scores=extra["reward"],
            reward_extra_infos_dict=extra | {"uid": [f"val-{i}_0_0" for i in range(len(entries))]},
            dump_path=str(directory), global_steps=step)
    return len(entries) * len(steps)


def write_eval_generations(path: Path) -> int:
    """The evaluator's generations.jsonl: make_record + GenerationStore on real spell_backward items."""
    import reasoning_gym

    from envs.reward import score_response
    from evaluation.backends.base import Completion
    from evaluation.runner import make_record
    from evaluation.store import GenerationStore
    from evaluation.suite import SuiteItem

    store = GenerationStore(str(path))
    entries = list(reasoning_gym.create_dataset("spell_backward", seed=5, size=3))
    for i, entry in enumerate(entries):
        item = SuiteItem(f"words/spell_backward/{i:05d}", "words", "spell_backward", "spell_backward", entry, {},
                         [{"role": "user", "content": entry["question"]}])
        for sample, text in enumerate([f"<answer>{entry['answer']}</answer>", "<answer>nope</answer>"]):
            scored = score_response(text, entry, "spell_backward")
            store.append(make_record(item, sample, Completion(text, 5, "stop"), scored))
    store.close()
    return len(entries) * 2
