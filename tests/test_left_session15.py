"""Defects an attacker found in session 15, each closed with a test that fails without the fix.

1. ``replay --lenient`` and ``eval --lenient`` skipped malformed lines without a word: they now
   list them as ``run --lenient`` does (the first five ``path:line: what`` lines on stderr and
   how many more; ``--json`` gives them all as ``problems``).
2. ``run --lenient`` on a file whose every line was skipped failed with ``:memory:: the store
   holds no messages`` and lost the listing: it now lists them, then says the file held no
   message that could be read (exit 1).
3. A recipe's ``model = "gpt-4o\\nX"`` was taken and shipped in the request: the recipe refuses a
   model name with a character that does not print, as ``--model`` does (one shared check).
4. A model name had no length limit (a 10 KB ``--model`` was taken): over 256 characters is now a
   usage error (``--model``) or a :class:`RecipeError` (the recipe), naming the length.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import cli
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lenient_checks import assert_listed, jsonl_with_bad_lines

from compaction import Recipe, load_recipe
from compaction.errors import CompactionError, InvalidTranscript, RecipeError
from compaction.model_names import MAX_MODEL_NAME_CHARS, model_name_problem
from compaction.pipeline import NothingReadable, run_pipeline

# -- 1. replay --lenient and eval --lenient name the lines they skipped -------------------------------


@settings(max_examples=5, deadline=None)
@example(bad={3})
@example(bad={3, 5, 7, 9, 11, 13, 15})
@given(bad=st.sets(st.integers(3, 20), min_size=1, max_size=9))
def test_replay_lenient_names_the_skipped_lines(
    bad: set[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: replay --lenient printed its table and never said a line was skipped."""
    path = jsonl_with_bad_lines(tmp_path_factory.mktemp("replay") / "chat.jsonl", 20, bad)
    args = ("replay", path, "--budget", "16000", "--strategy", "replan", "--lenient")
    result = cli(*args)
    assert result.exit_code == 0, result.stderr
    assert_listed(result.stderr, path, bad, "replay")
    report = json.loads(cli(*args, "--json").stdout)
    assert report["skipped"] == len(bad)
    assert report["messages"] == 20 - len(bad)
    assert report["transcript"] == str(path) and report["format"] == "openai"
    assert [int(p.split(":")[1]) for p in report["problems"]] == sorted(bad)


@settings(max_examples=5, deadline=None)
@example(bad={4})
@example(bad={2, 4, 6, 8, 10, 12, 14, 16})
@given(bad=st.sets(st.integers(2, 20), min_size=1, max_size=9))
def test_eval_lenient_names_the_skipped_lines(
    bad: set[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: eval --lenient printed its tables and never said a line was skipped."""
    path = jsonl_with_bad_lines(tmp_path_factory.mktemp("eval") / "chat.jsonl", 20, bad)
    result = cli("eval", path, "--budget", "16000", "--lenient")
    assert result.exit_code == 0, result.stderr
    assert_listed(result.stderr, path, bad, "eval")
    data = json.loads(cli("eval", path, "--budget", "16000", "--lenient", "--json").stdout)
    (report,) = data["reports"]
    assert report["skipped"] == len(bad) and report["messages"] == 20 - len(bad)
    assert [int(p.split(":")[1]) for p in report["problems"]] == sorted(bad)


def test_replay_and_eval_without_skipped_lines_list_nothing(tmp_path: Path) -> None:
    path = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 6, set())
    replayed = cli("replay", path, "--budget", "16000", "--strategy", "replan", "--lenient", "--json")
    assert replayed.exit_code == 0 and "skipped" not in replayed.stderr
    assert json.loads(replayed.stdout)["problems"] == []
    evaluated = cli("eval", path, "--budget", "16000", "--lenient")
    assert evaluated.exit_code == 0 and "skipped" not in evaluated.stderr


def test_replay_of_a_file_without_a_turn_still_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "hello"}) + "\n", "utf-8")
    result = cli("replay", path, "--budget", "16000")
    assert result.exit_code == 1
    assert f"{path}: no assistant message with a message before it: nothing to replay" in result.stderr


# -- 2. run --lenient on a file with nothing readable -------------------------------------------------


def unreadable_chat(path: Path, kinds: list[str]) -> Path:
    """Write one chat line per kind, each a JSON object no message can be read from."""
    bad = {
        "content": {"role": "user", "content": 5},
        "role": {"role": "wizard", "content": "make it so"},
        "cut": None,
    }
    lines = []
    for number, kind in enumerate(kinds, 1):
        line = bad[kind]
        lines.append(
            json.dumps(line) if line else json.dumps({"role": "user", "content": f"hi {number}"})[:-3]
        )
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


@settings(max_examples=8, deadline=None)
@example(kinds=["content", "cut", "role"])
@example(kinds=["content"] * 9)
@given(
    kinds=st.lists(st.sampled_from(["content", "role", "cut"]), min_size=2, max_size=9).filter(
        # one line, or a first line that is no JSON, reads as one (broken) JSON document
        lambda kinds: kinds[0] != "cut"
    )
)
def test_run_lenient_with_every_line_skipped_lists_them_then_says_so(
    kinds: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: ``:memory:: the store holds no messages; import a transcript first``, no listing."""
    path = unreadable_chat(tmp_path_factory.mktemp("run") / "chat.jsonl", kinds)
    for json_flag in ((), ("--json",)):
        result = cli("run", path, "--budget", "4000", "--lenient", *json_flag)
        assert result.exit_code == 1
        said = result.stderr.strip().splitlines()
        plural = "s" if len(kinds) != 1 else ""
        assert said[0] == f"skipped {len(kinds)} malformed line{plural}:"
        listed = [line for line in said if line.startswith(f"  {path}:")]
        numbers = [int(line.split(":")[1]) for line in listed]
        assert len(set(numbers)) == len(numbers) == min(len(kinds), 5)
        assert set(numbers) <= set(range(1, len(kinds) + 1))
        more = [line for line in said if line.startswith("  ... and ")]
        assert more == (  # run failed: no command lists more (session 16; it named run --json)
            [f"  ... and {len(kinds) - 5} more"] if len(kinds) > 5 else []
        )
        assert said[-1] == (
            f"compaction: error: {path}: the file held no message that could be read "
            f"({len(kinds)} line{plural} skipped)"
        )
        assert ":memory:" not in result.stderr and result.stdout == ""


def test_run_pipeline_raises_nothing_readable_with_what_it_skipped(tmp_path: Path) -> None:
    path = unreadable_chat(tmp_path / "chat.jsonl", ["content", "role"])
    with pytest.raises(NothingReadable) as caught:
        run_pipeline(path, Recipe(budget_tokens=4000), lenient=True)
    assert isinstance(caught.value, InvalidTranscript) and isinstance(caught.value, ValueError)
    assert isinstance(caught.value, CompactionError)
    assert caught.value.skipped == 2 and caught.value.path == str(path)
    assert [p.split(":")[1] for p in caught.value.problems] == ["1", "2"]


# -- 3. and 4. a recipe's model name, and the length of any model name --------------------------------

UNPRINTABLE = ["\n", "\r", "\t", "\x1b", "\u200b", "\ufeff", "\x00", "\u2028"]


def write_recipe(path: Path, model: str) -> Path:
    """Write a recipe whose ``model`` is ``model``: a TOML basic string, every character that does
    not print (and the quote and backslash) as its ``\\uXXXX`` escape."""
    quoted = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in model)
    path.write_text(f'budget_tokens = 4000\nmodel = "{quoted}"\n', "utf-8")
    return path


@settings(max_examples=40, deadline=None)
@example(prefix="gpt-4o", char="\n", suffix="X")
@given(
    prefix=st.text(st.characters(codec="utf-8").filter(str.isprintable), min_size=1, max_size=40).filter(
        str.strip
    ),
    char=st.sampled_from(UNPRINTABLE),
    suffix=st.text(st.characters(codec="utf-8").filter(str.isprintable), max_size=20),
)
def test_a_recipe_model_that_does_not_print_is_refused_naming_the_field_and_position(
    prefix: str, char: str, suffix: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: ``model = "gpt-4o\\nX"`` loaded and shipped in the request's ``model``."""
    path = write_recipe(tmp_path_factory.mktemp("recipe") / "r.toml", prefix + char + suffix)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: key 'model': expected a model name, found ")
    assert message.endswith(f": a character that does not print ({char!r}) at position {len(prefix)}")
    assert "\n" not in message and "\x1b" not in message and "\u200b" not in message
    assert isinstance(caught.value, ValueError)


def test_the_cli_refuses_a_recipe_model_that_does_not_print(tmp_path: Path) -> None:
    transcript = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 4, set())
    recipe = write_recipe(tmp_path / "r.toml", "gpt-4o\nX")
    result = cli("run", transcript, "--recipe", recipe)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (
        f"compaction: error: {recipe}: key 'model': expected a model name, found 'gpt-4o\\nX': "
        "a character that does not print ('\\n') at position 6\n"
    )


@settings(max_examples=30, deadline=None)
@example(length=MAX_MODEL_NAME_CHARS)
@example(length=MAX_MODEL_NAME_CHARS + 1)
@example(length=10_240)
@given(length=st.integers(1, 3 * MAX_MODEL_NAME_CHARS))
def test_a_model_name_over_256_characters_is_refused_by_recipe_and_option_alike(
    length: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: a 10 KB ``--model`` (or recipe ``model``) was taken and shipped."""
    name = ("gpt-4o-" * length)[:length]
    assert MAX_MODEL_NAME_CHARS == 256
    if length <= 256:
        assert model_name_problem(name) is None
        assert Recipe(model=name).model == name
        return
    said = f"a name of {length:,} characters; at most 256 are taken"
    assert model_name_problem(name) == said
    with pytest.raises(RecipeError) as caught:
        Recipe(model=name)
    assert (
        str(caught.value) == f"<defaults>: key 'model': expected a model name, found {name[:80]!r}...: {said}"
    )
    folder = tmp_path_factory.mktemp("long")
    transcript = jsonl_with_bad_lines(folder / "chat.jsonl", 4, set())
    result = cli("run", transcript, "--budget", "4000", "--model", name)
    assert result.exit_code == 2 and result.stdout == ""
    assert (
        f"Invalid value for '--model': expected a model name, found {name[:80]!r}...: {said}" in result.stderr
    )
    assert name not in result.stderr
    recipe = write_recipe(folder / "r.toml", name)
    loaded = cli("run", transcript, "--recipe", recipe)
    assert loaded.exit_code == 1
    assert loaded.stderr.strip().splitlines() == [
        f"compaction: error: {recipe}: key 'model': expected a model name, found {name[:80]!r}...: {said}"
    ]


def test_a_model_name_of_256_characters_ships_in_the_request(tmp_path: Path) -> None:
    name = "m" * 256
    transcript = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 4, set())
    out = tmp_path / "request.json"
    result = cli("run", transcript, "--budget", "4000", "--model", name, "--out", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text("utf-8"))["model"] == name


def test_bench_plot_without_matplotlib_says_so_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: bench --plot ran every measurement (seconds), printed no table, then failed on
    the missing matplotlib; replay --plot checked first.  Now both check first, in one line."""
    import importlib.util

    import compaction.bench as bench
    from compaction.replay_cli import MATPLOTLIB_MISSING

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )

    def measured(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("bench measured before checking for matplotlib")

    monkeypatch.setattr(bench, "run_bench", measured)
    result = cli("bench", "--plot", tmp_path / "bench.png")
    assert result.exit_code == 1, result.stderr
    assert result.stderr == f"compaction: error: {MATPLOTLIB_MISSING}\n"
    assert not (tmp_path / "bench.png").exists()
