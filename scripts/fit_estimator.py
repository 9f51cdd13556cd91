"""Fit the token estimator's per-encoding coefficients against tiktoken and report its error.

Usage::

    python scripts/fit_estimator.py            # fit, write the coefficients module, print the error
    python scripts/fit_estimator.py --check    # print the error of the shipped coefficients only

Corpora (message-sized pieces of 200-4000 characters):

- ``agent``: every string value of the JSON in ``examples/`` (JSON documents, JSON lines,
  ``.traj``) and the aider Markdown history, gathered crudely; a string longer than 4000
  characters is cut into pieces (at most 20 per string, so that one 300k-character base64
  screenshot does not outweigh the rest), shorter strings are joined with newlines;
- ``prose``: the English text of Python's own documentation (``pydoc_data.topics``) and stdlib
  docstrings;
- ``code``: stdlib Python sources and CPython's C headers;
- ``json``: synthetic JSON documents (compact, indented, with and without ``ensure_ascii``);
- ``cjk``: Chinese, Japanese and Korean messages of vim's translations (``/usr/share/vim``, when
  present) and a few hand-written paragraphs;
- ``base64``: base64 of random bytes, of compressed data and of files, with and without MIME
  line breaks;
- ``mixed``: European languages (vim's de/fr/es/pl/cs/tr/ru/uk/sr/vi messages, when present)
  and English prose sprinkled with emoji, arrows, dashes and other symbols.

Each corpus is split into a training and a held-out half by source string; the coefficients are
fitted by least squares on the training pieces, each row weighted by ``1 / tokens`` so that the
relative error is minimized, with ``digit_tokens`` fixed at 1 (it is exact).  The mean absolute
percentage error (MAPE) of the held-out pieces is printed per corpus and stored beside the
coefficients.
"""

from __future__ import annotations

import argparse
import base64
import gettext
import glob
import inspect
import json
import os
import random
import sys
import sysconfig
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compaction.tokens import _estimate_py  # noqa: E402
from compaction.tokens.encodings import get_encoding  # noqa: E402

OUT = ROOT / "compaction" / "tokens" / "estimator_coefficients.py"
ENCODING_NAMES = ("o200k_base", "cl100k_base")
CORPORA = ("agent", "prose", "code", "json", "cjk", "base64", "mixed")
MIN_PIECE, MAX_PIECE = 200, 4000
MAX_PIECES_PER_STRING = 20


# --------------------------------------------------------------------------- gathering text


def json_strings(value: object) -> Iterator[str]:
    """Yield every string value (not key) inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from json_strings(item)


def agent_strings(examples: Path = ROOT / "examples") -> list[str]:
    """Return the string values of every transcript under ``examples/`` (file order)."""
    out: list[str] = []
    for path in sorted(examples.rglob("*")):
        if not path.is_file() or path.name == "README.md":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".md":
            out.extend(part for part in text.split("\n\n#### ") if part)
            continue
        try:
            out.extend(json_strings(json.loads(text)))
            continue
        except json.JSONDecodeError:
            pass
        for line in text.splitlines():
            try:
                out.extend(json_strings(json.loads(line)))
            except json.JSONDecodeError:
                out.append(line)
    return [s for s in out if s.strip()]


def prose_strings() -> list[str]:
    """Return English prose: Python's documentation topics and stdlib docstrings."""
    import pydoc_data.topics

    out = [text for _, text in sorted(pydoc_data.topics.topics.items())]
    import collections
    import email
    import http.client
    import json as json_module
    import logging
    import pathlib
    import subprocess
    import typing
    import unittest

    for module in (collections, email, http.client, json_module, logging, pathlib, subprocess, typing,
                   unittest, argparse, random, zlib):
        with warnings.catch_warnings():  # typing.io and friends warn when touched
            warnings.simplefilter("ignore")
            for _, obj in inspect.getmembers(module):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 80:
                    out.append(doc)
    return out


def code_strings() -> list[str]:
    """Return source code: stdlib modules and CPython's C headers."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py"))[:120]
    include = Path(sysconfig.get_paths()["include"])
    files += sorted(include.glob("*.h"))[:60]
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def json_documents(rng: random.Random, words: list[str], count: int = 400) -> list[str]:
    """Return synthetic JSON documents built from ``words``, numbers, booleans and nesting."""

    def value(depth: int) -> object:
        kind = rng.random()
        if depth > 3 or kind < 0.35:
            return " ".join(rng.choices(words, k=rng.randint(1, 12)))
        if kind < 0.5:
            return rng.choice([rng.randint(-10**6, 10**9), round(rng.uniform(-1e3, 1e3), rng.randint(0, 6))])
        if kind < 0.55:
            return rng.choice([True, False, None])
        if kind < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 6))]
        return {rng.choice(words) + rng.choice(["", "_id", "Name", "_count", "URL"]): value(depth + 1)
                for _ in range(rng.randint(1, 8))}

    out = []
    for i in range(count):
        doc = {rng.choice(words): value(1) for _ in range(rng.randint(2, 10))}
        indent = [None, 2, 4][i % 3]
        out.append(json.dumps(doc, indent=indent, ensure_ascii=bool(i % 2)))
    return out


def read_catalog(path: str) -> list[str] | None:
    """Return the translated messages of a gettext catalogue, or None if it cannot be read."""
    try:
        with open(path, "rb") as handle:
            catalog = gettext.GNUTranslations(handle)._catalog  # type: ignore[attr-defined]
    except (OSError, UnicodeDecodeError):
        return None
    return [v for k, v in catalog.items() if k and isinstance(v, str)]


HANDWRITTEN_CJK = [
    "今天天气很好，我们一起去公园散步吧。这个程序的运行速度比以前快了很多，但是内存占用也增加了。"
    "请检查配置文件中的路径是否正确，然后重新启动服务。如果问题仍然存在，请联系系统管理员。"
    "机器学习模型需要大量的数据进行训练，数据的质量直接影响模型的效果。",
    "人工智能正在改变我们的生活方式。从自动驾驶汽车到智能家居，新技术无处不在。"
    "开发者需要不断学习新的工具和框架，才能跟上时代的步伐。代码审查是保证软件质量的重要环节。",
    "今日はとても良い天気ですね。このプログラムはファイルを読み込んで、結果をデータベースに保存します。"
    "エラーが発生した場合は、ログを確認してください。設定ファイルのパスが正しいかどうかを確認してから、"
    "サービスを再起動してください。東京駅から新幹線に乗って大阪へ行きました。",
    "日本語の文章には、ひらがな、カタカナ、漢字が混在しています。コンピュータの性能は年々向上しており、"
    "以前は不可能だった計算も短時間で実行できるようになりました。",
    "오늘은 날씨가 정말 좋네요. 이 프로그램은 파일을 읽고 결과를 데이터베이스에 저장합니다. "
    "오류가 발생하면 로그를 확인하십시오. 설정 파일의 경로가 올바른지 확인한 후 서비스를 다시 시작하세요. "
    "인공지능 기술은 우리의 생활 방식을 크게 바꾸고 있습니다.",
    "한국어는 한글로 표기하며, 띄어쓰기를 사용합니다. "
    "개발자는 새로운 도구와 프레임워크를 계속 배워야 합니다. "
    "코드 리뷰는 소프트웨어 품질을 보장하는 중요한 과정입니다.",
]


def cjk_strings() -> list[str]:
    """Return CJK text: vim's zh/ja/ko message catalogues (if installed) and hand-written text."""
    out = list(HANDWRITTEN_CJK)
    for lang in ("zh_CN.UTF-8", "zh_TW.UTF-8", "ja", "ko.UTF-8"):
        path = f"/usr/share/vim/vim90/lang/{lang}/LC_MESSAGES/vim.mo"
        if not os.path.exists(path):
            continue
        messages_of = read_catalog(path)
        if messages_of is None:
            continue
        messages = messages_of
        # one "document" per 40 consecutive messages, like a help page
        for i in range(0, len(messages), 40):
            out.append("\n".join(messages[i : i + 40]))
    return out


SYMBOLS = ["😀", "🚀", "✅", "❌", "⚠️", "👍", "🎉", "→", "←", "—", "–", "…", "•", "“", "”", "’", "©", "°",
           "±", "×", "€", "£", "✓", "★", "│", "├──", "└──", "─" * 20, "═" * 12, "▶", "·", "§", "µ"]


def mixed_strings(rng: random.Random, prose: list[str]) -> list[str]:
    """Return European-language messages and English prose sprinkled with symbols and emoji."""
    out = []
    for lang in ("de", "fr", "es", "pl.UTF-8", "cs", "tr", "ru", "uk", "sr", "vi", "it", "pt_BR"):
        path = f"/usr/share/vim/vim90/lang/{lang}/LC_MESSAGES/vim.mo"
        if not os.path.exists(path):
            continue
        messages_of = read_catalog(path)
        if messages_of is None:
            continue
        messages = messages_of
        for i in range(0, min(len(messages), 800), 40):
            out.append("\n".join(messages[i : i + 40]))
    for text in rng.sample(prose, min(len(prose), 200)):
        words = text.split(" ")
        for _ in range(max(1, len(words) // rng.randint(4, 30))):
            words.insert(rng.randrange(len(words) + 1), rng.choice(SYMBOLS))
        out.append(" ".join(words))
    return out


def base64_strings(rng: random.Random) -> list[str]:
    """Return base64 text of random bytes, compressed text and binary files."""
    blobs: list[bytes] = [rng.randbytes(rng.randint(200, 6000)) for _ in range(150)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py"))[200:260]:
        blobs.append(zlib.compress(path.read_bytes())[:6000])
    for path in sorted(glob.glob(str(Path(np.__file__).parent / "**" / "*.so"), recursive=True))[:20]:
        data = Path(path).read_bytes()
        start = rng.randint(0, max(0, len(data) - 6000))
        blobs.append(data[start : start + 6000])
    out = []
    for i, blob in enumerate(blobs):
        if i % 4 == 0:
            out.append(base64.encodebytes(blob).decode())
        elif i % 4 == 1:
            out.append(base64.urlsafe_b64encode(blob).decode())
        else:
            out.append(base64.b64encode(blob).decode())
    return out


def pieces(strings: list[str], rng: random.Random) -> list[list[str]]:
    """Cut or join ``strings`` into message-sized pieces; one list of pieces per source group."""
    groups: list[list[str]] = []
    pending: list[str] = []
    pending_len = 0
    for s in strings:
        if len(s) >= MIN_PIECE:
            group = []
            start = 0
            while start < len(s) and len(group) < MAX_PIECES_PER_STRING:
                size = rng.randint(MIN_PIECE, MAX_PIECE)
                piece = s[start : start + size]
                if len(piece) >= MIN_PIECE:
                    group.append(piece)
                start += size
            groups.append(group)
            continue
        pending.append(s)
        pending_len += len(s) + 1
        if pending_len >= rng.randint(MIN_PIECE, MAX_PIECE // 2):
            groups.append(["\n".join(pending)])
            pending, pending_len = [], 0
    return [g for g in groups if g]


def build_corpora(seed: int = 20240501) -> dict[str, tuple[list[str], list[str]]]:
    """Return ``corpus -> (training pieces, held-out pieces)``."""
    rng = random.Random(seed)
    prose = prose_strings()
    words = sorted({w.strip(".,;:()[]`'\"") for text in prose[:200] for w in text.split()} - {""})
    sources = {
        "agent": agent_strings(),
        "prose": prose,
        "code": code_strings(),
        "json": json_documents(rng, words),
        "cjk": cjk_strings(),
        "base64": base64_strings(rng),
        "mixed": mixed_strings(rng, prose),
    }
    corpora = {}
    for name, strings in sources.items():
        groups = pieces(strings, rng)
        train: list[str] = []
        held_out: list[str] = []
        for i, group in enumerate(groups):
            (held_out if i % 2 else train).extend(group)
        corpora[name] = (train, held_out)
    return corpora


# --------------------------------------------------------------------------- fitting


def feature_matrix(texts: list[str]) -> np.ndarray:
    return np.array([_estimate_py.text_features(t) for t in texts], dtype=np.float64)


def token_counts(texts: list[str], encoding: str) -> np.ndarray:
    enc = get_encoding(encoding)
    return np.array([len(enc.encode_ordinary(t)) for t in texts], dtype=np.float64)


# agent transcripts are what the estimator is for: they weigh as much as all the others together
CORPUS_WEIGHT = {"agent": 10.0, "prose": 1.0, "code": 1.0, "json": 1.0, "cjk": 1.0, "base64": 1.0}
CORPUS_WEIGHT["mixed"] = 1.0
RIDGE = 0.02  # pulls each coefficient towards 0 (towards PRIOR for per-character counts of rare classes)
PRIOR = {"symbols": 1.0, "other": 1.0, "astral": 2.0, "cjk_punct": 1.0, "latin": 0.5}


def fit(xs: dict[str, np.ndarray], ys: dict[str, np.ndarray], rounds: int = 12) -> np.ndarray:
    """Return coefficients minimizing the weighted absolute relative error, digit_tokens fixed at 1.

    Least squares on rows weighted by ``1 / tokens`` (relative error), then iteratively
    reweighted (``1 / max(|relative residual|, 0.5 %)``) towards the mean absolute relative
    error, which is what we report.
    """
    names = _estimate_py.FEATURE_NAMES[1:]
    xs_rel, ys_rel, corpus_w = [], [], []
    for name in xs:
        x, y = xs[name], ys[name]
        keep = y > 0
        x, y = x[keep], y[keep]
        xs_rel.append(x[:, 1:] / y[:, None])
        ys_rel.append((y - x[:, 0]) / y)
        # each corpus weighs the same in total (times CORPUS_WEIGHT)
        corpus_w.append(np.full(len(y), CORPUS_WEIGHT[name] / len(y)))
    a0 = np.vstack(xs_rel)
    b0 = np.concatenate(ys_rel)
    w0 = np.concatenate(corpus_w)
    irls = np.ones_like(b0)
    # a little ridge keeps features with few examples (emoji, symbols) at plausible values
    ridge_a = RIDGE * np.eye(len(names))
    ridge_b = np.array([RIDGE * PRIOR.get(name, 0.0) for name in names])
    coef = np.zeros(len(names))
    for _ in range(rounds):
        w = np.sqrt(w0 * irls * len(xs))
        a = np.vstack([a0 * w[:, None], ridge_a])
        b = np.concatenate([b0 * w, ridge_b])
        coef, *_ = np.linalg.lstsq(a, b, rcond=None)
        residual = np.abs(a0 @ coef - b0)
        irls = 1.0 / np.maximum(residual, 0.005)
        irls /= irls.mean()
    return np.concatenate([[1.0], coef])


def estimates(x: np.ndarray, coef: tuple[float, ...]) -> np.ndarray:
    """Vectorized twin of ``estimate_tokens`` (same rounding; float sums may differ in the last ulp)."""
    total = x @ np.asarray(coef)
    return np.where(total <= 0.0, 0.0, np.floor(total + 0.5))


def mape(est: np.ndarray, y: np.ndarray) -> float:
    keep = y > 0
    return float(np.mean(np.abs(est[keep] - y[keep]) / y[keep]) * 100.0)


def write_module(coefficients: dict[str, tuple[float, ...]], held_out: dict[str, dict[str, float]]) -> None:
    lines = [
        '"""Coefficients of the token estimator, one vector per encoding (generated; do not edit).',
        "",
        "Written by ``scripts/fit_estimator.py``; ``HELD_OUT_MAPE`` is the mean absolute percentage",
        "error of the estimate against tiktoken on the held-out pieces of each corpus.",
        '"""',
        "",
        "FEATURE_NAMES: tuple[str, ...] = (",
        *[f'    "{name}",' for name in _estimate_py.FEATURE_NAMES],
        ")",
        "",
        "COEFFICIENTS: dict[str, tuple[float, ...]] = {",
    ]
    for enc, coef in coefficients.items():
        lines.append(f'    "{enc}": (')
        for name, value in zip(_estimate_py.FEATURE_NAMES, coef, strict=True):
            lines.append(f"        {value!r},  # {name}")
        lines.append("    ),")
    lines += ["}", "", "HELD_OUT_MAPE: dict[str, dict[str, float]] = {"]
    for enc, errors in held_out.items():
        lines.append(f'    "{enc}": {{')
        lines.extend(f'        "{k}": {v:.2f},' for k, v in errors.items())
        lines.append("    },")
    lines += ["}", ""]
    OUT.write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the shipped coefficients' error")
    args = parser.parse_args(argv)

    corpora = build_corpora()
    print("pieces per corpus (train / held out):",
          ", ".join(f"{k} {len(v[0])}/{len(v[1])}" for k, v in corpora.items()))
    x_train = {k: feature_matrix(v[0]) for k, v in corpora.items()}
    x_test = {k: feature_matrix(v[1]) for k, v in corpora.items()}

    if args.check:
        from compaction.tokens.estimator_coefficients import COEFFICIENTS

        coefficients = dict(COEFFICIENTS)
    else:
        coefficients = {}
    held_out: dict[str, dict[str, float]] = {}
    for enc in ENCODING_NAMES:
        y_train = {k: token_counts(v[0], enc) for k, v in corpora.items()}
        y_test = {k: token_counts(v[1], enc) for k, v in corpora.items()}
        if not args.check:
            coefficients[enc] = tuple(float(c) for c in fit(x_train, y_train))
        coef = coefficients[enc]
        held_out[enc] = {k: mape(estimates(x_test[k], coef), y_test[k]) for k in CORPORA}
        train_err = {k: mape(estimates(x_train[k], coef), y_train[k]) for k in CORPORA}
        print(f"\n{enc}: mean absolute % error vs tiktoken (held out | training)")
        for k in CORPORA:
            print(f"  {k:8s} {held_out[enc][k]:6.2f} % | {train_err[k]:6.2f} %")
    if not args.check:
        write_module(coefficients, held_out)
        print(f"\nwrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
