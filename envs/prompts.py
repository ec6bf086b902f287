"""The one prompt rendering used by training, preflight and evaluation: chat messages for a question, and the text
the model's chat template makes of them (as verl's agent loop renders them, with `data.apply_chat_template_kwargs`)."""

from __future__ import annotations

from typing import Any, Mapping

from reasoning_gym.utils import SYSTEM_PROMPTS

DEFAULT_SYSTEM_PROMPT = "DeepSeekZero"  # the prompt of the published Reasoning Gym experiments


def resolve_system_prompt(name_or_text: str | None) -> str | None:
    """Returns the system prompt text: a Reasoning Gym SYSTEM_PROMPTS name, literal text, or None/"" for none.

    A single word that is not a known name is refused (it is almost surely a typo of a name, not a prompt).
    """
    if not name_or_text:
        return None
    if name_or_text in SYSTEM_PROMPTS:
        return SYSTEM_PROMPTS[name_or_text]
    if " " not in name_or_text.strip():
        raise ValueError(
            f"unknown system prompt name '{name_or_text}': use one of {', '.join(SYSTEM_PROMPTS)} or a full text"
        )
    return name_or_text


def build_messages(question: str, system_prompt: str | None) -> list[dict[str, str]]:
    """Returns chat messages [system?, user] for a question; `system_prompt` is already resolved text or None."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": question})
    return messages


def render_prompt(tokenizer: Any, messages: list[dict[str, str]], chat_template_kwargs: Mapping[str, Any] | None = None
                  ) -> str:
    """Returns the prompt text the model continues: the chat template with the generation prompt and the template's
    options (`enable_thinking`, ...: training's data.apply_chat_template_kwargs, the evaluator's
    model.chat_template_kwargs), as verl's agent loop applies it before tokenizing."""
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False,
                                         **dict(chat_template_kwargs or {}))


def prompt_opens_think(prompt_text: str) -> bool:
    """True if the rendered prompt ends inside an opened think block (`<think>` and optional whitespace), as
    DeepSeek-R1's distills and Qwen3's template with thinking on do: the response then starts in the reasoning."""
    return prompt_text.rstrip().endswith("<think>")
