"""Request formats: one object per provider request shape, and the registry that names them.

Example:
    >>> from compaction.outputs import request_format
    >>> request_format("anthropic").default_model
    'claude-sonnet-4-5'
"""

from __future__ import annotations

from ..errors import RecipeError
from ..types import RequestFormatName
from .anthropic_messages import AnthropicMessages
from .base import RequestFormat, WireMessage, count_body_images
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

__all__ = ["RequestFormat", "WireMessage", "REQUEST_FORMATS", "request_format", "count_body_images"]

#: Every request format by name, in the order ``--to`` lists them.
REQUEST_FORMATS: dict[str, RequestFormat] = {f.name: f for f in (OpenAIChat(), AnthropicMessages(), OpenAIResponses())}


def request_format(name: RequestFormatName | str | RequestFormat) -> RequestFormat:
    """Return the request format called ``name`` (a format object is returned as it is).

    Raises:
        RecipeError: no format has that name (the message lists the known ones).
    """
    if isinstance(name, RequestFormat):
        return name
    try:
        return REQUEST_FORMATS[name]
    except (KeyError, TypeError):
        known = ", ".join(repr(n) for n in REQUEST_FORMATS)
        raise RecipeError(f"unknown request format {name!r}; expected one of {known}") from None
