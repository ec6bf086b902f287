"""The reward: extraction, options, repaired scorers, and every Reasoning Gym task through verl's reward manager."""

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

from envs.answers import extract_answer, format_ok, last_number
from envs.audit import gold_answer
from envs.generation import generate_entry
from envs.reward import RewardOptions, score_response
from envs.tasks import all_tasks

REPO = Path(__file__).resolve().parents[2]
NO_EXAMPLE = {"boxnet", "rush_hour"}  # answer is None and the metadata holds no example valid answer


@pytest.mark.parametrize("text, answer", [
    ("<think>t</think><answer> 42 </answer>", "42"),
    ("<answer>3</answer> then <answer>5", "3"),
    ("<answer><answer>x</answer></answer>", "x"),
    ("</answer><answer>7</answer>", "7"),
    ("no tags", None),
    ("<answer>unclosed", None),
    ("", None),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_format_check():
    assert format_ok("<think>a</think>\n<answer>1</answer>", require_think=True)
    assert not format_ok("<answer>1</answer>", require_think=True)
    assert format_ok("reasoning <answer>1</answer>\n", require_think=False)
    assert not format_ok("<answer>1</answer><answer>2</answer>", require_think=False)
    assert not format_ok("<think>a</think><answer>1</answer> trailing", require_think=True)


def entry_of(task, position=0, config=None):
    return generate_entry(task, config or {}, "train", 0, position)


def test_options_partial_binarised_format_overlong():
    entry = entry_of("chain_sum")
    wrapped = f"xx {entry['answer']}"  # RG's substring partial credit
    partial = score_response(f"<answer>{wrapped}</answer>", entry, options=RewardOptions(partial_credit=True))
    assert 0 < partial["score"] < 1 and partial["acc"] == 0.0
    assert score_response(f"<answer>{wrapped}</answer>", entry)["score"] == 0.0
    good = f"<think>ok</think><answer>{entry['answer']}</answer>"
    with_format = score_response(good, entry, options=RewardOptions(format_reward=0.2, require_think=True))
    assert with_format["score"] == pytest.approx(1.2) and with_format["format_ok"] == 1.0
    overlong = RewardOptions(max_response_length=100, overlong_buffer=20)
    assert score_response(good, entry, options=overlong, response_length=90)["score"] == pytest.approx(0.5)
    assert score_response(good, entry, options=overlong, response_length=100)["score"] == pytest.approx(0.0)
    assert score_response(good, entry, options=overlong, response_length=70)["score"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"unknown reward option\(s\) \['format_bonus'\]"):
        RewardOptions.from_kwargs({"format_bonus": 1})


def test_answer_fallback_scores_the_last_line_without_counting_it_as_found():
    entry = entry_of("chain_sum")
    text = f"Let me add.\n{entry['answer']}\n"
    assert score_response(text, entry)["score"] == 0.0
    result = score_response(text, entry, options=RewardOptions(answer_fallback=True))
    assert result["score"] == 1.0 and result["answer_found"] == 0.0 and "last line" in result["reason"]


def test_last_number_fallback_reads_the_number_a_sentence_ends_with():
    entry = entry_of("chain_sum")
    options = RewardOptions(answer_fallback="last_number")
    right = score_response(f"First 10 + 2, so the sum is {entry['answer']}.", entry, options=options)
    assert right["acc"] == 1.0 and right["pred"] == entry["answer"] and "last number" in right["reason"]
    assert score_response(f"It is {entry['answer']}, or maybe 99999.", entry, options=options)["acc"] == 0.0
    assert score_response(f"<answer>99999</answer> {entry['answer']}", entry, options=options)["acc"] == 0.0
    assert last_number("x = -3.5 then 7") == "7" and last_number("minus -12.") == "-12" and last_number("none") is None
    with pytest.raises(ValueError, match="answer_fallback='first_line'"):
        RewardOptions(answer_fallback="first_line")


def test_game_of_life_halting_is_repaired():
    entry = entry_of("game_of_life_halting")
    wrong = "False" if entry["answer"] == "True" else "True"
    assert score_response(f"<answer>{entry['answer']}</answer>", entry)["acc"] == 1.0
    assert score_response(f"<answer>{wrong}</answer>", entry)["score"] == 0.0
    assert score_response("<answer>banana</answer>", entry)["score"] == 0.0


def test_scorer_exceptions_score_zero_with_reason():
    entry = entry_of("prime_factorization")
    result = score_response("<answer>x × ÷ 2</answer>", entry)
    assert result["score"] == 0.0 and "scorer raised" in result["reason"]


ADVERSARIAL = {
    "empty": "",
    "whitespace": "   \n ",
    "1MB": "<answer>" + "9" * (1 << 20) + "</answer>",
    "invalid unicode": "<answer>\ud800</answer>",
    "nested tags": "<answer><answer>zzz</answer></answer>",
    "unclosed tag": "<think>hmm<answer>zzz",
    "no tags": "the answer is 42",
}


@pytest.fixture(scope="module")
def reward_manager(tiny_tokenizer):
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"reward.custom_reward_function.path={REPO / 'envs' / 'verl_reward.py'}",
            "reward.custom_reward_function.name=compute_score",
            "+reward.custom_reward_function.reward_kwargs.format_reward=0.0",
        ])
    return load_reward_manager(config, tiny_tokenizer)


def as_dataproto(tokenizer, task, entry, response):
    prompt = torch.tensor([[1, 2, 3]])
    ids = tokenizer(response, add_special_tokens=False, return_tensors="pt").input_ids if response else torch.zeros((1, 0), dtype=torch.long)
    responses = torch.cat([ids, torch.zeros((1, 1), dtype=torch.long)], dim=1)  # one pad so empty responses have a slot
    mask = torch.cat([torch.ones_like(prompt), torch.ones_like(ids), torch.zeros((1, 1), dtype=torch.long)], dim=1)
    return DataProto.from_single_dict({
        "prompts": prompt, "responses": responses, "attention_mask": mask,
        "data_source": np.array([f"reasoning_gym/{task}"], dtype=object),
        "reward_model": np.array([{"ground_truth": entry["answer"]}], dtype=object),
        "extra_info": np.array([{"entry": entry, "task": task, "task_name": task, "config": {}}], dtype=object),
    })


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_task_through_verls_reward_manager(reward_manager, tiny_tokenizer):
    """Correct (the entry's own or example answer), wrong, malformed and adversarial responses, for all 105 tasks."""
    cases = []
    for task in all_tasks():
        entry = entry_of(task)
        if task not in NO_EXAMPLE:
            cases.append((task, entry, f"<think>x</think><answer>{gold_answer(entry)}</answer>", "correct"))
        cases.append((task, entry, "<answer>definitely not it</answer>", "wrong"))
        # token ids cannot hold lone surrogates, so that case is tested on compute_score directly (test_isolation)
        cases += [(task, entry, text, name) for name, text in ADVERSARIAL.items() if name not in ("invalid unicode", "1MB")]
    for task in ("chain_sum", "countdown", "prime_factorization"):  # 1 MB takes seconds to tokenize: a few tasks suffice
        cases.append((task, entry_of(task), ADVERSARIAL["1MB"], "1MB"))

    async def run_all():
        return await asyncio.gather(*[
            reward_manager.run_single(as_dataproto(tiny_tokenizer, task, entry, text)) for task, entry, text, _ in cases])

    results = reward_manager.loop.run_until_complete(run_all())
    failures = []
    for (task, entry, text, kind), result in zip(cases, results):
        info, score = result["reward_extra_info"], result["reward_score"]
        if kind == "correct" and info["acc"] != 1.0:
            failures.append((task, kind, info["reason"], info["pred"]))
        if kind != "correct" and (info["acc"] != 0.0 or score > 0.3):  # partial-credit tasks may give small scores
            failures.append((task, kind, score, info["reason"]))
        if kind in ADVERSARIAL and kind not in ("nested tags",) and info["answer_found"] and kind != "1MB":
            failures.append((task, kind, "answer found"))
        assert isinstance(info["reason"], str) and info["task"] == task
    assert failures == []


def test_the_length_key_says_its_unit():
    """verl logs every key: a length is `response_length` only in tokens, else `response_chars`."""
    entry = entry_of("chain_sum")
    text = f"<answer>{entry['answer']}</answer>"
    chars = score_response(text, entry)
    assert chars["response_chars"] == len(text) and "response_length" not in chars
    tokens = score_response(text, entry, response_length=7)
    assert tokens["response_length"] == 7 and "response_chars" not in tokens
    assert "response_chars" in score_response(None, entry) and "response_length" in score_response("", entry, response_length=0)


@pytest.mark.parametrize("isolate", [True, False])
def test_compute_score_counts_tokens_with_the_tokenizer(tiny_model_dir, tiny_tokenizer, isolate):
    from envs.verl_reward import compute_score

    entry = entry_of("chain_sum")
    extra = {"entry": entry, "task": "sums", "task_name": "chain_sum", "config": {}}
    texts = [f"<think>adding 12 + 7</think>\n<answer>{entry['answer']}</answer>", "", "no tags at all \ud800 here"]

    async def run(**kwargs):
        return await asyncio.gather(*[compute_score("reasoning_gym/chain_sum", t, entry["answer"], extra,
                                                    isolate=isolate, **kwargs) for t in texts])

    counted = asyncio.run(run(tokenizer_path=str(tiny_model_dir)))
    expected = [len(tiny_tokenizer.encode(texts[0], add_special_tokens=False)), 0]
    assert [r["response_length"] for r in counted[:2]] == expected and expected[0] > 0
    assert counted[2]["response_length"] > 0 and counted[2]["score"] == 0.0  # invalid Unicode: counted, scored 0
    assert all("response_chars" not in r for r in counted) and counted[0]["score"] == 1.0
    assert [r["response_chars"] for r in asyncio.run(run())] == [float(len(t)) for t in texts]
    with pytest.raises(ValueError, match="needs the tokenizer_path"):
        asyncio.run(run(max_response_length=100, overlong_buffer=20))


def test_a_reasoning_models_response_is_judged_as_the_template_renders_it():
    """A prompt that opened the think block: the response has no `<think>`, its answer counts only after `</think>`,
    a number in the reasoning never does, and an unclosed reasoning has no answer (not even by a fallback)."""
    entry = entry_of("chain_sum")
    right, options = entry["answer"], RewardOptions(format_reward=0.1, require_think=True, answer_fallback="last_number")
    response = f"Adding up gives {right}.\n</think>\n\n<answer>{right}</answer>"
    opened = score_response(response, entry, options=options, prompt_opens_think=True)
    assert opened["acc"] == 1.0 and opened["format_ok"] == 1.0 and opened["score"] == pytest.approx(1.1)
    # without the flag the same text has a </think> that nothing opened: right answer, bad format
    assert score_response(response, entry, options=options)["format_ok"] == 0.0
    in_reasoning = score_response(f"so it is {right}</think> I give up: 99999", entry, options=options,
                                  prompt_opens_think=True)
    assert in_reasoning["acc"] == 0.0 and in_reasoning["pred"] == "99999"
    unclosed = score_response(f"the sum is {right}", entry, options=options, prompt_opens_think=True)
    assert unclosed["acc"] == 0.0 and unclosed["pred"] is None and "never closed" in unclosed["reason"]


def test_boxed_answers_where_configured():
    entry = entry_of("chain_sum")
    response = f"<think>12 + 7</think>\nThe sum is $\\boxed{{{entry['answer']}}}$."
    tags_only = score_response(response, entry, options=RewardOptions(format_reward=0.5, require_think=True))
    assert tags_only["acc"] == 0.0 and tags_only["format_ok"] == 0.0 and "no <answer>" in tags_only["reason"]
    both = RewardOptions(format_reward=0.5, require_think=True, answer_forms=["boxed", "answer"])
    assert both.answer_forms == ("answer", "boxed")  # one spelling
    boxed = score_response(response, entry, options=both)
    assert boxed["acc"] == 1.0 and boxed["answer_found"] == 1.0 and boxed["score"] == pytest.approx(1.5)
    assert "\\boxed" in both.format_description() and "<answer>" in both.format_description()
    missing = score_response("<think>x</think> no answer", entry, options=both)
    assert missing["reason"] == "no <answer> block or \\boxed{} after the reasoning"
    with pytest.raises(ValueError, match="answer_forms='latex'"):
        RewardOptions(answer_forms="latex")


def test_the_flag_travels_from_the_item_through_compute_score():
    from envs.verl_reward import compute_score

    entry = entry_of("chain_sum")
    extra = {"entry": entry, "task": "sums", "task_name": "chain_sum", "config": {}, "prompt_opens_think": True}
    text = f"thinking {entry['answer']}</think><answer>{entry['answer']}</answer>"
    result = asyncio.run(compute_score("reasoning_gym/chain_sum", text, entry["answer"], extra, require_think=True,
                                       format_reward=1.0, isolate=True))
    assert result["format_ok"] == 1.0 and result["score"] == 2.0


@pytest.mark.parametrize("option, score", [("as_is", 1.0), ("zero", 0.0), ("penalty", -0.5)])
def test_a_cut_response_is_scored_by_the_truncated_option(option, score):
    from envs.reward import score_truncated

    entry = entry_of("chain_sum")
    options = RewardOptions(truncated=option, overlong_penalty=0.5)
    assert RewardOptions().truncated == "as_is"  # the default: a cut reasoning has no answer anyway
    cut = score_truncated(score_response(f"<answer>{entry['answer']}</answer>", entry, options=options), True, options)
    assert cut["score"] == score and cut["acc"] == 1.0 and cut["truncated"] == 1.0
    assert option == "as_is" or f"truncated={option}" in cut["reason"]
    whole = score_truncated(score_response(f"<answer>{entry['answer']}</answer>", entry, options=options), False, options)
    assert whole["score"] == 1.0 and whole["truncated"] == 0.0
    with pytest.raises(ValueError, match="truncated='cut'"):
        RewardOptions(truncated="cut")


def test_verls_naive_manager_hands_the_agent_loops_cut_mark_to_compute_score(tiny_tokenizer):
    """Contract: training/trainer/seeding.py marks a cut response in the agent loop's extra fields; verl's naive reward
    manager merges those (`tool_extra_fields`) into extra_info, where compute_score reads `response_truncated`."""
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"reward.custom_reward_function.path={REPO / 'envs' / 'verl_reward.py'}",
            "reward.custom_reward_function.name=compute_score",
            "+reward.custom_reward_function.reward_kwargs.truncated=zero",
            "+reward.custom_reward_function.reward_kwargs.isolate=false",
        ])
    manager = load_reward_manager(config, tiny_tokenizer)
    entry = entry_of("chain_sum")

    def run(cut):
        data = as_dataproto(tiny_tokenizer, "chain_sum", entry, f"<answer>{entry['answer']}</answer>")
        data.non_tensor_batch["tool_extra_fields"] = np.array([{"response_truncated": cut}], dtype=object)
        return manager.loop.run_until_complete(manager.run_single(data))

    cut, whole = run(True), run(False)
    assert cut["reward_score"] == 0.0 and cut["reward_extra_info"]["truncated"] == 1.0
    assert whole["reward_score"] == 1.0 and whole["reward_extra_info"]["truncated"] == 0.0


@pytest.mark.parametrize("task, gold, wrong", [
    ("spell_backward", "ytilaidola", "ytilaidolaxyz"),  # RG's float sum: 0.9999999999999999
    ("spell_backward", "eripsnier", "eripsnieri"),  # 1.0000000000000002
    ("letter_jumble", "the cat", "the cat sat"),  # 1.0 exactly (two words)
    ("letter_jumble", "one two three", "one two three four"),  # 0.9999999999999998
    ("coin_flip", "0.5", "0."),  # RG's prefix share of the shorter text: 1.0
    ("coin_flip", "0.125", "0.1"),
])
def test_a_wrong_answer_never_gets_full_marks(task, gold, wrong):
    """The holes Reasoning Gym 0.1.25's scorers had: partial credit that reached or rounded to 1 for a wrong answer.
    Binarised it scores 0; with partial credit it keeps credit below 1."""
    entry = {"question": "q", "answer": gold, "metadata": {"source_dataset": task}}
    assert score_response(f"<answer>{gold}</answer>", entry, task)["acc"] == 1.0
    binarised = score_response(f"<answer>{wrong}</answer>", entry, task)
    assert binarised["acc"] == 0.0 and binarised["score"] == 0.0
    partial = score_response(f"<answer>{wrong}</answer>", entry, task, RewardOptions(partial_credit=True))
    assert partial["acc"] == 0.0 and 0.0 < partial["score"] < 1.0


def test_the_repairs_keep_reasoning_gyms_partial_credit():
    from envs.scorers import REPAIRED_SCORERS

    spell, jumble = REPAIRED_SCORERS["spell_backward"], REPAIRED_SCORERS["letter_jumble"]
    assert spell("abcdx", {"answer": "abcde"}) == pytest.approx(0.8)  # 4 of 5 letters in place
    assert spell("ABCDEF", {"answer": "abcde"}) == pytest.approx(0.8)  # all in place, more after: less 0.2
    assert spell("EDCBA", {"answer": "edcba"}) == 1.0  # case, as RG
    assert jumble("The dog", {"answer": "the cat"}) == pytest.approx(0.5)
    number_sorting = REPAIRED_SCORERS["number_sorting"]
    entry = {"answer": "['27.0', '21.1', '-21.73']", "metadata": {"direction": "descending"}}
    assert number_sorting("['27.0', '21.1', '-21.73']", entry) == 1.0
    assert number_sorting("['27', '21.1', '-21.73']", entry) == 1.0  # the same numbers
    assert number_sorting("['27.0', '21.1', '-21.7']", entry) == 0.0  # RG's tolerance of 1 took it


@pytest.mark.parametrize("value, raw, outside", [
    (1.0, 1.0, False), (1.0 + 2e-16, "partial max", False), (0.9999999999999999, "partial max", False),
    (-1e-12, 0.0, False), (1.5, 0.0, True), (float("nan"), 0.0, True),
])
def test_only_an_exact_one_is_full_marks_and_a_hair_outside_is_clamped(monkeypatch, value, raw, outside):
    from envs import reward

    raw = reward.PARTIAL_MAX if raw == "partial max" else raw
    monkeypatch.setattr(reward, "scorer_for", lambda task, config: (lambda answer, entry: value))
    entry = {"question": "q", "answer": "x", "metadata": {"source_dataset": "chain_sum"}}
    assert reward.rg_score("chain_sum", "y", entry) == (raw, f"scorer returned {value}, outside [0, 1]" if outside else "")
    result = reward.score_response("<answer>y</answer>", entry, options=RewardOptions(partial_credit=True))
    assert result["acc"] == float(value == 1.0) and result["score"] == raw


def test_an_empty_right_answer_scores_one():
    entry = {"question": "q", "answer": "", "metadata": {"source_dataset": "string_manipulation"}}
    assert score_response("<answer></answer>", entry)["acc"] == 1.0
    assert score_response("<answer>a</answer>", entry)["acc"] == 0.0


@pytest.mark.parametrize("task, right, wrong", [
    ("gsm_symbolic", "12", ["12 12", "12 or 13", "12 dollars"]),
    ("fraction_simplification", "$\\dfrac{332}{971}$", ["$\\dfrac{332}{971}$xyz", "\\frac{332}{971} or 1/2"]),
    ("time_intervals", "12 days", ["12 days, maybe 13", "12 days 12 days"]),
])
def test_strict_answers_take_the_answer_alone(task, right, wrong):
    """RG reads the leading value of these answers and ignores the rest; strict_answers (the default) scores the rest
    0 while every form the scorer reads as right still scores 1."""
    metadata = {"source_dataset": task, "simplified_numerator": 332, "simplified_denominator": 971, "numerator": 664,
                "denominator": 1942, "task_type": "date"}
    entry = {"question": "q", "answer": right, "metadata": metadata}
    loose = RewardOptions(strict_answers=False)
    for text in wrong:
        assert score_response(f"<answer>{text}</answer>", entry, task, loose)["acc"] == 1.0
        result = score_response(f"<answer>{text}</answer>", entry, task)
        assert result["acc"] == 0.0 and "strict_answers" in result["reason"]
    assert score_response(f"<answer>{right}</answer>", entry, task)["acc"] == 1.0
    assert "strict_answers=false" in loose.describe() and "strict" not in RewardOptions().describe()
