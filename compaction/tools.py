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

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .blocks import MAX_JSON_DEPTH, canonical_json, json_depth
from .errors import InvalidMessage
from .outputs import request_format
from .tokens.counting import count_text

__all__ = [
    "ToolDefinition",
    "normalize_tools",
    "parse_tools_json",
    "render_tools",
    "tools_tokens",
    "TOOL_DEFINITION_OVERHEAD",
]

ToolDefinition = dict[str, Any]

#: Framing tokens per tool definition, beyond its JSON.
TOOL_DEFINITION_OVERHEAD = 8


def parse_tools_json(text: str, source: str = "tools") -> list[Any]:
    """Return the tool definitions of a JSON text (an array, as a ``--tools`` file holds).

    Args:
        text: the JSON text.
        source: where it came from (a file name), named in errors.

    Returns:
        The definitions, as parsed; :func:`normalize_tools` checks each.

    Raises:
        InvalidMessage: the text is not JSON, is nested too deeply for the JSON parser, or is
            not an array; the message names ``source``.

    Example:
        >>> parse_tools_json('[{"name": "ls"}]', "tools.json")
        [{'name': 'ls'}]
    """
    try:
        tools = json.loads(text)
    except RecursionError as err:
        raise InvalidMessage(
            f"{source}: tool definitions nest too deeply to parse; at most {MAX_JSON_DEPTH} levels are allowed"
        ) from err
    except ValueError as err:  # not JSON, or an integer longer than Python converts
        raise InvalidMessage(f"{source}: tool definitions must be a JSON array: {err}") from err
    if not isinstance(tools, list):
        raise InvalidMessage(f"{source}: tool definitions must be a JSON array; found {type(tools).__name__}")
    return tools


def normalize_tools(tools: Sequence[Any]) -> tuple[ToolDefinition, ...]:
    """Return the definitions as ``{"name", "description", "parameters"}`` dicts.

    Raises:
        InvalidMessage: a definition is not an object, lacks a string ``name``, its schema is
            not an object, or it nests deeper than :data:`~compaction.blocks.MAX_JSON_DEPTH`
            levels of objects and arrays (the message names the definition's index).
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
        if json_depth(tool, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise InvalidMessage(
                f"{where} ({name}): the definition nests more than {MAX_JSON_DEPTH} levels of JSON "
                f"objects and arrays; at most {MAX_JSON_DEPTH} are allowed: flatten its schema "
                "(fewer nested objects, or a $ref to a shared definition)"
            )
        schema = spec.get("parameters", spec.get("input_schema", {"type": "object", "properties": {}}))
        if not isinstance(schema, dict):
            raise InvalidMessage(
                f"{where} ({name}): the parameters / input_schema must be a JSON schema object"
            )
        description = spec.get("description", "")
        if not isinstance(description, str):
            raise InvalidMessage(f"{where} ({name}): 'description' must be a string")
        out.append({"name": name, "description": description, "parameters": schema})
    counts = Counter(t["name"] for t in out)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
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
