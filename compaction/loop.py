"""Append the turns of an agent loop in the shapes the agent already has.

An agent that calls a model API keeps its history as that API's messages.  Each function
here takes them as they are and appends them to a store in one call:

* :func:`append_openai`: OpenAI Chat Completions messages (``system`` / ``developer``,
  ``user``, ``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``);
* :func:`append_anthropic`: Anthropic Messages (``user`` / ``assistant`` with content blocks,
  ``tool_use`` / ``tool_result``; an optional ``system``);
* :func:`append_responses`: OpenAI Responses API items (``message``, ``function_call``,
  ``function_call_output``, ``reasoning``, ``compaction`` ...).

Each accepts a list, one message (a dict) or the SDK's response objects (anything with a
``model_dump()``, such as ``completion.choices[0].message``, an Anthropic ``Message`` or the
items of a Responses ``response.output``), converts them with the transcript parsers of
:mod:`compaction.formats` (the same mapping ``compaction import`` uses), and appends exactly
the messages given, after the stored ones (no ``chain_seed``: "ok" twice is two messages).
The conversion alone is :func:`from_openai`, :func:`from_anthropic` and
:func:`from_responses`.

Example:
    >>> from compaction import Recipe, Store, compress_and_compile
    >>> from compaction.loop import append_openai
    >>> store = Store(":memory:")
    >>> append_openai(store, [{"role": "system", "content": "Be brief."},
    ...                       {"role": "user", "content": "hi"}])
    2
    >>> compiled, _ = compress_and_compile(store, Recipe(budget_tokens=4000))
    >>> [m["role"] for m in compiled.request.body()["messages"]]
    ['system', 'user']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .blocks import Message
from .errors import InvalidArgument, InvalidMessage, found
from .formats import anthropic, openai, openai_responses
from .formats._common import Context, Draft, Item, finish

__all__ = [
    "append_anthropic",
    "append_openai",
    "append_responses",
    "from_anthropic",
    "from_openai",
    "from_responses",
]


class _Appendable(Protocol):
    def append(self, messages: Sequence[Message]) -> int: ...


class _LoopContext(Context):
    """Strict parsing for in-memory messages: a bad one raises :class:`InvalidMessage` naming it."""

    def __init__(self) -> None:
        super().__init__(None, lenient=False)

    def problem(self, what: str, *, line: int | None = None, where: str | None = None) -> None:
        raise InvalidMessage(f"{where}: {what}" if where else what)


def _plain(value: Any) -> Any:
    """Return an SDK object as the dict its API sends (``model_dump(exclude_none=True)``)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, Mapping):
        return dump(exclude_none=True)
    return value


def _items(values: Any, what: str, name: str) -> list[Item]:
    """Return ``values`` (a list, one dict or one SDK object) as items named ``name[i]``."""
    values = _plain(values)
    if isinstance(values, Mapping):
        values = [values]
    elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidArgument(
            f"{name} must be a list of {what} (dicts), or one of them; found {found(values)}"
        )
    return [(_plain(value), None, f"{name}[{index}]") for index, value in enumerate(values)]


def _convert(
    items: list[Item], convert_all: Callable[[Sequence[Item], Context], list[Draft]]
) -> list[Message]:
    ctx = _LoopContext()
    return finish(convert_all(items, ctx), ctx)


def from_openai(messages: Any) -> list[Message]:
    """Convert OpenAI Chat Completions messages into :class:`~compaction.blocks.Message` values.

    Args:
        messages: a list of message dicts, one dict, or SDK message objects.

    Returns:
        The messages (``seq=None``): ``tool`` messages become user ``tool_result`` messages,
        consecutive ones merged; ``tool_calls`` become ``tool_use`` blocks.

    Raises:
        InvalidArgument: ``messages`` is not a list or a dict.
        InvalidMessage: a malformed message, named by its index and field
            (``messages[2]: tool_calls[0] needs a function with a string 'name'``).
    """
    return _convert(_items(messages, "Chat Completions messages", "messages"), openai.convert_all)


def from_anthropic(messages: Any, *, system: Any = None) -> list[Message]:
    """Convert Anthropic Messages into :class:`~compaction.blocks.Message` values.

    Args:
        messages: a list of message dicts, one dict, or SDK ``Message`` objects (an API
            response: its ``id`` and ``model`` are kept).
        system: the request's ``system`` (a string or text blocks), converted first when given.

    Returns:
        The messages (``seq=None``).

    Raises:
        InvalidArgument: ``messages`` is not a list or a dict.
        InvalidMessage: a malformed message, named by its index and field.
    """
    items = _items(messages, "Anthropic messages", "messages")
    if system is not None:
        items.insert(0, ({"role": "system", "content": system}, None, "system"))
    return _convert(items, anthropic.convert_all)


def from_responses(items: Any) -> list[Message]:
    """Convert OpenAI Responses API items into :class:`~compaction.blocks.Message` values.

    Args:
        items: a list of input or output items (dicts or SDK objects), or one of them.

    Returns:
        The messages (``seq=None``): model-side items joined into assistant messages, a
        ``compaction`` item kept in the ``meta`` of the message beside it.

    Raises:
        InvalidArgument: ``items`` is not a list or a dict.
        InvalidMessage: a malformed item, named by its index and field; a ``compaction``
            item given alone (it is kept with a message, never as one).
    """
    return _convert(_items(items, "Responses items", "items"), openai_responses.convert_all)


def _append(store: Any, messages: list[Message]) -> int:
    if not callable(getattr(store, "append", None)):
        raise InvalidArgument(
            f"store must be a history store (e.g. compaction.Store(path)); found {found(store)}"
        )
    added: int = store.append(messages)
    return added


def append_openai(store: _Appendable, messages: Any) -> int:
    """Append OpenAI Chat Completions messages to ``store``: one call per turn of an agent loop.

    Args:
        store: the history store.
        messages: the new messages (a list, one dict, or ``completion.choices[0].message``).

    Returns:
        How many messages were appended (consecutive ``tool`` messages count as one).

    Raises:
        InvalidArgument: ``store`` is no store, or ``messages`` not a list or a dict.
        InvalidMessage: a malformed message, named by its index and field; nothing is appended.

    Example:
        >>> append_openai(store, {"role": "user", "content": "Run the tests."})  # doctest: +SKIP
        1
    """
    return _append(store, from_openai(messages))


def append_anthropic(store: _Appendable, messages: Any, *, system: Any = None) -> int:
    """Append Anthropic Messages to ``store``: one call per turn of an agent loop.

    Args:
        store: the history store.
        messages: the new messages (a list, one dict, or the SDK's response ``Message``).
        system: the request's ``system``, appended first when given (once, at the start).

    Returns:
        How many messages were appended.

    Raises:
        InvalidArgument: ``store`` is no store, or ``messages`` not a list or a dict.
        InvalidMessage: a malformed message, named by its index and field; nothing is appended.
    """
    return _append(store, from_anthropic(messages, system=system))


def append_responses(store: _Appendable, items: Any) -> int:
    """Append OpenAI Responses API items to ``store``: one call per turn of an agent loop.

    Args:
        store: the history store.
        items: the new input items, or the ``output`` items of a response.

    Returns:
        How many messages were appended (items of one model turn make one message).

    Raises:
        InvalidArgument: ``store`` is no store, or ``items`` not a list or a dict.
        InvalidMessage: a malformed item, named by its index and field; nothing is appended.
    """
    return _append(store, from_responses(items))
