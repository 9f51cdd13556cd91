"""Tests of the token estimator: both implementations, the dispatcher, the digit rule, the error."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import EncodingDataMissing
from compaction.tokens.encodings import get_encoding
from compaction.tokens.estimator_coefficients import COEFFICIENTS, HELD_OUT_MAPE

ROOT = Path(__file__).resolve().parent.parent
ENCODING_NAMES = ("o200k_base", "cl100k_base")


@pytest.fixture(params=["c", "py"], scope="module")
def impl(request: pytest.FixtureRequest) -> ModuleType:
    """Each implementation imported directly (no dispatcher): a missing extension fails."""
    return importlib.import_module(f"compaction.tokens._estimate_{request.param}")


@pytest.fixture(scope="module")
def c_impl() -> ModuleType:
    return importlib.import_module("compaction.tokens._estimate_c")


@pytest.fixture(scope="module")
def py_impl() -> ModuleType:
    return importlib.import_module("compaction.tokens._estimate_py")


# --------------------------------------------------------------------------- dispatcher


def test_dispatcher_picks_the_compiled_module_by_default() -> None:
    if os.environ.get("COMPACTION_NO_EXTENSIONS", "") not in ("", "0"):
        pytest.skip("COMPACTION_NO_EXTENSIONS is set for this run")
    from compaction.tokens import _estimate_c, estimate

    assert estimate.IMPLEMENTATION == "c"
    assert estimate.estimate_tokens is _estimate_c.estimate_tokens
    assert estimate.text_features is _estimate_c.text_features


@pytest.mark.parametrize(("value", "expected"), [("1", "py"), ("yes", "py"), ("0", "c"), ("", "c")])
def test_environment_variable_selects_the_implementation(value: str, expected: str) -> None:
    env = dict(os.environ, COMPACTION_NO_EXTENSIONS=value)
    code = (
        "from compaction.tokens import estimate; "
        "print(estimate.IMPLEMENTATION, estimate.estimate_tokens.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    implementation, module = out.stdout.split()
    assert implementation == expected
    assert module == f"compaction.tokens._estimate_{expected}"


# --------------------------------------------------------------------------- both implementations


def test_features_are_named_and_coefficients_match_them(impl: ModuleType) -> None:
    assert len(impl.FEATURE_NAMES) == len(impl.text_features("x"))
    assert impl.FEATURE_NAMES[0] == "digit_tokens"
    for encoding in ENCODING_NAMES:
        assert len(COEFFICIENTS[encoding]) == len(impl.FEATURE_NAMES)
        assert COEFFICIENTS[encoding][0] == 1.0


def test_empty_text_costs_nothing(impl: ModuleType) -> None:
    assert impl.estimate_tokens("") == 0
    assert impl.text_features("") == (0.0,) * len(impl.FEATURE_NAMES)


def test_errors(impl: ModuleType) -> None:
    with pytest.raises(TypeError, match="expected a str, got bytes"):
        impl.estimate_tokens(b"abc")  # type: ignore[arg-type]
    with pytest.raises(EncodingDataMissing, match="expected one of: cl100k_base, o200k_base"):
        impl.estimate_tokens("abc", "p50k_base")
    with pytest.raises(LookupError):
        impl.estimate_tokens("abc", "p50k_base")


def test_char_classes_agree(c_impl: ModuleType, py_impl: ModuleType) -> None:
    for cp in list(range(0x3100)) + list(range(0xF800, 0x10100)) + [0x1F600, 0x20000, 0x3FFFF, 0x10FFFF]:
        assert c_impl.char_class(cp) == py_impl.char_class(cp), hex(cp)


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
@pytest.mark.parametrize("n", [*range(1, 40), 100, 299, 300, 301, 1000, 10_001])
def test_a_digit_run_costs_exactly_ceil_n_over_3(impl: ModuleType, encoding: str, n: int) -> None:
    digits = "".join(str((i * 7 + 3) % 10) for i in range(n))
    expected = len(get_encoding(encoding).encode_ordinary(digits))
    assert expected == -(-n // 3)
    assert impl.estimate_tokens(digits, encoding) == expected


@settings(max_examples=100, deadline=None)
@given(digits=st.text(alphabet="0123456789", min_size=1, max_size=500))
def test_any_digit_string_is_exact(impl: ModuleType, digits: str) -> None:
    for encoding in ENCODING_NAMES:
        assert impl.estimate_tokens(digits, encoding) == len(get_encoding(encoding).encode_ordinary(digits))


@settings(max_examples=400, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=300) | st.text(max_size=300))
def test_compiled_equals_pure_python(c_impl: ModuleType, py_impl: ModuleType, text: str) -> None:
    assert c_impl.text_features(text) == py_impl.text_features(text)
    for encoding in ENCODING_NAMES:
        assert c_impl.estimate_tokens(text, encoding) == py_impl.estimate_tokens(text, encoding)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(
        st.sampled_from(["0", "7", "12", "345", "a", "Z", " ", "\n", ".", "é", "中", "\U0001f600", "\t"]),
        max_size=80,
    )
)
def test_compiled_equals_pure_python_on_digit_heavy_text(
    c_impl: ModuleType, py_impl: ModuleType, parts: list[str]
) -> None:
    # every alignment of digit runs against the compiled loop's four-character steps
    for prefix in ("", "x", "xy", "xyz"):
        text = prefix + "".join(parts)
        assert c_impl.text_features(text) == py_impl.text_features(text)


def test_compiled_equals_pure_python_at_every_length(c_impl: ModuleType, py_impl: ModuleType) -> None:
    # both sides of the compiled pass's short-text path (one table) and unrolled path (four)
    alphabet = "aZ09 \n\t.,\u00e9\u00d7\u4e2d\u30ab\ud55c\u3002\u2014\U0001f600\x85\u3000"
    for n in range(300):
        text = "".join(alphabet[(i * i + 3 * n) % len(alphabet)] for i in range(n))
        for candidate in (text, text.encode("latin-1", "ignore").decode("latin-1")):
            assert c_impl.text_features(candidate) == py_impl.text_features(candidate), n
            for encoding in ENCODING_NAMES:
                assert c_impl.estimate_tokens(candidate, encoding) == py_impl.estimate_tokens(candidate, encoding)


def test_a_str_subclass_is_a_str(impl: ModuleType, py_impl: ModuleType) -> None:
    class Text(str):
        pass

    text = Text("fooBar 12345\n\tx,y \u4e2d\u6587 \u00e9")
    assert impl.text_features(text) == py_impl.text_features(str(text))
    assert impl.estimate_tokens(text, "cl100k_base") == py_impl.estimate_tokens(str(text), "cl100k_base")


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_estimate_is_non_negative(impl: ModuleType, text: str) -> None:
    for encoding in ENCODING_NAMES:
        assert impl.estimate_tokens(text, encoding) >= 0


def test_a_million_characters_in_one_pass(impl: ModuleType) -> None:
    text = ("The quick brown fox jumps over 1234 lazy dogs.\n" * 25_000)[:1_000_000]
    assert len(text) == 1_000_000
    features = dict(zip(impl.FEATURE_NAMES, impl.text_features(text), strict=True))
    assert features["newlines"] == text.count("\n")
    assert features["digit_tokens"] == sum(-(-len(run) // 3) for run in re.findall("[0-9]+", text))
    assert features["lower"] == sum(ch.islower() for ch in text)
    expected = len(get_encoding("o200k_base").encode_ordinary(text))
    assert abs(impl.estimate_tokens(text) - expected) / expected < 0.10


def test_feature_counts_on_a_known_text(impl: ModuleType) -> None:
    features = dict(zip(impl.FEATURE_NAMES, impl.text_features("fooBar 12345\n\tx,y 中文 é"), strict=True))
    assert features["digit_tokens"] == 2
    assert features["lower"] == 7
    assert features["upper"] == 1
    assert features["lower_to_upper"] == 1
    assert features["newlines"] == 1
    assert features["han"] == 2
    assert features["latin"] == 1
    assert features["blanks"] == 1


# --------------------------------------------------------------------------- error on real transcripts


def _fit_module() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("fit_estimator")
    finally:
        sys.path.pop(0)


@pytest.fixture(scope="module")
def agent_pieces() -> tuple[list[str], list[str]]:
    fit = _fit_module()
    import random

    groups = fit.pieces(fit.agent_strings(), random.Random(7))
    train = [p for i, g in enumerate(groups) if i % 2 == 0 for p in g]
    held_out = [p for i, g in enumerate(groups) if i % 2 == 1 for p in g]
    return train, held_out


def _mape(impl: ModuleType, texts: list[str], encoding: str) -> float:
    enc = get_encoding(encoding)
    errors = []
    for text in texts:
        expected = len(enc.encode_ordinary(text))
        errors.append(abs(impl.estimate_tokens(text, encoding) - expected) / expected)
    return 100.0 * sum(errors) / len(errors)


# The mean absolute % error measured on message-sized pieces of examples/ (see
# scripts/fit_estimator.py); a 0.5-point margin for the different random cut of this test.
MEASURED_AGENT_MAPE = {"o200k_base": HELD_OUT_MAPE["o200k_base"]["agent"],
                       "cl100k_base": HELD_OUT_MAPE["cl100k_base"]["agent"]}


@pytest.mark.parametrize("encoding", ENCODING_NAMES)
def test_error_on_agent_transcripts_is_within_the_measured_bound(
    agent_pieces: tuple[list[str], list[str]], encoding: str
) -> None:
    from compaction.tokens import estimate

    train, held_out = agent_pieces
    error = _mape(estimate, train + held_out, encoding)
    assert len(train + held_out) > 1000
    assert error <= MEASURED_AGENT_MAPE[encoding] + 0.5, error


def test_examples_are_parsed() -> None:
    fit = _fit_module()
    strings = fit.agent_strings()
    assert len(strings) > 1000
    assert any("def " in s for s in strings)
    json.dumps(strings[:10])
