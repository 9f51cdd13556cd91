"""The estimator's code space and its per-encoding weight tables, shipped as package data.

A weight table is ``N_CODES * N_CODES`` signed 32-bit integers, ``W[previous * N_CODES +
current]``, the cost in units of ``2 ** -SCALE_BITS`` tokens of the code ``current`` following
the code ``previous`` (see :mod:`compaction.tokens._estimate_py` for the codes).  Each table is
stored little-endian and gzipped as ``compaction/tokens/data/estimator-<encoding>.i32.gz``; its
sha256 (of the un-gzipped bytes) is recorded in the generated module
:mod:`compaction.tokens.estimator_fit`, beside the error measured when it was fitted.
Both are written by ``scripts/fit_estimator.py``.
"""

from __future__ import annotations

import array
import gzip
import hashlib
import sys
import threading
import zlib
from importlib import resources

from ..errors import EncodingDataMissing
from .estimator_fit import FORMAT, TABLE_SHA256

__all__ = ["N_CLASSES", "TRADITIONAL_HAN", "N_CODES", "BOUNDARY", "CLASS_BASE", "REPEAT_BASE", "SCALE_BITS", "LETTER_CODES",
           "weight_table", "table_filename"]

N_CLASSES = 29  # character classes (see compaction.tokens._estimate_py.char_class)
CLASS_BASE = 128  # a non-ASCII character: CLASS_BASE + its class
REPEAT_BASE = CLASS_BASE + N_CLASSES  # a non-ASCII character repeating the one before it
BOUNDARY = REPEAT_BASE + N_CLASSES  # before the first and after the last character
N_CODES = BOUNDARY + 1
SCALE_BITS = 16  # weights are in units of 2 ** -16 tokens
#: Han characters of Traditional Chinese that Simplified Chinese writes otherwise (``個`` for
#: ``个``): class ``HAN_TRADITIONAL`` rather than ``HAN``, since o200k_base and cl100k_base
#: spend more tokens on Traditional text.  Derived from the script corpora of
#: ``scripts/fit_estimator.py`` (its training half): the characters of the zh_Hant and zh_TW
#: catalogues seen at least twice and never in the zh_Hans and zh_CN ones.
TRADITIONAL_HAN = frozenset(
    "並予亞亦份伺佈來個們停側備傳僅儲充兆兩冊別刪則創動區千參員問啟單嗎圍圖埠執報塊夠夾學宣實審寫寬將專尋對導層屬己帳幾庫廣影"
    "很後徑從復態應戶換援擇擊據擴敗敘數於時書會案條棄業構標樣檔檢欄權歡歷決況派準溯濾為烏無照熱爾物狀獲現環產異當發盧真確碼礎"
    "秭種稱穰節範篩簽籤精組結絕給統經網綴線編總繼續義腦腳與舊落蔽蘭處號裝裡製複見規視覽訂計訊記設許註評詞試該誌認語誤說請論謝"
    "證識譯議護讀變資足載輯輸轉透這連週進過遠適選遺還邊郵鈕錄錯鍵鎖鏈長門開間閱關陣階隱離電靜頁項須預頭類顯馬駁驗驟體點"
)
#: The classes of letters whose runs both pre-tokenizers keep whole: the two-byte letters
#: (Latin with accents, Greek, Cyrillic, Hebrew, Arabic) and Vietnamese's Latin Extended
#: Additional (classes 8, 16-20, 24 and 28 of ``_estimate_py``).  (The Brahmic scripts and Thai hold combining vowel signs, which cl100k_base's
#: ``\p{L}+`` does not take, so they have no floor.)
LETTER_CLASSES = (8, 16, 17, 18, 19, 20, 24, 28)
#: The codes of letters: a run of them is at least one token (a piece of its own to both
#: pre-tokenizers), whatever the weights say.
LETTER_CODES = frozenset(
    [*range(65, 91), *range(97, 123), *(CLASS_BASE + c for c in LETTER_CLASSES), *(REPEAT_BASE + c for c in LETTER_CLASSES)]
)
FORMAT_NAME = f"pairs-{N_CODES}-i32le-q{SCALE_BITS}"

_lock = threading.Lock()
_tables: dict[str, array.array[int]] = {}


def table_filename(encoding: str) -> str:
    """Return the file name of ``encoding``'s weight table under ``compaction/tokens/data``."""
    return f"estimator-{encoding}.i32.gz"


def weight_table(encoding: str) -> array.array[int]:
    """Return the weight table of ``encoding``: an ``array('i')`` of ``N_CODES ** 2`` weights.

    The array is shared and cached for the process; do not modify it.

    Raises:
        EncodingDataMissing: no table for ``encoding``, its file is missing from the installed
            package, or it does not match the recorded size, format or sha256.
    """
    table = _tables.get(encoding)
    if table is not None:
        return table
    with _lock:
        if encoding in _tables:
            return _tables[encoding]
        if FORMAT != FORMAT_NAME:
            raise EncodingDataMissing(
                f"compaction.tokens.estimator_fit describes tables of format {FORMAT!r}, "
                f"this code reads {FORMAT_NAME!r}; run scripts/fit_estimator.py to refit them"
            )
        expected = TABLE_SHA256.get(encoding)
        if expected is None:
            known = ", ".join(sorted(TABLE_SHA256))
            raise EncodingDataMissing(f"no estimator table for encoding {encoding!r}; expected one of: {known}")
        name = table_filename(encoding)
        try:
            packed = resources.files(__package__).joinpath("data").joinpath(name).read_bytes()
        except (FileNotFoundError, OSError) as err:
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} is missing from the installed "
                f"package (compaction/tokens/data/); reinstall compaction"
            ) from err
        try:
            raw = gzip.decompress(packed)
        except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} is not a readable gzip file "
                f"({err}); the package data is corrupt, reinstall compaction"
            ) from err
        digest = hashlib.sha256(raw).hexdigest()
        if digest != expected or len(raw) != 4 * N_CODES * N_CODES:
            raise EncodingDataMissing(
                f"the estimator table {name} of encoding {encoding!r} has sha256 {digest} and "
                f"{len(raw)} bytes, expected {expected} and {4 * N_CODES * N_CODES}; "
                f"the package data is corrupt, reinstall compaction"
            )
        table = array.array("i")
        if table.itemsize != 4:  # pragma: no cover - every CPython platform has a 32-bit C int
            raise EncodingDataMissing("this platform has no 32-bit array type for the estimator tables")
        table.frombytes(raw)
        if sys.byteorder == "big":  # pragma: no cover - stored little-endian
            table.byteswap()
        _tables[encoding] = table
        return table
