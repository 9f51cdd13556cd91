"""Fuzz the split and cap invariants on generated histories: what ``compaction fuzz`` runs.

Each case imports a generated agent history (tool rounds, parallel calls, results split over
messages, reused tool ids, images nested in tool results, ``data:`` URIs in text, oversized
outputs) into a fresh in-memory store, compresses it twice with the offline extractive
summarizer (every summarizer request's bytes captured), compiles the next request and checks,
reading only the serialized bytes and the store (:mod:`compaction.fuzz_checks`):

- **coverage**: summaries contiguous from seq 0 to the live window, every message raw or under
  exactly one shown summary, each shown summary once in the body;
- **tool pairing** in every request (summarizer requests included);
- **provider grammar** of the compiled body, read independently of the gate's own check;
- **budget**: the gate's count and an independent count of the body within the budget, or a
  typed :class:`~compaction.errors.OverBudget` that names its numbers;
- **wire caps**: image count and bytes on the shipped list, live and compression caps;
- **placeholders only**: under ``vision = false`` no image input in any request;
- **loud placeholders**: each replaced image is a placeholder with its reason in the body;
- **store untouched**: the stored messages and blobs are byte-identical afterwards;
- **determinism**: compiling again gives the same bytes.

Any other engine error (an :class:`~compaction.errors.InvariantViolation` the gate raised, a
crash) fails the case too.  Hypothesis (``pip install 'compaction[fuzz]'``) generates the
cases and shrinks a failure to a minimal one, which :func:`write_case` saves as a transcript
plus the recipe that breaks it; :func:`replay_case` runs a saved case again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .blocks import Message
from .compactor import Compactor
from .compile import CompiledRequest, compile_request
from .errors import CompactionError, InvalidArgument, InvalidMessage, InvalidTranscript, OverBudget, found
from .fuzz_checks import (
    CapturingSummarizer,
    check_provider_grammar,
    check_tool_pairing,
    independent_tokens,
    payload_json,
    placeholders_in,
    store_snapshot,
    wire_images,
)
from .planning import summary_header
from .recipe import Recipe, load_recipe
from .store import Store

__all__ = [
    "INVARIANTS",
    "HYPOTHESIS_MISSING",
    "InvariantBroken",
    "Case",
    "CaseOutcome",
    "FuzzFailure",
    "FuzzReport",
    "check_case",
    "run_fuzz",
    "write_case",
    "read_case",
    "replay_case",
    "recipe_toml",
]

#: The invariants each case checks, in the order they are checked.
INVARIANTS = (
    "coverage",
    "tool pairing",
    "provider grammar",
    "budget",
    "wire caps",
    "placeholders only",
    "loud placeholders",
    "store untouched",
    "determinism",
)

HYPOTHESIS_MISSING = "compaction fuzz needs hypothesis: pip install 'compaction[fuzz]'"


class InvariantBroken(AssertionError, CompactionError):
    """A case broke an invariant.

    Attributes:
        invariant: which one (a name from :data:`INVARIANTS`, ``"engine error"`` or ``"crash"``).
        detail: what is wrong.
    """

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclass(frozen=True)
class Case:
    """One fuzz case: a history, a recipe and how the compactor is driven.

    Attributes:
        messages: the history (without seqs).
        recipe: the settings (``budget_tokens`` set).
        keep_tail: tokens the first compression round leaves unsummarized (the second leaves half).
        close_tail: the second round may close the open tail into a chunk.
        origin: how a case from ``--transcript`` was made (the file, the window, each
            mutation); empty for a generated history.
    """

    messages: tuple[Message, ...]
    recipe: Recipe
    keep_tail: int = 0
    close_tail: bool = False
    origin: tuple[str, ...] = ()


def _check(name: str, checked: list[str], test: Callable[[], bool]) -> None:
    """Run one invariant's check; record its name when it applied to the case."""
    try:
        applied = test()
    except AssertionError as err:
        raise InvariantBroken(name, str(err) or "assertion failed") from err
    if applied:
        checked.append(name)


def _caps(body: dict[str, Any], *, vision: bool, max_images: int | None, max_bytes: int | None, url_bytes: int) -> None:
    images = wire_images(body)
    if not vision:
        assert images == [], f"{len(images)} image inputs under vision = false"
    if max_images is not None:
        assert len(images) <= max_images, f"{len(images)} images over the cap {max_images}"
    if max_bytes is not None:
        total = sum(url_bytes if i.data is None else len(i.data) for i in images)
        assert total <= max_bytes, f"{total} image bytes over the cap {max_bytes}"


@dataclass(frozen=True)
class CaseOutcome:
    """A case that held: the invariants checked, and whether its compile was over budget."""

    checked: tuple[str, ...]
    over_budget: bool


def check_case(case: Case) -> CaseOutcome:
    """Run one case and check every invariant.

    Invariants about a compiled request are not checked when the case is over budget (the
    error must then be a typed :class:`OverBudget` with its numbers, checked under ``budget``).

    Raises:
        InvariantBroken: the first invariant the case breaks (``"engine error"`` for any
            other :class:`CompactionError`, ``"crash"`` for any other exception).
    """
    try:
        return _check_case(case)
    except InvariantBroken:
        raise
    except CompactionError as err:
        raise InvariantBroken("engine error", f"{type(err).__name__}: {err}") from err
    except Exception as err:  # noqa: BLE001  (a crash is a finding, reported as one)
        raise InvariantBroken("crash", f"{type(err).__name__}: {err}") from err


def _check_case(case: Case) -> CaseOutcome:
    recipe = case.recipe
    checked: list[str] = []
    with Store(":memory:") as store:
        store.append(case.messages)
        before = store_snapshot(store)
        summarizer = CapturingSummarizer(encoding=recipe.encoding)
        compactor = Compactor(store, recipe, summarizer)
        compactor.tick(keep_tail_tokens=case.keep_tail)
        compactor.tick(keep_tail_tokens=case.keep_tail // 2, close_tail=case.close_tail)
        compiled: CompiledRequest | None = None
        error: OverBudget | None = None
        try:
            compiled = compile_request(store, recipe)
        except OverBudget as err:
            error = err
        requests = [payload_json(payload) for _kind, payload in summarizer.requests]
        fmt = recipe.output_format
        body = payload_json(compiled.request.payload) if compiled is not None else None

        def coverage() -> bool:
            if compiled is None:
                return False
            stored = store.messages()
            assert compiled.total_messages == len(stored), "the request does not count every stored message"
            position = 0
            for summary in compiled.summaries:
                assert summary.start_seq == position, f"summaries leave a gap or overlap at seq {position}"
                assert summary.end_seq > summary.start_seq, f"an empty summary at seq {position}"
                position = summary.end_seq
            assert position == compiled.live_start, f"summaries end at {position}, the window starts at {compiled.live_start}"
            raw = set(compiled.raw_seqs)
            for message in stored:
                seq = message.seq
                assert seq is not None
                covering = sum(1 for s in compiled.summaries if s.start_seq <= seq < s.end_seq)
                if message.role == "system":
                    assert seq in raw, f"pinned system message {seq} not shown"
                    continue
                assert (seq in raw) + covering == 1, f"seq {seq}: raw={seq in raw}, summaries={covering}"
                assert (seq in raw) == (seq >= compiled.live_start), f"seq {seq} raw outside the live window"
            text = compiled.request.payload.decode("utf-8")
            for summary in compiled.summaries:
                header = summary_header(summary)
                assert text.count(header) == 1, f"summary {header} shown {text.count(header)} times"
            return True

        def pairing() -> bool:
            for request in requests:
                check_tool_pairing(request, summarizer.request_format)
            if body is not None:
                check_tool_pairing(body, fmt)
            return bool(requests) or body is not None

        def grammar() -> bool:
            if body is not None:
                check_provider_grammar(body, fmt)
            return body is not None

        def budget() -> bool:
            if compiled is None:
                assert error is not None
                assert error.budget == recipe.budget_tokens, f"OverBudget names budget {error.budget}"
                assert error.needed > error.budget and error.stage, f"OverBudget without its numbers: {error}"
                return True
            assert body is not None
            limit = recipe.budget_tokens
            assert compiled.tokens <= (limit or 0), f"the gate counted {compiled.tokens} over the budget {limit}"
            ours = independent_tokens(body, recipe.target_model)
            assert ours <= (limit or 0), f"independent count {ours} over the budget {limit} (gate: {compiled.tokens})"
            return True

        def caps() -> bool:
            for request in requests:
                _caps(request, vision=recipe.vision, max_images=recipe.max_compression_images,
                      max_bytes=recipe.max_compression_image_bytes, url_bytes=recipe.assumed_url_image_bytes)
            if body is not None and compiled is not None:
                _caps(body, vision=recipe.vision, max_images=recipe.max_live_images,
                      max_bytes=recipe.max_live_image_bytes, url_bytes=recipe.assumed_url_image_bytes)
                shipped = len(wire_images(body))
                assert shipped == compiled.request.images_shown, (
                    f"{shipped} images in the body, the gate reported {compiled.request.images_shown}"
                )
            return bool(requests) or body is not None

        def placeholders_only() -> bool:
            if recipe.vision:
                return False
            for request in [*requests, *([body] if body is not None else [])]:
                assert wire_images(request) == [], "an image input under vision = false"
            return True

        def loud() -> bool:
            if compiled is None or body is None:
                return False
            replaced = [r for r in compiled.request.replacements if r.kind == "image"]
            reasons = sorted(m.group("reason") for m in placeholders_in(body))
            for replacement in replaced:
                assert replacement.reason, "a replaced image without a reason"
                assert replacement.reason in reasons, f"no placeholder in the body says {replacement.reason!r}"
                reasons.remove(replacement.reason)
            return True

        def untouched() -> bool:
            assert store_snapshot(store) == before, "the store's messages or blobs changed"
            return True

        def determinism() -> bool:
            if compiled is None:
                return False
            again = compile_request(store, recipe)
            assert again.request.payload == compiled.request.payload, "compiling again gave different bytes"
            return True

        tests = (coverage, pairing, grammar, budget, caps, placeholders_only, loud, untouched, determinism)
        for name, test in zip(INVARIANTS, tests, strict=True):
            _check(name, checked, test)
    return CaseOutcome(tuple(checked), compiled is None)


@dataclass
class FuzzFailure:
    """The minimal failing case hypothesis found, and where it was saved."""

    invariant: str
    detail: str
    case: Case
    saved: Path | None = None


@dataclass
class FuzzReport:
    """What :func:`run_fuzz` did.

    Attributes:
        cases: cases run (generated and, after a failure, shrinking steps).
        source: ``"generated"`` histories, or ``"transcripts"`` (mutations of the user's).
        checked: per invariant, the cases it was checked on.
        over_budget: cases whose smallest request did not fit (a typed OverBudget, checked).
        seed: the seed of the run.
        seconds: wall time (seconds).
        failure: the minimal failing case, or ``None``.
    """

    cases: int = 0
    source: str = "generated"
    checked: Counter[str] = field(default_factory=Counter)
    over_budget: int = 0
    seed: int = 0
    seconds: float = 0.0
    failure: FuzzFailure | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return the report as JSON-ready data (``compaction fuzz --json``)."""
        failure = None
        if self.failure is not None:
            failure = {
                "invariant": self.failure.invariant,
                "detail": self.failure.detail,
                "messages": len(self.failure.case.messages),
                "origin": list(self.failure.case.origin),
                "saved": str(self.failure.saved) if self.failure.saved else None,
            }
        return {
            "cases": self.cases,
            "source": self.source,
            "checked": {name: self.checked.get(name, 0) for name in INVARIANTS},
            "over_budget": self.over_budget,
            "seed": self.seed,
            "seconds": round(self.seconds, 2),
            "failure": failure,
        }


def _recipe_strategy(recipe: Recipe | None) -> Any:
    """Return the recipes a run draws: random ones, or the user's with budget and chunk size drawn.

    Generated histories are small (a few thousand tokens), so a user's budget alone would
    rarely summarize anything: each case draws the budget (150 tokens up to the recipe's) and
    the chunk target, and keeps every other setting of the recipe.
    """
    from hypothesis import strategies as st

    from .fuzz_strategies import recipes

    if recipe is None:
        return recipes()
    top = max(150, min(recipe.budget_tokens or 6000, 6000))

    @st.composite
    def drawn(draw: Any) -> Recipe:
        return recipe.replace(
            budget_tokens=draw(st.integers(min_value=150, max_value=top)),
            chunk_target_tokens=draw(st.integers(min_value=50, max_value=400)),
            chunk_min_messages=draw(st.integers(min_value=1, max_value=4)),
            summarizer=None,
            # the invariants are checked on every history, one ending on the assistant's turn
            # included, whatever the model's prefill policy (compaction.prefill)
            assistant_prefill="allow",
        )

    return drawn()


class _TimeUp(BaseException):
    """Raised inside the property when ``seconds`` have passed: hypothesis lets it through unshrunk."""


def run_fuzz(
    recipe: Recipe | None = None,
    *,
    examples: int = 200,
    seconds: float | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    transcripts: Sequence[Sequence[Message]] | None = None,
    names: Sequence[str] = (),
) -> FuzzReport:
    """Run ``examples`` cases (or as many as fit in ``seconds``) through :func:`check_case`; shrink and save a failure.

    Args:
        recipe: the user's settings (``None``: random recipes); see :func:`_recipe_strategy`.
            The summarizer is always the offline extractive one (no network).
        examples: cases to run (shrinking a failure runs more); ignored with ``seconds``.
        seconds: run new cases until this much wall time has passed (seconds), then stop
            (the case under way finishes); a failure is shrunk for at most as long again
            after it is found, and the smallest failing case by then is the one reported.
        seed: the seed; the same seed runs the same cases.
        out: the directory a failing case is written to (:func:`write_case`); ``None`` keeps it unsaved.
        progress: called as ``progress(done, total)`` after each case (cases, or whole
            seconds with ``seconds``).
        transcripts: the user's histories; each case is then a mutated window of one of
            them (:func:`compaction.fuzz_strategies.transcript_mutations`) instead of a
            generated history.
        names: the transcripts' file names, for a saved case's ``origin``.

    Returns:
        The :class:`FuzzReport`; ``failure`` is the minimal failing case, or ``None``.

    Raises:
        CompactionError: hypothesis is not installed (:data:`HYPOTHESIS_MISSING`).
        InvalidArgument: ``examples`` below 1, ``seconds`` not above 0, ``transcripts``
            empty, or ``recipe`` not a Recipe.
    """
    if not isinstance(examples, int) or isinstance(examples, bool) or examples < 1:
        raise InvalidArgument(f"examples must be an integer >= 1; found {found(examples)}")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0):
        raise InvalidArgument(f"seconds must be a number above 0; found {found(seconds)}")
    if transcripts is not None and not any(transcripts):
        raise InvalidArgument("transcripts must hold at least one message")
    if recipe is not None and not isinstance(recipe, Recipe):
        raise InvalidArgument(f"recipe must be a compaction.Recipe or None; found {found(recipe)}")
    try:
        from hypothesis import HealthCheck, Verbosity, given, settings
        from hypothesis import seed as hypothesis_seed
        from hypothesis import strategies as st
    except ImportError:
        raise CompactionError(HYPOTHESIS_MISSING) from None
    from .fuzz_strategies import histories, transcript_mutations

    report = FuzzReport(seed=seed, source="generated" if transcripts is None else "transcripts")
    last: list[tuple[InvariantBroken, Case]] = []
    started = time.perf_counter()
    deadline = None if seconds is None else started + seconds
    found_at: list[float] = []  # when the first failure was found
    cases: Any
    if transcripts is None:
        cases = histories().map(lambda messages: (messages, ()))
    else:
        labels = [names[i] if i < len(names) else "" for i in range(len(transcripts))]
        kept = [(t, name) for t, name in zip(transcripts, labels, strict=True) if t]
        sources = tuple(tuple(Message(m.role, m.content) for m in t) for t, _name in kept)
        cases = transcript_mutations(sources, names=tuple(name for _t, name in kept))

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples if seconds is None else 10**9,
        deadline=None,
        database=None,
        print_blob=False,
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        drawn_case=cases,
        drawn=_recipe_strategy(recipe),
        keep_tail=st.integers(min_value=0, max_value=3000),
        close_tail=st.booleans(),
    )
    def prop(drawn_case: tuple[list[Message], tuple[str, ...]], drawn: Recipe, keep_tail: int, close_tail: bool) -> None:
        if deadline is not None and time.perf_counter() >= (found_at[0] + (seconds or 0.0) if found_at else deadline):
            raise _TimeUp
        messages, origin = drawn_case
        case = Case(tuple(messages), drawn, keep_tail, close_tail, origin)
        report.cases += 1
        try:
            outcome = check_case(case)
        except InvariantBroken as err:
            last.append((err, case))
            if not found_at:
                found_at.append(time.perf_counter())
            raise
        report.checked.update(outcome.checked)
        report.over_budget += outcome.over_budget
        if progress is not None:
            if seconds is None:
                progress(min(report.cases, examples), examples)
            else:
                progress(min(int(time.perf_counter() - started), int(seconds)), int(seconds))

    try:
        with _no_local_constants():
            prop()
    except _TimeUp:
        if last:  # shrinking ran out of time: the smallest failing case so far
            err, case = last[-1]
            report.failure = FuzzFailure(err.invariant, err.detail, case)
            if out is not None:
                report.failure.saved = write_case(case, out, err)
    except InvariantBroken:
        err, case = last[-1]
        report.failure = FuzzFailure(err.invariant, err.detail, case)
        if out is not None:
            report.failure.saved = write_case(case, out, err)
    report.seconds = time.perf_counter() - started
    return report


@contextmanager
def _no_local_constants() -> Iterator[None]:
    """Keep hypothesis from drawing values out of the constants of the modules loaded.

    Hypothesis (6.131 and later) draws about one value in twenty from the literals of the
    "local" modules in ``sys.modules`` (not the standard library nor site-packages), read
    again whenever a module is loaded.  The cases a seed drew then hung on which modules
    happened to be loaded: the native counter or its Python twin (``_count_py.py``), the
    command line's imports, a module first imported by an earlier case.  So ``compaction
    fuzz --seed 0`` ran other cases with ``COMPACTION_NO_EXTENSIONS=1``, or called from
    Python, and a failure of one build looked like state of the process.  Without them a
    seed draws the same cases wherever it runs.  Does nothing on a hypothesis without
    the mechanism.
    """
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover  (a hypothesis without the module)
        yield
        return
    get = getattr(providers, "_get_local_constants", None)
    make = getattr(providers, "Constants", None)
    if get is None or make is None:  # pragma: no cover
        yield
        return
    none = make()
    providers._get_local_constants = lambda: none
    try:
        yield
    finally:
        providers._get_local_constants = get


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise InvalidArgument(f"cannot write {found(value)} to TOML")


def recipe_toml(recipe: Recipe) -> str:
    """Return ``recipe`` as TOML text that :func:`compaction.load_recipe` reads back to an equal recipe."""
    data = recipe.to_dict()
    table = data.pop("summarizer", None)
    lines = [f"{key} = {_toml_value(value)}" for key, value in data.items()]
    if table:
        lines += ["", "[summarizer]"] + [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def write_case(case: Case, out: str | Path, error: InvariantBroken | None = None) -> Path:
    """Save ``case`` under ``out`` as ``transcript.json`` (Anthropic shape), ``recipe.toml`` and ``case.json``.

    Returns:
        The case's directory (``out/<invariant>-<short hash>``), created if needed.
    """
    transcript = {"messages": [{"role": m.role, "content": list(m.content)} for m in case.messages]}
    text = json.dumps(transcript, ensure_ascii=False, indent=1)
    name = (error.invariant if error else "case").replace(" ", "-")
    digest = hashlib.sha256((text + recipe_toml(case.recipe)).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    directory = Path(out) / f"{name}-{digest}"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "transcript.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    (directory / "recipe.toml").write_text(recipe_toml(case.recipe), encoding="utf-8")
    meta = {
        "keep_tail": case.keep_tail,
        "close_tail": case.close_tail,
        "origin": list(case.origin),
        "invariant": error.invariant if error else None,
        "detail": error.detail if error else None,
        "replay": f"compaction fuzz --replay {directory}",
    }
    (directory / "case.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return directory


def read_case(directory: str | Path) -> Case:
    """Return the case :func:`write_case` saved under ``directory``, exactly as it was run.

    The messages are read from ``transcript.json`` as written, not through a transcript
    format: a format's loader repairs what the fuzz draws on purpose (the Anthropic loader
    renames a reused tool id ``toolu_0001`` to ``toolu_0001_2``), and a repaired history is
    another case (its ids cost more tokens, so its rounds are cut elsewhere): the saved
    failure would replay clean.

    Raises:
        InvalidTranscript: ``transcript.json`` is not ``{"messages": [{"role", "content"}, ...]}``
            with a role string and a list of block objects per message, or a message's
            role or blocks are not valid (the :class:`~compaction.blocks.Message` rules).
        RecipeError: ``recipe.toml`` is not a valid recipe.
        OSError: a saved file cannot be read.
    """
    directory = Path(directory)
    path = directory / "transcript.json"
    try:
        data = json.loads(path.read_bytes().decode("utf-8", "surrogatepass"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidTranscript(f"not a saved fuzz case's JSON: {err}", path=str(path)) from None
    rows = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise InvalidTranscript('expected {"messages": [...]}', path=str(path))
    messages = []
    for index, row in enumerate(rows, start=1):
        role = row.get("role") if isinstance(row, dict) else None
        content = row.get("content") if isinstance(row, dict) else None
        if not isinstance(role, str) or not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise InvalidTranscript(
                f"message {index} is not {{'role': str, 'content': [block objects]}}", path=str(path), line=index
            )
        try:
            messages.append(Message(role, tuple(content)))
        except (InvalidMessage, InvalidArgument) as err:
            raise InvalidTranscript(f"message {index}: {err}", path=str(path), line=index) from None
    recipe = load_recipe(directory / "recipe.toml")
    meta = json.loads((directory / "case.json").read_text(encoding="utf-8"))
    origin = tuple(str(step) for step in meta.get("origin", ()))
    return Case(tuple(messages), recipe, int(meta["keep_tail"]), bool(meta["close_tail"]), origin)


def replay_case(directory: str | Path) -> CaseOutcome:
    """Run a case :func:`write_case` saved (read by :func:`read_case`), and check it again.

    Returns:
        The :class:`CaseOutcome` (every invariant held).

    Raises:
        InvariantBroken: the case still breaks an invariant.
        InvalidTranscript, RecipeError, OSError: the saved files cannot be read.
    """
    return check_case(read_case(directory))
