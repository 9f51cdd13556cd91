"""Tool definitions: normalize, render per request format, and count.

A request that offers tools carries their definitions, and the model is billed for them.
Definitions may be given in either provider's shape and are normalized to
``{"name", "description", "parameters"}`` (a JSON schema):

* OpenAI Chat: ``{"type": "function", "function": {"name", "description", "parameters"}}``
  (https://platform.openai.com/docs/guides/function-calling);
* Anthropic Messages: ``{"name", "description", "input_schema"}``
  (https://docs.anthropic.com/en/docs/build-with-claude/tool-use).

Providers do not publish how definitions are tokenized (OpenAI renders them into the
system prompt in a TypeScript-like form); we count the definitions' compact JSON in the
request's wire shape plus a small frame per tool, which is never below the rendered form
of ordinary schemas, so budgets stay on the safe side.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .blocks import canonical_json
from .errors import InvalidMessage
from .outputs import request_format
from .tokens.counting import count_text

__all__ = ["ToolDefinition", "normalize_tools", "render_tools", "tools_tokens", "TOOL_DEFINITION_OVERHEAD"]

ToolDefinition = dict[str, Any]

#: Framing tokens per tool definition, beyond its JSON.
TOOL_DEFINITION_OVERHEAD = 8


def normalize_tools(tools: Sequence[Any]) -> tuple[ToolDefinition, ...]:
    """Return the definitions as ``{"name", "description", "parameters"}`` dicts.

    Raises:
        InvalidMessage: a definition is not an object, lacks a string ``name``, or its
            schema is not an object (the message names the definition's index).
    """
    out: list[ToolDefinition] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise InvalidMessage(f"{where}: a tool definition must be an object; found {type(tool).__name__}")
        spec = (
            tool["function"]
            if tool.get("type") == "function" and isinstance(tool.get("function"), dict)
            else tool
        )
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidMessage(f"{where}: a tool definition needs a non-empty string 'name'")
        schema = spec.get("parameters", spec.get("input_schema", {"type": "object", "properties": {}}))
        if not isinstance(schema, dict):
            raise InvalidMessage(
                f"{where} ({name}): the parameters / input_schema must be a JSON schema object"
            )
        description = spec.get("description", "")
        if not isinstance(description, str):
            raise InvalidMessage(f"{where} ({name}): 'description' must be a string")
        out.append({"name": name, "description": description, "parameters": schema})
    names = [t["name"] for t in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidMessage(f"tools: each name must be unique; repeated: {', '.join(duplicates)}")
    return tuple(out)


def render_tools(tools: Sequence[ToolDefinition], format: str) -> list[dict[str, Any]]:
    """Return normalized definitions in the wire shape of the request format ``format``.

    Raises:
        RecipeError: an unknown format name.
    """
    return request_format(format).render_tools(tools)


def tools_tokens(tools: Sequence[ToolDefinition], format: str, encoding: str) -> int:
    """Return the tokens the definitions cost in a request (tokens; 0 without tools)."""
    return sum(
        TOOL_DEFINITION_OVERHEAD + count_text(canonical_json(t), encoding)
        for t in render_tools(tools, format)
    )
