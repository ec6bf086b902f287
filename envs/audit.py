"""The scorer audit: each task of a mix tried with its gold answers, the wrong answers a policy finds and the right
answer's other forms, and its prompts measured.

    python -m envs.audit --mix my_mix.yaml                                  # one line a task
    python -m envs.audit --mix quickstart --model PATH --max-prompt-length 128 --system-prompt "Answer ..."
    python -m envs.audit --all-tasks --markdown                             # docs/task-stream.md's table

On `items` items a task it scores the gold answer (the entry's, or its example answer where several are right) and
the wrong answers a policy finds: near misses (text appended, the answer twice, its last letter or digit dropped, its
spacing changed, an empty answer), structural changes by the answer's shape (envs.wrong_answers: an element more or
fewer or two swapped, a row or column more or fewer or transposed, a number negated, plus one or times ten, another
unit), every other item's gold (cross_item) and a few constant answers given to every item (no answer may score 1 on
more items than its gold's). A wrong answer that scores as right is accepted when envs.verifiers confirms it solves
the item (tasks with several right answers) or envs.scorers.ACCEPTED_LENIENCIES says why it is harmless; otherwise it
is a HOLE. The gold in each form of envs.answer_forms (`20.0`, `1,234`, `$x$`, a grid's line ends, letter case, a
full stop) must score 1 where the task reads it as the same answer and 0 where it is another (MISSED or HOLE). Any
of these, a gold that does not score 1, or a prompt longer than --max-prompt-length makes the command exit 1.
Scoring is envs.reward.score_answer's, the one training and evaluation use.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from envs.answer_forms import FORMS, form_meaning, gold_answer, written_as
from envs.curriculum import leveled_config
from envs.generation import generate_entry
from envs.mix import load_mix, mix_path
from envs.reward import score_answer
from envs.scorers import ACCEPTED_LENIENCIES, ANSWER_SHAPES, is_repaired
from envs.tasks import HASH_SENSITIVE_TASKS, SLOW_TASKS, all_tasks, check_task_name
from envs.verifiers import solves
from envs.worker_process import WorkerProcess
from envs.wrong_answers import NEAR_MISSES, STRUCTURAL_CHANGES, same_answer, wrong_answers

WRONG_CASES = NEAR_MISSES + STRUCTURAL_CHANGES + ("cross_item", "constant")
CONSTANTS = ("0", "1", "-1", "2", "True", "False", "Yes", "No", "None", "[]", "{}", "A")  # answers any item is given
ITEMS = 24
SLOW_ITEMS = 4  # at most this many items of a slow generator (futoshiki: 3 s an item): a mix's audit takes seconds
SLOW = SLOW_TASKS | {"acre", "arc_agi"}
SPLIT = "validation"  # the items training validates on and the held-out tasks' items


@dataclass
class TaskAudit:
    """What the audit found for one task of a mix."""

    key: str  # the mix key
    task: str  # Reasoning Gym task name
    items: int = 0  # items with a gold answer, tried
    no_gold: int = 0  # items whose answer is checked procedurally, with no example answer to try
    gold_missed: list[str] = field(default_factory=list)  # the gold answers that did not score 1, with their scores
    tried: Counter = field(default_factory=Counter)  # wrong-answer case -> answers tried
    accepted: Counter = field(default_factory=Counter)  # wrong-answer case -> those that scored as right
    verified: Counter = field(default_factory=Counter)  # ... of which envs.verifiers confirms they solve the item
    example: dict = field(default_factory=dict)  # wrong-answer case -> one unverified answer that scored as right
    forms_tried: Counter = field(default_factory=Counter)  # answer form -> golds written in that form
    forms_full: Counter = field(default_factory=Counter)  # ... that scored 1
    prior: tuple[float, str] = (0.0, "")  # (share of items, answer): the most common gold, the task's answer prior
    prompt_tokens: int | None = None  # the longest rendered prompt, when a tokenizer was given

    def unexplained(self, case: str) -> int:
        """Answers of `case` that scored as right without a check saying they solve the item."""
        return self.accepted[case] - self.verified[case]

    @property
    def holes(self) -> list[str]:
        """Wrong-answer cases that scored as right, that envs.verifiers does not confirm and that
        envs.scorers.ACCEPTED_LENIENCIES does not explain."""
        known = ACCEPTED_LENIENCIES.get(self.task, {})
        return [case for case in WRONG_CASES if self.unexplained(case) and case not in known]

    @property
    def form_problems(self) -> list[str]:
        """Forms the task reads as the same answer that did not score 1, and forms of another answer that did."""
        problems = []
        for form in FORMS:
            same, _ = form_meaning(self.task, form)
            if self.forms_tried[form] and (self.forms_full[form] < self.forms_tried[form] if same
                                           else self.forms_full[form]):
                problems.append(form)
        return problems

    @property
    def scorer(self) -> str:
        return "repaired" if is_repaired(self.task) else "Reasoning Gym's"

    def prompt_problem(self, max_prompt_length: int | None) -> str | None:
        if max_prompt_length is None or self.prompt_tokens is None or self.prompt_tokens <= max_prompt_length:
            return None
        return (f"task {self.key}: its prompts reach {self.prompt_tokens} tokens > data.max_prompt_length="
                f"{max_prompt_length}; set data.max_prompt_length={self.prompt_tokens} or more, or make the task "
                "easier in the mix")

    def findings(self) -> tuple[str, str, str]:
        """(gold, wrong answers, forms): the three parts of the audit's line and table row for this task."""
        if not self.items:
            return f"no gold answer to try ({self.no_gold} items checked procedurally)", "-", "-"
        gold = f"1 on {self.items - len(self.gold_missed)}/{self.items}; prior {self.prior[0]:.2f}"
        if self.gold_missed:
            gold += f" (MISSED: {'; '.join(self.gold_missed[:2])})"
        known = ACCEPTED_LENIENCIES.get(self.task, {})
        parts = []
        for case in WRONG_CASES:
            if not self.accepted[case]:
                continue
            text = f"{case} {self.accepted[case]}/{self.tried[case]}"
            if self.verified[case]:
                text += f" ({self.verified[case]} solve the item: envs.verifiers)"
            if self.unexplained(case):
                text += (f" accepted: {known[case]}" if case in known
                         else f" HOLE: a wrong answer scores as right, e.g. {self.example[case]!r}")
            parts.append(text)
        forms = []
        for form in FORMS:
            if self.forms_tried[form]:
                same, why = form_meaning(self.task, form)
                text = f"{form} {self.forms_full[form]}/{self.forms_tried[form]}"
                if form in self.form_problems:
                    text += (" MISSED: the same answer scores 0" if same else " HOLE: another answer scores 1")
                forms.append(text + ("" if same else f" (another answer: {why})"))
        return gold, "; ".join(parts) or "none scores as right", "; ".join(forms) or "-"

    def line(self, max_prompt_length: int | None = None) -> str:
        """One line for the console: scorer, gold and prior, wrong answers that scored as right and why, the right
        answer's forms, prompt length."""
        gold, wrong, forms = self.findings()
        text = f"{self.key}: {self.scorer} scorer; gold {gold}; wrong answers: {wrong}; forms: {forms}"
        if self.prompt_tokens is not None:
            text += "; " + (self.prompt_problem(max_prompt_length) or f"prompts <= {self.prompt_tokens} tokens")
        return text


def _record(audit: TaskAudit, case: str, task: str, answer: str, entry: dict[str, Any], score: float) -> None:
    audit.tried[case] += 1
    if score == 1.0:
        audit.accepted[case] += 1
        if solves(task, answer, entry):
            audit.verified[case] += 1
        else:
            audit.example.setdefault(case, answer[:60])


def audit_task(key: str, task: str, config: dict[str, Any], items: int = ITEMS, seed: int = 0, strict: bool = True,
               prompt_tokens: Callable[[str], int] | None = None) -> TaskAudit:
    """Tries `items` items of `task` (SLOW_ITEMS at most for a slow generator; its `config`, the validation split at
    `seed`); `strict`: the strict_answers reward option (on by default); `prompt_tokens(question)`: the rendered
    prompt's length in tokens.

    On each item: the gold; its wrong answers (envs.wrong_answers: near misses and structural changes); the gold in
    each form of envs.answer_forms; every other item's gold (cross_item); and each answer given to every item
    (constant: no answer may score 1 on more items than those whose gold it is, or that it solves)."""
    audit = TaskAudit(key, task)
    score = lambda answer, entry: score_answer(task, answer, entry, config, strict)[0]  # noqa: E731
    entries, golds = [], []
    for position, entry in enumerate(_entries(task, config, seed, min(items, SLOW_ITEMS) if task in SLOW else items)):
        if prompt_tokens is not None:
            audit.prompt_tokens = max(audit.prompt_tokens or 0, prompt_tokens(entry["question"]))
        gold = gold_answer(entry)
        if gold is None:
            audit.no_gold += 1
            continue
        entries.append(entry)
        golds.append(gold)
        audit.items += 1
        gold_score, reason = score_answer(task, gold, entry, config, strict)
        if gold_score != 1.0:
            audit.gold_missed.append(f"item {position} scored {gold_score:g}" + (f" ({reason[:80]})" if reason else ""))
        for case, text in wrong_answers(gold).items():
            _record(audit, case, task, text, entry, score(text, entry))
        for form in FORMS:
            if (text := written_as(form, gold)) is not None:
                audit.forms_tried[form] += 1
                audit.forms_full[form] += score(text, entry) == 1.0
    _cross_items(audit, entries, golds, score)
    return audit


def _entries(task: str, config: dict[str, Any], seed: int, count: int) -> list[dict[str, Any]]:
    """The first `count` items of the split, as every process of the project draws them: a task whose generator
    follows PYTHONHASHSEED is generated in a child started with PYTHONHASHSEED=0 (envs.producer's), unless this
    process already runs under it, so that the audit's counts are the same in every run."""
    if task not in HASH_SENSITIVE_TASKS or os.environ.get("PYTHONHASHSEED") == "0":
        return [generate_entry(task, config, SPLIT, seed, position) for position in range(count)]
    child = WorkerProcess("envs.producer:_generate", env={"PYTHONHASHSEED": "0"})
    try:
        entries = []
        for position in range(count):
            child.send((position, (task, config, SPLIT, seed, position)))
            kind, value = child.receive(timeout=300)
            if kind != "item" or child.receive(timeout=300)[0] != "end":
                raise RuntimeError(f"generating {task} item {position} for the audit failed: {value}")
            entries.append(value[1])
        return entries
    finally:
        child.close()


def _cross_items(audit: TaskAudit, entries: list[dict], golds: list[str], score: Callable) -> None:
    """Every item's gold, and a few answers any task may be given, scored on every item; the answer prior."""
    if not golds:
        return
    distinct = list(dict.fromkeys(golds + [c for c in CONSTANTS if not any(same_answer(c, g) for g in golds)]))
    best = max(Counter(golds).items(), key=lambda pair: pair[1])
    audit.prior = (best[1] / len(golds), best[0])
    for answer in distinct:
        full = verified = own = 0
        for entry, gold in zip(entries, golds):
            if same_answer(answer, gold):
                own += 1
                continue
            result = score(answer, entry)
            if answer in golds:
                _record(audit, "cross_item", audit.task, answer, entry, result)
            if result == 1.0:
                full += 1
                verified += bool(solves(audit.task, answer, entry))
        audit.tried["constant"] += 1
        if full:
            audit.accepted["constant"] += 1
            audit.verified["constant"] += full == verified
            if full > verified:
                audit.example.setdefault("constant", f"{answer[:40]} (1 on {own + full}/{len(golds)} items, "
                                                     f"its gold on {own})")


def mix_tasks(mix_source: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """[(key, task, config)] of a mix: its tasks at their start levels, then its held-out tasks (default configs)."""
    mix = load_mix(mix_source)
    tasks = [(s.key, s.task, leveled_config(s.task, s.config, s.level) if s.level is not None else s.config)
             for s in mix.tasks]
    return tasks + [(name, name, {}) for name in mix.held_out]


def prompt_counter(tokenizer: Any, system_prompt: str | None,
                   chat_template_kwargs: dict | None = None) -> Callable[[str], int]:
    """question -> tokens of the prompt the model is given (envs.prompts' rendering, as training renders it)."""
    from envs.prompts import build_messages, render_prompt, resolve_system_prompt

    system = resolve_system_prompt(system_prompt)

    def count(question: str) -> int:
        text = render_prompt(tokenizer, build_messages(question, system), chat_template_kwargs)
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def markdown_table(audits: Sequence[TaskAudit]) -> str:
    """The audit as a markdown table (docs/task-stream.md holds the one for every task at the default configs)."""
    rows = ["| task | scorer | gold scores 1; answer prior | wrong answers that score as right (answers) | the gold's "
            "forms that score 1 (golds) |", "|---|---|---|---|---|"]
    for audit in audits:
        cells = [cell.replace("|", "/").replace("\n", "\\n") for cell in audit.findings()]
        rows.append(f"| {audit.key} | {audit.scorer} | {' | '.join(cells)} |")
    return "\n".join(rows)


def failed(audits: Sequence[TaskAudit], max_prompt_length: int | None = None) -> bool:
    """True if a gold answer missed, a wrong answer or a form is a hole, or a prompt is over the limit."""
    return any(a.gold_missed or a.holes or a.form_problems or a.prompt_problem(max_prompt_length) for a in audits)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m envs.audit", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--mix", help="a mix: configs/mix/NAME.yaml's NAME or a YAML file's path")
    which.add_argument("--tasks", help="task names, comma-separated, at their default configs")
    which.add_argument("--all-tasks", action="store_true", help="every Reasoning Gym task at its default config")
    parser.add_argument("--items", type=int, default=ITEMS, help=f"items a task (default {ITEMS})")
    parser.add_argument("--seed", type=int, default=0, help="the validation split's seed (env.seed)")
    parser.add_argument("--loose", action="store_true", help="score with strict_answers=false (the leading value "
                        "counts for the tasks of envs.scorers.ANSWER_SHAPES)")
    parser.add_argument("--model", help="a model folder: measure each task's prompts with its tokenizer and template")
    parser.add_argument("--system-prompt", default="DeepSeekZero", help="env.system_prompt (a name or the text)")
    parser.add_argument("--chat-template-kwargs", type=json.loads, default={},
                        help='data.apply_chat_template_kwargs as JSON, e.g. \'{"enable_thinking": false}\'')
    parser.add_argument("--max-prompt-length", type=int, help="data.max_prompt_length: longer prompts fail the audit")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table instead of lines")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.items < 1:
        print(f"envs.audit: --items={args.items}; give 1 or more", file=sys.stderr)
        return 2
    try:
        if args.mix:
            tasks = mix_tasks(mix_path(args.mix))
        else:
            names = all_tasks() if args.all_tasks else [check_task_name(t.strip()) for t in args.tasks.split(",")]
            tasks = [(name, name, {}) for name in names]
    except (ValueError, FileNotFoundError, KeyError) as err:
        print(f"envs.audit: {err}", file=sys.stderr)
        return 2
    counter = None
    if args.model:
        from transformers import AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(args.model)
        except (OSError, ValueError) as err:
            print(f"envs.audit: --model {args.model}: cannot load its tokenizer ({str(err).splitlines()[0]}); give a "
                  "model folder with its tokenizer files", file=sys.stderr)
            return 2
        counter = prompt_counter(tokenizer, args.system_prompt, args.chat_template_kwargs)
    where = "every task" if args.all_tasks else args.mix or args.tasks
    print(f"[audit] {where}: {len(tasks)} task(s), {args.items} {SPLIT} items each, seed {args.seed}"
          + (", strict_answers=false" if args.loose else ""), file=sys.stderr)
    audits = []
    for key, task, config in tasks:
        audits.append(audit_task(key, task, config, args.items, args.seed, not args.loose, counter))
        if not args.markdown:
            print(f"[audit] {audits[-1].line(args.max_prompt_length)}", flush=True)
    if args.markdown:
        print(markdown_table(audits))
    bad = failed(audits, args.max_prompt_length)
    print(f"[audit] {'FAILED: see MISSED, HOLE or the prompt lengths above' if bad else 'passed'}"
          + ("; --loose: strict_answers would close what it names for " + ", ".join(sorted(ANSWER_SHAPES))
             if args.loose else ""), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
