"""Per-message framing of local models' chat templates, counted with the model's own tokenizer.

A model served by vLLM, llama.cpp or Ollama gets an OpenAI-style message list and renders it
into one prompt with its chat template; the framing the template puts around each message
(role header, end-of-turn marker) and around the whole conversation (begin-of-text, the reply
primer) costs tokens the message texts do not show.  A :class:`ChatTemplate` spells that
framing out per role; :func:`framing_counts` counts it with the tokenizer itself, so a
special token the tokenizer knows (``<|eot_id|>``) is one token and anything else is counted
as the text it is.

The families, and where their framing is written down:

* ``llama3``: Meta Llama 3, 3.1, 3.2, 3.3.  ``<|begin_of_text|>`` once, then per message
  ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content}<|eot_id|>``; the reply is primed
  with ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``; a tool's output takes the role
  ``ipython`` (3.1 and later).  Source: the Llama 3 model card's prompt format
  (https://www.llama.com/docs/model-cards-and-prompt-formats/meta-llama-3/ and
  .../llama3_1/) and the ``chat_template`` of ``meta-llama/Llama-3.1-8B-Instruct``'s
  ``tokenizer_config.json``.
* ``chatml``: Qwen 2 and 2.5 (and other ChatML models).  Per message
  ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; the reply is primed with
  ``<|im_start|>assistant\\n``; Qwen 2.5 wraps a tool's output as a user turn
  ``<tool_response>\\n{content}\\n</tool_response>``.  Source: the ``chat_template`` of
  ``Qwen/Qwen2.5-7B-Instruct``'s ``tokenizer_config.json`` and
  https://qwen.readthedocs.io/en/latest/getting_started/concepts.html (chat template).
  (Qwen 2.5 also inserts a default system text when a request has none; a request compiled
  without a system text is counted without it.)
* ``mistral``: Mistral 7B Instruct v0.3, Mixtral, Mistral Nemo.  ``<s>`` once, a user turn
  ``[INST] {content}[/INST]``, an assistant turn ``{content}</s>``, a tool's output
  ``[TOOL_RESULTS] {content}[/TOOL_RESULTS]``; a system text is folded into the last user
  turn.  Source: the ``chat_template`` of ``mistralai/Mistral-7B-Instruct-v0.3``'s
  ``tokenizer_config.json`` and mistral-common's tokenizer docs
  (https://docs.mistral.ai/guides/tokenization/).
* ``none``: no framing (a base model, or a tokenizer whose template is not one of these).

A message's framing is charged at its most expensive role, so one count per message holds
whatever role the request format gives it (a tool result is a ``tool`` message in OpenAI Chat
and part of a user turn in Anthropic Messages); the error is a token or two a message, on the
safe side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ChatTemplate", "CHAT_TEMPLATES", "CHAT_TEMPLATE_NAMES", "detect_template", "framing_counts"]


@dataclass(frozen=True)
class ChatTemplate:
    """The framing one chat-template family adds, as text.

    Attributes:
        name: the family's name (``chat_template`` in a recipe).
        start: text once before the first message (a begin-of-text token).
        message: per role, the text before and the text after a message's content.
        reply: the text that primes the model's reply, after the last message.
        markers: special tokens whose presence in a tokenizer's vocabulary names the family.
    """

    name: str
    start: str
    message: dict[str, tuple[str, str]]
    reply: str
    markers: tuple[str, ...]


def _llama3(role: str) -> tuple[str, str]:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n", "<|eot_id|>"


def _chatml(role: str) -> tuple[str, str]:
    return f"<|im_start|>{role}\n", "<|im_end|>\n"


CHAT_TEMPLATES: dict[str, ChatTemplate] = {
    "llama3": ChatTemplate(
        "llama3",
        start="<|begin_of_text|>",
        message={role: _llama3(role) for role in ("system", "user", "assistant", "ipython", "tool")},
        reply="<|start_header_id|>assistant<|end_header_id|>\n\n",
        markers=("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
    ),
    "chatml": ChatTemplate(
        "chatml",
        start="",
        message={
            **{role: _chatml(role) for role in ("system", "user", "assistant")},
            "tool": ("<|im_start|>user\n<tool_response>\n", "\n</tool_response><|im_end|>\n"),
        },
        reply="<|im_start|>assistant\n",
        markers=("<|im_start|>", "<|im_end|>"),
    ),
    "mistral": ChatTemplate(
        "mistral",
        start="<s>",
        message={
            "user": ("[INST] ", "[/INST]"),
            "system": ("[INST] ", "\n\n"),  # folded into the last user turn, before its text
            "assistant": ("", "</s>"),
            "tool": ("[TOOL_RESULTS] ", "[/TOOL_RESULTS]"),
        },
        reply="",
        markers=("[INST]", "[/INST]"),
    ),
    "none": ChatTemplate("none", start="", message={"user": ("", "")}, reply="", markers=()),
}

#: The values ``chat_template`` takes in a recipe.
CHAT_TEMPLATE_NAMES: tuple[str, ...] = tuple(CHAT_TEMPLATES)


def detect_template(has_token: Callable[[str], bool]) -> str:
    """Return the chat-template family whose special tokens a tokenizer has (``"none"`` if no family's).

    Args:
        has_token: whether the tokenizer's vocabulary holds a token (``Tokenizer.token_to_id``
            is not ``None``).
    """
    for template in CHAT_TEMPLATES.values():
        if template.markers and all(has_token(marker) for marker in template.markers):
            return template.name
    return "none"


def framing_counts(template: ChatTemplate, count: Callable[[str], int]) -> tuple[int, int]:
    """Return ``(per_message, per_request)``: the framing tokens of ``template`` under ``count``.

    Args:
        template: the family.
        count: the tokenizer's count of a text (tokens), special tokens recognized.

    Returns:
        ``per_message``: the most any role's framing costs (tokens); ``per_request``: the
        start text and the reply primer (tokens).
    """
    per_message = max(count(before) + count(after) for before, after in template.message.values())
    return per_message, count(template.start) + count(template.reply)
