"""The one reader of a message's content field (``formats._common.typed_parts``) that six parsers share."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.formats._common import Malformed, typed_parts
from compaction.formats.anthropic import content_blocks
from compaction.formats.openai import content_parts

_PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "tool_use", "x-unknown"])}, optional={"text": st.text(max_size=5)})


def test_a_string_is_one_text_part_and_none_or_empty_is_none() -> None:
    assert typed_parts("hello") == [{"type": "text", "text": "hello"}]
    assert typed_parts("") == []
    assert typed_parts(None) == []
    assert typed_parts([]) == []


@given(st.lists(st.one_of(_PART, st.text(max_size=5)), max_size=8))
def test_parts_come_back_one_for_one_in_order(content: list) -> None:
    parts = typed_parts(content)
    assert len(parts) == len(content)
    for item, part in zip(content, parts, strict=True):
        assert part == ({"type": "text", "text": item} if isinstance(item, str) else item)
        if isinstance(item, dict):
            assert part is item  # not copied: callers keep the original part (e.g. as _source)


def test_a_bare_string_in_the_list_is_refused_where_the_format_has_none() -> None:
    with pytest.raises(Malformed, match=r"^content\[1\] must be an object with a string 'type', found str$"):
        typed_parts([{"type": "text", "text": "a"}, "b"], strings=False)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (7, "messages[2].content must be a string or a list of parts, found int"),
        ({"type": "text"}, "messages[2].content must be a string or a list of parts, found dict"),
        ([{"text": "no type"}], "messages[2].content[0] must be a string or an object with a string 'type', found dict"),
        ([{"type": 3}], "messages[2].content[0] must be a string or an object with a string 'type', found dict"),
        (["ok", None], "messages[2].content[1] must be a string or an object with a string 'type', found NoneType"),
    ],
)
def test_bad_content_names_the_field_and_what_was_found(content: object, message: str) -> None:
    with pytest.raises(Malformed) as err:
        typed_parts(content, "messages[2].content")
    assert str(err.value) == message


def test_the_parsers_read_content_through_it() -> None:
    assert content_parts(["a", {"type": "text", "text": "b"}]) == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    assert content_blocks("hi") == [{"type": "text", "text": "hi"}]
    with pytest.raises(Malformed, match=r"content\[0\] must be an object"):
        content_blocks(["bare"])
