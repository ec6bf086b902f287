"""Reading what a reasoning model writes: the response as the template renders it, the answer only after the
reasoning closes, `\\boxed{}` with nested braces, and the format check per accepted answer form."""

import pytest
from verl.utils.reward_score.math_dapo import last_boxed_only_string, remove_boxed

from envs.answers import after_reasoning, as_rendered, describe_format, final_answer, format_ok, last_boxed

BOTH = ("answer", "boxed")


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{\\frac{1}{2}} and later \\boxed{x^{2}+1}", "x^{2}+1"),
    ("\\boxed{{a}, {b}}", "{a}, {b}"),
    ("\\boxed{7} then \\boxed{unclosed", "7"),  # an unclosed box at the end leaves the earlier one
    ("\\boxed{", None),
    ("no box at all", None),
])
def test_last_boxed_reads_nested_braces_as_verl_does(text, expected):
    assert last_boxed(text) == expected
    if expected is not None and "unclosed" not in text:  # verl's reader (math_dapo) gives the same content
        assert remove_boxed(last_boxed_only_string(text)) == expected


def test_last_boxed_is_linear_on_many_unclosed_boxes():
    import time

    text = "\\boxed{" * 20_000
    start = time.perf_counter()
    assert last_boxed(text) is None
    assert time.perf_counter() - start < 2.0


def test_a_prompt_that_opened_the_think_block_is_rendered_back():
    response = "12 + 7 is 19, hmm, 20?</think>\n<answer>19</answer>"
    assert as_rendered(response, True).startswith("<think>12")
    assert as_rendered(response, False) == response
    assert after_reasoning(as_rendered(response, True)) == "\n<answer>19</answer>"


@pytest.mark.parametrize("rendered, final", [
    ("<think>try <answer>5</answer></think> <answer>6</answer>", " <answer>6</answer>"),  # last </think> counts
    ("<think>a</think>b</think>c", "c"),
    ("<think>still thinking 42", None),  # the reasoning never closed: no answer at all
    ("plain answer 42", "plain answer 42"),
])
def test_the_answer_is_read_after_the_reasoning_closes(rendered, final):
    assert after_reasoning(rendered) == final


def test_final_answer_per_form():
    assert final_answer("The answer is \\boxed{8}.", ("answer",)) is None
    assert final_answer("The answer is \\boxed{8}.", BOTH) == "8"
    assert final_answer("The answer is \\boxed{8}.", ("boxed",)) == "8"
    assert final_answer("<answer>\\boxed{ 9 }</answer>", BOTH) == "9"  # unwrapped inside the block
    assert final_answer("<answer>\\boxed{9}</answer>", ("answer",)) == "\\boxed{9}"
    assert final_answer("\\boxed{1} <answer>2</answer>", BOTH) == "2"  # the block wins over a box outside it
    assert final_answer("<answer>3</answer>", ("boxed",)) is None


@pytest.mark.parametrize("rendered, require_think, forms, ok", [
    ("<think>a</think>\n<answer>1</answer>", True, ("answer",), True),
    ("<answer>1</answer>", True, ("answer",), False),
    ("reasoning <answer>1</answer>\n", False, ("answer",), True),
    ("<answer>1</answer><answer>2</answer>", False, ("answer",), False),
    ("<think>a</think><answer>1</answer> trailing", True, ("answer",), False),
    ("<think>a</think> So the sum is \\boxed{5}.", True, ("answer",), False),
    ("<think>a</think> So the sum is \\boxed{5}.", True, BOTH, True),
    ("<think>a</think> So the sum is \\boxed{5}.", False, ("boxed",), True),
    ("<think>a</think> no box here", True, BOTH, False),
    ("<think>a</think><answer>5</answer>", True, ("boxed",), False),
    ("<think>never closed \\boxed{5}", False, BOTH, False),
    ("<think><think>a</think><answer>1</answer>", True, ("answer",), False),  # a second opening tag
    ("x <think>a</think><answer>1</answer>", False, ("answer",), False),  # text before the reasoning
])
def test_format_per_accepted_form(rendered, require_think, forms, ok):
    assert format_ok(rendered, require_think, forms) is ok


def test_the_format_reward_says_what_it_accepts():
    assert describe_format(True, BOTH) == "<think>...</think> then <answer>...</answer> or a text with \\boxed{...}"
    assert describe_format(False, ("answer",)) == "[<think>...</think>] then <answer>...</answer>"
