"""The scorer audit: each task of a mix tried with its gold answers and near misses, and its prompts measured.

    python -m envs.audit --mix my_mix.yaml                                  # one line a task
    python -m envs.audit --mix quickstart --model PATH --max-prompt-length 128 --system-prompt "Answer ..."
    python -m envs.audit --all-tasks --markdown                             # docs/task-stream.md's table

On `items` items a task it scores the gold answer (the entry's, or its example answer where several are right) and
near misses of it: text appended, the answer twice, its last letter or digit dropped, its case swapped, its spacing
changed, an empty answer. A near miss with the gold's value (`12.0` for `12.00`, a list spaced otherwise, fewer
decimals) is not tried. A near miss that scores as right is accepted when envs.scorers.ACCEPTED_LENIENCIES says why it
is harmless; otherwise it is a hole, and the command exits 1, as it does when a gold answer does not score 1 or a
prompt is longer than --max-prompt-length. Scoring is envs.reward.score_answer's, the one training and evaluation use.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from envs.curriculum import leveled_config
from envs.generation import generate_entry
from envs.mix import load_mix, mix_path
from envs.reward import score_answer
from envs.scorers import ACCEPTED_LENIENCIES, ANSWER_SHAPES, REPAIRED_SCORERS
from envs.tasks import SLOW_TASKS, all_tasks, check_task_name

NEAR_MISSES = ("appended", "twice", "dropped_last", "case", "whitespace", "empty")
EXAMPLE_ANSWER_KEYS = ("example_answer", "example_correct_answer", "possible_answer")
ITEMS = 24
SLOW_ITEMS = 4  # at most this many items of a slow generator (futoshiki: 3 s an item): a mix's audit takes seconds
SLOW = SLOW_TASKS | {"acre", "arc_agi"}
SPLIT = "validation"  # the items training validates on and the held-out tasks' items


def gold_answer(entry: dict[str, Any]) -> str | None:
    """The entry's answer; for tasks with several right answers (answer None), the example its metadata holds."""
    if entry["answer"] is not None:
        return str(entry["answer"])
    metadata = entry.get("metadata", {})
    for key in EXAMPLE_ANSWER_KEYS:
        if key in metadata:
            value = metadata[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


def _parsed(text: str) -> Any:
    for parse in (float, ast.literal_eval):
        try:
            return parse(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def same_answer(a: str, b: str) -> bool:
    """True if two answers are the same text or parse to the same number or Python literal ("12.0" and "12.00",
    "[1, 2]" and "[1,2]")."""
    if a.strip() == b.strip():
        return True
    parsed = _parsed(a)
    return parsed is not None and parsed == _parsed(b)


def _drop_last_letter_or_digit(gold: str) -> str | None:
    """The gold without its last letter or digit; None when there is none, or when that digit is a number's last
    decimal and a 0 ("-100.0" -> "-100.", the same number) or one of two or more ("3.14" -> "3.1", a rounding that a
    task's tolerance may accept)."""
    for i in range(len(gold) - 1, -1, -1):
        if gold[i].isalnum():
            if re.search(r"\d\.(?:\d*0|\d{2,})$", gold[:i + 1]):
                return None
            return gold[:i] + gold[i + 1:]
    return None


def near_misses(gold: str) -> dict[str, str]:
    """{case: wrong answer} for the NEAR_MISSES of `gold` that differ from it in value (see same_answer)."""
    middle = len(gold) // 2
    spacing = re.sub(r"\s+", "", gold) if re.search(r"\s", gold.strip()) else gold[:middle] + " " + gold[middle:]
    cases = {"appended": gold + "xyz", "twice": f"{gold} {gold}", "dropped_last": _drop_last_letter_or_digit(gold),
             "case": gold.swapcase(), "whitespace": spacing if middle else None, "empty": ""}
    return {name: text for name, text in cases.items() if text is not None and not same_answer(text, gold)}


@dataclass
class TaskAudit:
    """What the audit found for one task of a mix."""

    key: str  # the mix key
    task: str  # Reasoning Gym task name
    items: int = 0  # items with a gold answer, tried
    no_gold: int = 0  # items whose answer is checked procedurally, with no example answer to try
    gold_missed: list[str] = field(default_factory=list)  # the gold answers that did not score 1, with their scores
    tried: Counter = field(default_factory=Counter)  # near miss -> items it was tried on
    accepted: Counter = field(default_factory=Counter)  # near miss -> items where it scored as right
    prompt_tokens: int | None = None  # the longest rendered prompt, when a tokenizer was given

    @property
    def holes(self) -> list[str]:
        """Near misses that scored as right and that envs.scorers.ACCEPTED_LENIENCIES does not explain."""
        known = ACCEPTED_LENIENCIES.get(self.task, {})
        return [case for case in NEAR_MISSES if self.accepted[case] and case not in known]

    @property
    def scorer(self) -> str:
        return "repaired" if self.task in REPAIRED_SCORERS else "Reasoning Gym's"

    def prompt_problem(self, max_prompt_length: int | None) -> str | None:
        if max_prompt_length is None or self.prompt_tokens is None or self.prompt_tokens <= max_prompt_length:
            return None
        return (f"task {self.key}: its prompts reach {self.prompt_tokens} tokens > data.max_prompt_length="
                f"{max_prompt_length}; set data.max_prompt_length={self.prompt_tokens} or more, or make the task "
                "easier in the mix")

    def findings(self) -> tuple[str, str]:
        """(gold, near misses): the two halves of the audit's line and table row for this task."""
        if not self.items:
            return f"no gold answer to try ({self.no_gold} items checked procedurally)", "-"
        gold = f"1 on {self.items - len(self.gold_missed)}/{self.items}"
        if self.gold_missed:
            gold += f" (MISSED: {'; '.join(self.gold_missed[:2])})"
        known = ACCEPTED_LENIENCIES.get(self.task, {})
        parts = [f"{case} {self.accepted[case]}/{self.tried[case]}"
                 + (f" accepted: {known[case]}" if case in known else " HOLE: a wrong answer scores as right")
                 for case in NEAR_MISSES if self.accepted[case]]
        return gold, "; ".join(parts) or "none scores as right"

    def line(self, max_prompt_length: int | None = None) -> str:
        """One line for the console: scorer, gold, near misses that scored as right and why, prompt length."""
        gold, misses = self.findings()
        text = f"{self.key}: {self.scorer} scorer; gold {gold}; near misses: {misses}"
        if self.prompt_tokens is not None:
            text += "; " + (self.prompt_problem(max_prompt_length) or f"prompts <= {self.prompt_tokens} tokens")
        return text


def audit_task(key: str, task: str, config: dict[str, Any], items: int = ITEMS, seed: int = 0, strict: bool = False,
               prompt_tokens: Callable[[str], int] | None = None) -> TaskAudit:
    """Tries `items` items of `task` (SLOW_ITEMS at most for a slow generator; its `config`, the validation split at
    `seed`); `strict`: strict_answers on; `prompt_tokens(question)`: the rendered prompt's length in tokens."""
    audit = TaskAudit(key, task)
    for position in range(min(items, SLOW_ITEMS) if task in SLOW else items):
        entry = generate_entry(task, config, SPLIT, seed, position)
        if prompt_tokens is not None:
            audit.prompt_tokens = max(audit.prompt_tokens or 0, prompt_tokens(entry["question"]))
        gold = gold_answer(entry)
        if gold is None:
            audit.no_gold += 1
            continue
        audit.items += 1
        score, reason = score_answer(task, gold, entry, config, strict)
        if score != 1.0:
            audit.gold_missed.append(f"item {position} scored {score:g}" + (f" ({reason[:80]})" if reason else ""))
        for case, text in near_misses(gold).items():
            audit.tried[case] += 1
            audit.accepted[case] += score_answer(task, text, entry, config, strict)[0] == 1.0
    return audit


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
    rows = ["| task | scorer | gold scores 1 | near misses that score as right (items) |", "|---|---|---|---|"]
    for audit in audits:
        gold, misses = audit.findings()
        rows.append(f"| {audit.key} | {audit.scorer} | {gold} | {misses.replace('|', '/')} |")
    return "\n".join(rows)


def failed(audits: Sequence[TaskAudit], max_prompt_length: int | None = None) -> bool:
    """True if a gold answer missed, a near miss is a hole, or a prompt is over the limit."""
    return any(a.gold_missed or a.holes or a.prompt_problem(max_prompt_length) for a in audits)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m envs.audit", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--mix", help="a mix: configs/mix/NAME.yaml's NAME or a YAML file's path")
    which.add_argument("--tasks", help="task names, comma-separated, at their default configs")
    which.add_argument("--all-tasks", action="store_true", help="every Reasoning Gym task at its default config")
    parser.add_argument("--items", type=int, default=ITEMS, help=f"items a task (default {ITEMS})")
    parser.add_argument("--seed", type=int, default=0, help="the validation split's seed (env.seed)")
    parser.add_argument("--strict", action="store_true", help="score as the strict_answers reward option does")
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
          + (", strict_answers" if args.strict else ""), file=sys.stderr)
    audits = []
    for key, task, config in tasks:
        audits.append(audit_task(key, task, config, args.items, args.seed, args.strict, counter))
        if not args.markdown:
            print(f"[audit] {audits[-1].line(args.max_prompt_length)}", flush=True)
    if args.markdown:
        print(markdown_table(audits))
    bad = failed(audits, args.max_prompt_length)
    print(f"[audit] {'FAILED: see MISSED, HOLE or the prompt lengths above' if bad else 'passed'}; strict_answers "
          f"closes what it names for {', '.join(sorted(ANSWER_SHAPES))}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
