"""Exact counts for local models: the encoding ``hf:PATH`` names a Hugging Face ``tokenizer.json``.

Llama 3, Qwen 2.5, Mistral and most open models publish their tokenizer as one
``tokenizer.json``; the ``tokenizers`` library (installed with ``pip install
'compaction[local]'``) loads it and counts exactly what the model's server counts.  A text's
count is ``len(Tokenizer.encode(text, add_special_tokens=False).ids)``: no begin-of-text
token (the chat template's framing is counted apart, see :mod:`.chat_templates`), and special
tokens written in the text are recognized as servers do when they render a prompt.

The encoding's name is ``hf:PATH`` or ``hf:PATH#TEMPLATE``: ``PATH`` a ``tokenizer.json`` file
(or a directory holding one), ``TEMPLATE`` one of :data:`~.chat_templates.CHAT_TEMPLATE_NAMES`
(default: detected from the tokenizer's special tokens).  A recipe's ``chat_template`` key
writes the suffix.  Nothing is downloaded, ever: a Hub model id (``hf:meta-llama/Llama-3.1-8B``)
is refused with what to do instead.

A file is read and parsed once per process per name (a bounded cache of
:data:`MAX_LOADED`), and identified by the sha256 of its bytes: a store caches counts under
:func:`content_key`, ``hf:<sha256>#<template>``, so two different files never share cached
counts, and one file moved to another path keeps them.  ``tokenizers`` is imported only when
an ``hf:`` encoding is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .._files import special_file_kind
from ..errors import EncodingDataMissing
from .chat_templates import CHAT_TEMPLATE_NAMES, CHAT_TEMPLATES, detect_template, framing_counts

__all__ = [
    "HF_PREFIX",
    "MAX_LOADED",
    "TokenizerFileError",
    "LocalTokenizer",
    "is_hf_encoding",
    "hf_encoding",
    "load_tokenizer",
    "count_hf",
    "content_key",
    "framing",
]

HF_PREFIX = "hf:"
#: Tokenizers kept loaded at once (a Llama 3 ``tokenizer.json`` takes about 30 MB parsed).
MAX_LOADED = 4
#: The largest tokenizer.json read (bytes): real ones are 2-30 MB (Llama 3 about 9, Qwen 2.5
#: about 7); a bigger file is refused rather than read whole into memory.
MAX_TOKENIZER_BYTES = 512 << 20

#: ``owner/name`` with no file extension: a Hugging Face Hub model id, not a path.
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class TokenizerFileError(EncodingDataMissing):
    """An ``hf:`` encoding's tokenizer file is missing, unreadable or not a ``tokenizer.json``,
    the name is a Hub model id, or the ``tokenizers`` library is not installed.

    A :class:`~compaction.errors.EncodingDataMissing` (so a ``LookupError`` and a
    :class:`~compaction.errors.CompactionError`); the message names the path.
    """


@dataclass(frozen=True)
class LocalTokenizer:
    """One loaded ``tokenizer.json`` and the chat template its counts use.

    Attributes:
        path: the file's absolute path.
        sha256: hex digest of the file's bytes.
        template: the chat-template family (``"llama3"``, ``"chatml"``, ``"mistral"``, ``"none"``).
        detected: whether ``template`` was detected (``False``: named in the encoding).
        tokenizer: the ``tokenizers.Tokenizer``.
        message_overhead: framing tokens per message (tokens).
        request_overhead: framing tokens per request: begin-of-text and the reply primer (tokens).
    """

    path: str
    sha256: str
    template: str
    detected: bool
    tokenizer: Any
    message_overhead: int
    request_overhead: int

    def count(self, text: str) -> int:
        """Return the tokens of ``text`` (special-token text recognized, no BOS added)."""
        if not text:
            return 0
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def is_hf_encoding(encoding: object) -> bool:
    """Return whether ``encoding`` is an ``hf:`` name (a local ``tokenizer.json``)."""
    return isinstance(encoding, str) and encoding.startswith(HF_PREFIX)


def _split(encoding: str) -> tuple[str, str | None]:
    """Return ``(path, template or None)`` of an ``hf:PATH[#TEMPLATE]`` name."""
    body = encoding[len(HF_PREFIX) :]
    head, sep, tail = body.rpartition("#")
    if sep and tail in CHAT_TEMPLATE_NAMES:
        return head, tail
    return body, None


def hf_encoding(encoding: str, template: str | None) -> str:
    """Return the ``hf:`` name ``encoding`` with its chat template set to ``template``.

    ``None`` leaves the name as it is (the template it names, or detection).

    Raises:
        TokenizerFileError: ``template`` is not a known family.
    """
    if template is None:
        return encoding
    if template not in CHAT_TEMPLATE_NAMES:
        known = ", ".join(repr(n) for n in CHAT_TEMPLATE_NAMES)
        raise TokenizerFileError(f"unknown chat template {template!r}; expected one of {known}")
    path, _old = _split(encoding)
    return f"{HF_PREFIX}{path}#{template}"


def _resolve(encoding: str, path: str) -> str:
    if not path:
        raise TokenizerFileError(
            f"encoding {encoding!r}: no path after 'hf:'; write hf:/path/to/tokenizer.json"
        )
    if "://" in path:
        raise TokenizerFileError(
            f"encoding {encoding!r}: {path!r} is a URL; compaction never downloads a tokenizer: "
            f"download the model's tokenizer.json and pass hf:/path/to/tokenizer.json"
        )
    expanded = os.path.expanduser(path)
    if not os.path.exists(expanded) and _HUB_ID.match(path) and not path.endswith(".json"):
        raise TokenizerFileError(
            f"encoding {encoding!r}: {path!r} looks like a Hugging Face Hub model id and no such "
            f"file exists; compaction never downloads: download its tokenizer.json (e.g. "
            f"`hf download {path} tokenizer.json --local-dir DIR`) and pass hf:DIR/tokenizer.json"
        )
    if os.path.isdir(expanded):
        expanded = os.path.join(expanded, "tokenizer.json")
    return os.path.abspath(expanded)


_lock = threading.Lock()
_loaded: OrderedDict[str, LocalTokenizer] = OrderedDict()


def _parse(encoding: str, path: str, data: bytes) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as err:
        raise TokenizerFileError(
            f"encoding {encoding!r} needs the tokenizers library: pip install 'compaction[local]'"
        ) from err
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as err:  # tokenizers raises a bare Exception for a malformed file
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise TokenizerFileError(
            f"encoding {encoding!r}: {path} is not a Hugging Face tokenizer.json ({first})"
        ) from None


def load_tokenizer(encoding: str) -> LocalTokenizer:
    """Return the tokenizer an ``hf:`` encoding names, loaded once per process.

    Args:
        encoding: ``hf:PATH`` or ``hf:PATH#TEMPLATE`` (see the module docstring).

    Returns:
        The loaded tokenizer with its chat template and framing counts.

    Raises:
        TokenizerFileError: not an ``hf:`` name, a Hub id or URL, a missing or unreadable
            file, a file that is not a ``tokenizer.json``, or ``tokenizers`` not installed;
            the message names the path.
    """
    found = _loaded.get(encoding)
    if found is not None:
        return found
    if not is_hf_encoding(encoding):
        raise TokenizerFileError(f"{encoding!r} is not an hf: encoding (hf:/path/to/tokenizer.json)")
    raw_path, template = _split(encoding)
    path = _resolve(encoding, raw_path)
    kind = special_file_kind(path)
    if kind is not None:  # /dev/zero was read until memory ran out; a FIFO blocked
        raise TokenizerFileError(
            f"encoding {encoding!r}: the tokenizer file {path} is {kind}, not a regular file; "
            "name a tokenizer.json file"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_TOKENIZER_BYTES + 1)
    except OSError as err:
        raise TokenizerFileError(
            f"encoding {encoding!r}: cannot read the tokenizer file {path} ({err.strerror or err})"
        ) from err
    if len(data) > MAX_TOKENIZER_BYTES:
        raise TokenizerFileError(
            f"encoding {encoding!r}: the tokenizer file {path} is over {MAX_TOKENIZER_BYTES >> 20} MB, "
            "more than any tokenizer.json; name the model's tokenizer.json"
        )
    digest = hashlib.sha256(data).hexdigest()
    tokenizer = _parse(encoding, path, data)
    detected = template is None
    name = template or detect_template(lambda token: tokenizer.token_to_id(token) is not None)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids) if text else 0

    per_message, per_request = framing_counts(CHAT_TEMPLATES[name], count)
    loaded = LocalTokenizer(path, digest, name, detected, tokenizer, per_message, per_request)
    with _lock:
        _loaded[encoding] = loaded
        while len(_loaded) > MAX_LOADED:
            _loaded.popitem(last=False)
    return loaded


def count_hf(text: str, encoding: str) -> int:
    """Return the exact tokens of ``text`` under the ``hf:`` encoding (tokens).

    Raises:
        TokenizerFileError: as :func:`load_tokenizer`.
    """
    return load_tokenizer(encoding).count(text)


@lru_cache(maxsize=64)
def content_key(encoding: str) -> str:
    """Return ``hf:<sha256 of the file>#<template>``: the tokenizer named by its content.

    Stores cache counts under this key (with the counter's version), never under the path.

    Raises:
        TokenizerFileError: as :func:`load_tokenizer`.
    """
    loaded = load_tokenizer(encoding)
    return f"{HF_PREFIX}{loaded.sha256}#{loaded.template}"


def framing(encoding: str) -> tuple[int, int]:
    """Return ``(per_message, per_request)`` framing tokens of the ``hf:`` encoding's chat template."""
    loaded = load_tokenizer(encoding)
    return loaded.message_overhead, loaded.request_overhead
