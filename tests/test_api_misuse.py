"""Public API misuse raises a CompactionError subclass with one clear message, never a bare
ValueError, AttributeError or TypeError from deep inside (issue 10).

The README promises that every error derives from :class:`compaction.CompactionError`.  The
explicit tests are the issue's reproductions; the sweep calls every public callable of
``compaction.__all__`` (and the store's methods) with one argument replaced by a value of a
wrong type, drawn by hypothesis, and asserts that whatever escapes is a CompactionError.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction
from compaction import (
    CompactionError,
    Compactor,
    EncodingDataMissing,
    ExtractiveSummarizer,
    ImageSettings,
    InvalidMessage,
    Message,
    OverBudget,
    Recipe,
    RecipeError,
    Store,
    StoreError,
    append_anthropic,
    append_openai,
    append_responses,
    compile_request,
    compress_and_compile,
    count_text,
    gate,
    list_conversations,
    load_recipe,
    load_transcript,
    open_store,
    run_pipeline,
)
from compaction.errors import InvalidArgument
from compaction.wire import OutboundRequest

TESTS = Path(__file__).parent
TRANSCRIPT = TESTS / "data" / "cases" / "tool-pair-at-window-edge.json"


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


@pytest.fixture
def store() -> Iterator[Store]:
    with Store(":memory:") as opened:
        opened.append([text("user", "hello"), text("assistant", "hi there")])
        yield opened


# -- the reproductions -------------------------------------------------------------------


def test_an_unknown_request_format_is_a_recipe_error(store: Store) -> None:
    with pytest.raises(RecipeError, match="unknown request format 'xml'"):
        compile_request(store, Recipe(budget_tokens=1000), format="xml")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([{"role": "user", "content": "x"}], r"message 0 of the 1 appended is not a Message; found dict"),
        ("text", r"append takes an iterable of Message \(e.g. a list\); found str 'text'"),
        (None, r"append takes an iterable of Message"),
        (text("user", "one"), r"append takes an iterable of Message .*found Message"),
        ([text("user", "ok"), "not a message"], r"message 1 of the 2 appended is not a Message; found str"),
    ],
)
def test_appending_something_that_is_not_messages_is_invalid_message(
    store: Store, messages: Any, expected: str
) -> None:
    with pytest.raises(InvalidMessage, match=expected):
        store.append(messages)
    assert len(store) == 2  # nothing of the call was stored


@pytest.mark.parametrize("budget", ["100", 100.0, True, [100]])
def test_a_budget_that_is_not_an_integer_is_invalid_argument(store: Store, budget: Any) -> None:
    with pytest.raises(InvalidArgument, match="budget must be an integer number of tokens; found"):
        compile_request(store, Recipe(), budget=budget)


def test_a_recipe_budget_that_is_not_an_integer_is_a_recipe_error() -> None:
    with pytest.raises(RecipeError, match="budget_tokens"):
        Recipe(budget_tokens="100")  # type: ignore[arg-type]


@pytest.mark.parametrize("function", [compile_request, compress_and_compile])
def test_a_missing_store_or_recipe_is_invalid_argument(function: Callable[..., Any], store: Store) -> None:
    with pytest.raises(InvalidArgument, match="store must be a history store .*found NoneType None"):
        function(None, Recipe(budget_tokens=100))
    with pytest.raises(InvalidArgument, match="recipe must be a compaction.Recipe .*found str"):
        function(store, "recipe.toml")


def test_invalid_argument_is_both_a_type_error_and_a_compaction_error(store: Store) -> None:
    with pytest.raises(TypeError):
        compile_request(store, Recipe(), budget="100")  # type: ignore[arg-type]
    assert issubclass(InvalidArgument, CompactionError)


def test_store_arguments_of_the_wrong_type(tmp_path: Path, store: Store) -> None:
    with pytest.raises(InvalidArgument, match="a store path must be a str or a path; found int 5"):
        Store(5)  # type: ignore[arg-type]
    assert not Path("5").exists()
    with pytest.raises(EncodingDataMissing, match="unknown encoding 'nope'"):
        Store(":memory:", encoding="nope")
    with pytest.raises(InvalidArgument, match="start must be an integer; found str 'a'"):
        store.messages("a")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="level must be an integer; found str '1'"):
        store.add_summary("1", 0, 1, "Done:\n- x", {})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="provenance must be a dict"):
        store.add_summary(1, 0, 1, "Done:\n- x", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="chain_seed must be a string"):
        store.append([], chain_seed=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="path or a connection"):
        Store(tmp_path / "x.db", connection=store._db)


# -- the sweep ------------------------------------------------------------------------------------

#: Values of the wrong type for almost any argument (and a few of the right type but wrong shape).
WRONG = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.binary(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.just(object()),
    st.just([{"role": "user", "content": "x"}]),
    st.just([text("user", "a message where a value was expected")]),
)
#: For arguments that name a file: every wrong type, but no text (a missing file is an OSError).
WRONG_PATH = WRONG.filter(lambda v: not isinstance(v, str))


class _Quiet:
    """A summarizer that never runs (the calls fail on their arguments first, or fit)."""

    name = "quiet"
    request_format = "openai"
    model = None
    max_output_tokens = None

    def summarize(self, request: Any, *, kind: str) -> Any:
        from compaction.summarizers.base import SummaryResult

        return SummaryResult("Done:\n- something", {})

    def close(self) -> None:
        pass


def _store() -> Store:
    store = Store(":memory:")
    store.append([text("user", "hello"), text("assistant", "hi there")])
    return store


def _outbound() -> OutboundRequest:
    return OutboundRequest("live", None, (("user", ({"type": "text", "text": "hi"},)),), (None,), ())


def _with_store(method: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        with _store() as store:
            result = getattr(store, method)(**kwargs)
            if inspect.isgenerator(result):
                list(result)
            return result

    call.__name__ = f"Store.{method}"
    return call


def _ticked(**kwargs: Any) -> Any:
    with _store() as store:
        return Compactor(store, Recipe(), _Quiet()).tick(**kwargs)


def _compactor(**kwargs: Any) -> Any:
    with _store() as store:
        kwargs.setdefault("store", store)
        return Compactor(**kwargs).tick()


def _on_store(function: Callable[..., Any]) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        with _store() as store:
            kwargs.setdefault("store", store)
            return function(**kwargs)

    call.__name__ = function.__name__
    return call


#: name -> (callable taking keyword arguments, valid keyword arguments, which ones name files)
TARGETS: dict[str, tuple[Callable[..., Any], dict[str, Any], set[str]]] = {
    "Store": (Store, {"path": ":memory:", "encoding": "o200k_base", "create": True, "tracer": None}, {"path"}),
    "Store.append": (_with_store("append"), {"messages": [text("user", "more")], "chain_seed": ""}, set()),
    "Store.messages": (_with_store("messages"), {"start": 0, "end": 2}, set()),
    "Store.iter_messages": (_with_store("iter_messages"), {"batch": 10}, set()),
    "Store.facts": (_with_store("facts"), {"start": 0, "end": 2, "encoding": "cl100k_base"}, set()),
    "Store.summaries": (_with_store("summaries"), {"level": 1}, set()),
    "Store.add_summary": (
        _with_store("add_summary"),
        {"level": 1, "start_seq": 0, "end_seq": 1, "text": "Done:\n- x", "provenance": {}},
        set(),
    ),
    "Store.record_failure": (
        _with_store("record_failure"),
        {"level": 1, "start_seq": 0, "end_seq": 1, "reason": "refused", "kind": "outage"},
        set(),
    ),
    "Store.record_event": (
        _with_store("record_event"),
        {"tokens_before": 10, "tokens_after": 5, "budget": 8, "detail": {}},
        set(),
    ),
    "Store.blob": (_with_store("blob"), {"sha256": "0" * 64}, set()),
    "Store.summary_frontier": (_with_store("summary_frontier"), {"level": 1}, set()),
    "Store.coarsest_summary_at": (_with_store("coarsest_summary_at"), {"start_seq": 0, "max_end_seq": 2}, set()),
    "Store.summaries_within": (_with_store("summaries_within"), {"level": 1, "start_seq": 0, "end_seq": 2}, set()),
    "Store.level_starts_before": (
        _with_store("level_starts_before"),
        {"level": 1, "before_seq": 2, "limit": 4},
        set(),
    ),
    "compile_request": (
        _on_store(compile_request),
        {"recipe": Recipe(budget_tokens=1000), "budget": 1000, "format": "openai", "model": "gpt-4o", "tools": ()},
        set(),
    ),
    "compress_and_compile": (
        _on_store(compress_and_compile),
        {"recipe": Recipe(budget_tokens=1000), "summarizer": _Quiet(), "progress": None, "tools": ()},
        set(),
    ),
    "run_pipeline": (
        run_pipeline,
        {
            "transcript": TRANSCRIPT,
            "recipe": Recipe(budget_tokens=4000),
            "store_path": ":memory:",
            "format": None,
            "lenient": False,
            "summarizer": _Quiet(),
            "progress": None,
            "tools": (),
        },
        {"transcript", "store_path"},
    ),
    # -- owned by others: see OTHERS below
    "Message": (Message, {"role": "user", "content": ({"type": "text", "text": "hi"},), "seq": None}, set()),
    "Recipe": (Recipe, {"budget_tokens": 1000, "chunk_target_tokens": 300}, set()),
    "load_recipe": (load_recipe, {"path": TESTS / "data" / "no-such-recipe.toml"}, {"path"}),
    "Compactor": (_compactor, {"recipe": Recipe(), "summarizer": _Quiet()}, set()),
    "Compactor.tick": (_ticked, {"keep_tail_tokens": 0, "close_tail": False, "progress": None}, set()),
    "load_transcript": (load_transcript, {"path": TRANSCRIPT, "format": None, "lenient": False}, {"path"}),
    "append_openai": (_on_store(append_openai), {"messages": [{"role": "user", "content": "hi"}]}, set()),
    "append_anthropic": (
        _on_store(append_anthropic),
        {"messages": [{"role": "user", "content": "hi"}], "system": "Be brief."},
        set(),
    ),
    "append_responses": (_on_store(append_responses), {"items": [{"role": "user", "content": "hi"}]}, set()),
    "ImageSettings": (
        ImageSettings,
        {"policy": "live", "max_images": None, "max_bytes": None, "assumed_url_image_bytes": 1_000_000},
        set(),
    ),
    "ExtractiveSummarizer": (ExtractiveSummarizer, {"encoding": "o200k_base"}, set()),
    "gate": (gate, {"request": _outbound(), "settings": ImageSettings()}, set()),
    "count_text": (count_text, {"text": "hello", "encoding": "o200k_base"}, set()),
    "open_store": (
        open_store,
        {"location": ":memory:", "create": True, "encoding": "o200k_base", "conversation": "main"},
        {"location"},
    ),
    "list_conversations": (list_conversations, {"location": ":memory:"}, {"location"}),
}

#: Names of compaction.__all__ that are not callables to sweep: values, types of results, errors.
NOT_SWEPT = {
    "TickReport",  # result records: constructed by the library
    "CompiledRequest",
    "RunResult",
    "GatedRequest",
    "ConversationInfo",
}


def test_the_sweep_covers_every_public_callable() -> None:
    public = set()
    for name in compaction.__all__:
        value = getattr(compaction, name)
        is_error = isinstance(value, type) and issubclass(value, BaseException)
        if callable(value) and not is_error and name not in NOT_SWEPT:
            public.add(name)
    missing = public - set(TARGETS)
    assert not missing, f"add to TARGETS: {sorted(missing)}"


def _cases() -> list[Any]:
    cases = []
    for name, (_function, valid, _paths) in TARGETS.items():
        for argument in valid:
            cases.append(pytest.param(name, argument, id=f"{name}-{argument}"))
    return cases


@pytest.mark.parametrize(("name", "argument"), _cases())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_wrong_typed_arguments_raise_only_compaction_errors(
    name: str, argument: str, data: st.DataObject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a path-like value may create a file: only here
    function, valid, paths = TARGETS[name]
    value = data.draw(WRONG_PATH if argument in paths else WRONG, label=argument)
    try:
        result = function(**{**valid, argument: value})
    except CompactionError:
        return
    if isinstance(result, Store):
        result.close()


def test_the_sweep_runs_every_valid_call_without_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's valid arguments are valid, so the errors it sees come from the wrong one."""
    monkeypatch.chdir(tmp_path)
    for name, (function, valid, _paths) in TARGETS.items():
        if name in ("load_recipe", "Store.blob"):
            continue  # a recipe file and a blob that are not there: the sweep replaces their names
        try:
            result = function(**valid)
        except OverBudget:
            continue
        if isinstance(result, Store):
            result.close()
    assert os.listdir(tmp_path) == []
    with pytest.raises(StoreError):
        _with_store("blob")(sha256="0" * 64)
