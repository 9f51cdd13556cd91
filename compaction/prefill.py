"""Requests that end on an assistant turn, and the models that refuse them (assistant prefill).

A compiled request ends with the store's newest message other than a system one (system
messages ride in the system text).  When that message is the assistant's (an agent stopped
after its own reply, a turn cut after its reasoning), the request ends on an assistant turn,
which a provider reads as a *prefill*: the model is to continue that turn.  Claude 4.6 models
refuse it: "Prefilling assistant messages returns a 400 error on Claude 4.6 models" (Anthropic's
migration guide, https://platform.claude.com/docs/en/about-claude/models/migration-guide, and
"What's new in Claude 4.6", section "Prefill removal"); the API answers "This model does not
support assistant message prefill. The conversation must end with a user message." (quoted in
ericc-ch/copilot-api#261, aaif-goose/goose#7425, anomalyco/opencode#13768, through the Anthropic
API, GitHub Copilot and OpenRouter alike, so in every request format).

Compile never invents a user turn to avoid it: a user's words are theirs, and a made-up "go
on" would be read by the model as the user's.  The recipe's ``assistant_prefill`` says what
to do instead:

``"auto"`` (the default)
    refuse the request when its model is one that refuses a prefill (:func:`refuses_prefill`:
    Claude models of version 4.6 and later), ship it otherwise;
``"allow"``
    always ship it (a model that takes a prefill, or a caller that wants one);
``"refuse"``
    never ship a request that ends on an assistant turn.

A refused request raises :class:`~compaction.errors.AssistantPrefillRefused`, naming the model
and what to do.  The compiled request's shipped last turn is the authority
(:func:`check_shipped_prefill`, after planning): a newest assistant message that is summarized
(one already covered by a summary, or one larger than the budget, which can never ship raw)
leaves the request ending on the summaries' user turn, which no model refuses.  Before any work
(no summarizer is called) :func:`check_assistant_prefill` refuses the requests whose newest
message will ship raw: the assistant's, past every summary, no larger than the budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from .errors import AssistantPrefillRefused, InvalidArgument

if TYPE_CHECKING:
    from .recipe import Recipe
    from .store.base import HistoryStore

__all__ = [
    "ASSISTANT_PREFILL",
    "PREFILL_REFUSED_FROM",
    "refuses_prefill",
    "final_turn",
    "prefill_refusal",
    "check_assistant_prefill",
    "shipped_final_role",
    "check_shipped_prefill",
]

#: The values of the recipe's ``assistant_prefill``.
ASSISTANT_PREFILL = ("auto", "allow", "refuse")

#: The first Claude version (major, minor) whose models refuse an assistant prefill.
PREFILL_REFUSED_FROM = (4, 6)

#: A Claude model of the current naming (``claude-opus-4-6``, ``claude-sonnet-4-5-20250929``,
#: ``claude-opus-4-20250514``, ``anthropic/claude-sonnet-4.6``, ``us.anthropic.claude-opus-4-6-v1``,
#: ``claude-opus-4-6@20260205``): the family, the major version and an optional minor one
#: (one or two digits, so a date is never read as a minor version); a major version of more
#: than four digits is no Claude version (and past 4,300 digits Python refuses to convert
#: it: a model name of 5,000 nines was a ValueError traceback).  Names of the older form
#: (``claude-3-5-sonnet-20241022``) do not match: all of them take a prefill.
_CLAUDE = re.compile(r"claude-(?:opus|sonnet|haiku)-(\d{1,4})(?!\d)(?:[-.](\d{1,2})(?!\d))?")

#: The same with the version before the family (``claude-4.6-opus``, ``claude-4-5-sonnet``), as
#: some gateways and editors (Cursor) spell it; ``claude-3-5-sonnet`` and ``claude-3-7-sonnet``
#: read as 3.5 and 3.7, which take a prefill.
_CLAUDE_VERSION_FIRST = re.compile(r"claude-(\d{1,4})(?:[-.](\d{1,2}))?-(?:opus|sonnet|haiku)")


def refuses_prefill(model: str) -> bool:
    """Return whether ``model`` is known to refuse a request that ends on an assistant turn.

    Claude models of version :data:`PREFILL_REFUSED_FROM` (4.6) and later do (see the module
    docstring for the sources); any other model is taken to accept one (OpenAI's Chat models
    answer after a final assistant message; Claude 4.5 and earlier read it as a prefill).

    Args:
        model: a model name as a request names it, any provider's spelling.

    Returns:
        ``True`` for ``claude-opus-4-6``, ``claude-sonnet-4.6``, ``claude-4.6-opus``,
        ``claude-sonnet-5``...; ``False`` for ``claude-sonnet-4-5``, ``claude-opus-4-20250514``,
        ``claude-3-7-sonnet``, ``gpt-4o``...

    Raises:
        InvalidArgument: ``model`` is not a string (``None``, a number).

    Example:
        >>> refuses_prefill("claude-opus-4-6"), refuses_prefill("claude-sonnet-4-5-20250929")
        (True, False)
    """
    if not isinstance(model, str):
        raise InvalidArgument(
            f"model: expected a model name (str), found {type(model).__name__} {model!r:.60}"
        )
    name = model.lower()
    match = _CLAUDE.search(name) or _CLAUDE_VERSION_FIRST.search(name)
    if match is None:
        return False
    version = (int(match.group(1)), int(match.group(2) or 0))
    return version >= PREFILL_REFUSED_FROM


def final_turn(store: HistoryStore) -> tuple[str, int] | None:
    """Return the role and seq of the message a compiled request of ``store`` ends with.

    That is the newest message other than a system one (compile shows the newest message raw,
    and system messages ride in the system text); ``None`` when the store holds none.

    Reads the newest message alone when it is not a system one (almost always).  Otherwise the
    trailing system messages are found from :meth:`~HistoryStore.pinned_seqs` (one query of
    seqs: every system message is pinned, so the newest message that is not pinned ends the
    run); the run is then read newest first in windows that double (1, 2, 4 ... messages), since
    a message pinned by hand inside it is no system one, and the message before the run, which
    is not pinned, so no system one, ends the request.  A run of ``r`` messages costs about
    ``log2(r) + 3`` queries and reads each of its messages once, where reading them one at a
    time took ``r`` queries.
    """
    end = len(store)
    if end == 0:
        return None
    newest = store.messages(end - 1, end)[0]
    if newest.role != "system":
        return newest.role, end - 1
    start = end - 1  # the first seq of the run of pinned messages the store ends with
    for seq in reversed(store.pinned_seqs()):
        if seq == start - 1:
            start = seq
        elif seq < start - 1:
            break
    top, window = end - 1, 1  # the newest message is read: a system one
    while top > start:
        bottom = max(start, top - window)
        for offset, message in enumerate(reversed(store.messages(bottom, top))):
            if message.role != "system":
                return message.role, top - 1 - offset
        top, window = bottom, window * 2
    if start == 0:
        return None
    return store.messages(start - 1, start)[0].role, start - 1


def prefill_refusal(recipe: Recipe, model: str) -> str | None:
    """Return why a request for ``model`` may not end on an assistant turn, or ``None`` when it may.

    Args:
        recipe: its ``assistant_prefill`` decides (see the module docstring).
        model: the model the request names; one with a line break or another character that
            does not print is shown as a Python literal, so the reason stays one line.
    """
    if recipe.assistant_prefill == "refuse":
        return 'the recipe sets assistant_prefill = "refuse"'
    if recipe.assistant_prefill == "auto" and refuses_prefill(model):
        shown = model if model.isprintable() else repr(model)  # the error stays one line
        return (
            f"{shown} refuses an assistant prefill ('The conversation must end with a user message', "
            "Claude 4.6 and later)"
        )
    return None


def check_assistant_prefill(
    store: HistoryStore, recipe: Recipe, model: str, *, shown_raw: Callable[[int], bool] | None = None
) -> None:
    """Raise when a request of ``store`` for ``model`` would end on an assistant turn it may not.

    Args:
        store: the history to compile.
        recipe: its ``assistant_prefill`` decides.
        model: the model the request names (resolved: the recipe's, else the format's default).
        shown_raw: given the newest message's seq, whether the request will show it raw (it
            ends on it); a message it says is not (summarized) is left to
            :func:`check_shipped_prefill`.  Default: every newest message is shown raw.

    Raises:
        AssistantPrefillRefused: the newest message other than a system one is the
            assistant's, ``shown_raw`` says it ships raw and :func:`prefill_refusal` gives a
            reason; one line naming the model, the message and what to do.
    """
    if recipe.assistant_prefill == "allow":
        return
    last = final_turn(store)
    if last is None or last[0] != "assistant":
        return
    reason = prefill_refusal(recipe, model)
    if reason is None:
        return
    if shown_raw is not None and not shown_raw(last[1]):
        return
    _refuse(recipe, model, last[1], reason)


def shipped_final_role(messages: Sequence[tuple[str, object]]) -> str | None:
    """Return the role of the last turn a request's ``(role, blocks)`` messages ship (system ones aside).

    ``None`` for a request without a user or assistant message.
    """
    return next((role for role, _blocks in reversed(messages) if role != "system"), None)


def check_shipped_prefill(
    store: HistoryStore, recipe: Recipe, model: str, messages: Sequence[tuple[str, object]]
) -> None:
    """Raise when a compiled request ends on an assistant turn that ``recipe`` refuses for ``model``.

    The check after planning, and the authority: it reads the request's messages as gated
    (``GatedRequest.messages``), so the refusal matches the shipped body whatever planning
    summarized.

    Args:
        store: the history compiled (names the newest message in the error).
        recipe: its ``assistant_prefill`` decides.
        model: the model the request names.
        messages: the compiled request's ``(role, blocks)`` pairs.

    Raises:
        AssistantPrefillRefused: the request's last turn is the assistant's and
            :func:`prefill_refusal` gives a reason (one line, as :func:`check_assistant_prefill`).
    """
    if recipe.assistant_prefill == "allow" or shipped_final_role(messages) != "assistant":
        return
    reason = prefill_refusal(recipe, model)
    if reason is None:
        return
    last = final_turn(store)
    _refuse(recipe, model, last[1] if last is not None else len(store) - 1, reason)


def _refuse(recipe: Recipe, model: str, seq: int, reason: str) -> NoReturn:
    """Raise the one-line refusal of a request ending on message ``seq``, the assistant's."""
    fix = (
        'append the user\'s next message first, or set assistant_prefill = "allow" in the recipe for a model '
        "that takes a prefill"
    )
    if recipe.assistant_prefill == "refuse":
        fix = 'append the user\'s next message first, or set assistant_prefill = "auto" or "allow" in the recipe'
    raise AssistantPrefillRefused(
        f"the request would end on an assistant turn (message {seq}, the newest, is the assistant's) "
        f"and {reason}: {fix}",
        model=model,
        seq=seq,
    )
