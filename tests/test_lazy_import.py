"""``import compaction`` imports no submodule; each public name is imported on first use."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import compaction


def test_import_compaction_loads_no_submodule() -> None:
    code = (
        "import sys, compaction\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('compaction.'))\n"
        "print(','.join(loaded))\n"
        "print('httpx' in sys.modules, 'tiktoken' in sys.modules, 'psycopg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, third_party = out.splitlines()
    assert loaded == "compaction._lazy"  # the few lines that import the rest on first use
    assert third_party == "False False False"


@pytest.mark.parametrize("name", [n for n in compaction.__all__ if n != "__version__"])
def test_every_public_name_is_the_object_of_its_module(name: str) -> None:
    value = getattr(compaction, name)
    home = importlib.import_module(compaction._LAZY[name], "compaction")
    assert value is getattr(home, name)
    assert name in dir(compaction)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'compaction' has no attribute 'Stor'"):
        compaction.Stor  # noqa: B018


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from compaction import *", namespace)  # noqa: S102
    assert set(compaction.__all__) <= set(namespace)


def test_using_a_name_loads_only_what_it_needs() -> None:
    code = "import sys, compaction\ncompaction.count_text('hello world', 'o200k_base')\nprint('compaction.store' in sys.modules, 'httpx' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
