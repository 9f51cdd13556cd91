"""OpenHands evaluation output (``output.jsonl``).

One record a line per benchmark instance: ``instance_id``, ``instruction``, ``metadata``
(``llm_config.model`` ...), ``history`` (the run's event stream), ``metrics``, ``error``.
The runs are concatenated in file order; the first message of each run carries
``meta["instance_id"]`` (and ``meta["run_error"]`` when the run ended in an error).

History events are actions (``action``) or observations (``observation``) with ``id``,
``timestamp``, ``source`` (agent / user / environment):

* action ``system`` -> a system message (``args.content``);
* action ``message`` -> a user or assistant text message by ``source`` (user ``image_urls``
  become image blocks);
* an agent action with ``tool_call_metadata`` embeds the raw Chat Completions response
  (``model_response``): the first action of a response becomes the assistant message
  (its text, reasoning and every tool call, through the OpenAI mapping); later actions of the
  same response add nothing.  Without ``model_response`` the call is rebuilt from
  ``function_name`` / ``tool_call_id`` / ``args``;
* an agent action without tool metadata (``think``, ``finish`` of older agents ...) becomes
  assistant text from its ``message``;
* an observation with ``tool_call_metadata`` -> a ``tool_result`` answering
  ``tool_call_metadata.tool_call_id`` (``is_error`` for ``error`` observations); consecutive
  results merge into one user message;
* an ``error`` observation without tool metadata (a tool call the runtime rejected before it
  became an action) -> a user text message with the error, as OpenHands shows it to the model;
* ``recall`` observations (workspace context, micro-agent knowledge) -> a user text message
  with the non-empty knowledge they add; ``recall`` actions and state-change observations
  carry nothing the model reads and are skipped.

A call with no observation in the source (the final ``finish`` of a run) stays unanswered.
OpenHands numbers tool calls ``toolu_01``, ``toolu_02`` ... afresh in each run;
``_common.uniquify_tool_ids`` makes the concatenation unique (``toolu_01_2`` ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import partial
from typing import Any

from ._common import (
    Context,
    Draft,
    Malformed,
    convert_items,
    image_from_url,
    iter_jsonl,
    parse_arguments,
    text_blocks,
    tool_result,
    tool_use,
)
from ._sniff import Sample, TranscriptFormat
from .openai import OpenAIConverter

__all__ = ["FORMAT", "NAME", "parse", "sniff"]

NAME = "openhands"

_OPENING = re.compile(r'\{\s*"instance_id"\s*:')
_SILENT_OBSERVATIONS = frozenset({"agent_state_changed", "null", "change_agent_state", "condense"})


def _recall_text(event: dict[str, Any]) -> str:
    extras: dict[str, Any] = event["extras"] if isinstance(event.get("extras"), dict) else {}
    parts: list[str] = []
    for key in ("repo_instructions", "additional_agent_instructions"):
        if isinstance(extras.get(key), str) and extras[key].strip():
            parts.append(extras[key].strip())
    for item in extras.get("microagent_knowledge") or []:
        if isinstance(item, dict) and isinstance(item.get("content"), str) and item["content"].strip():
            parts.append(f"<EXTRA_INFO name={item.get('name')!r}>\n{item['content'].strip()}\n</EXTRA_INFO>")
    return "\n\n".join(parts)


def _observation_text(event: dict[str, Any]) -> str:
    content = event.get("content")
    if isinstance(content, str) and content:
        return content
    message = event.get("message")
    return message if isinstance(message, str) else ""


def _event_draft(event: Any, converter: OpenAIConverter, responses: set[str]) -> Draft | None:
    """Return the draft of one history event, or ``None`` for an event the model does not read.

    ``converter`` converts the run's model responses; ``responses`` holds the ids of those
    already converted (one response may drive several actions).
    """
    if not isinstance(event, dict):
        raise Malformed("a history event must be an object")
    metadata = event.get("tool_call_metadata")
    source = event.get("source")
    args: dict[str, Any] = event["args"] if isinstance(event.get("args"), dict) else {}
    if "action" in event:
        action = event["action"]
        if isinstance(metadata, dict):
            response = metadata.get("model_response")
            if isinstance(response, dict) and response.get("choices"):
                response_id = response.get("id")
                if isinstance(response_id, str):
                    if response_id in responses:
                        return None
                    responses.add(response_id)
                choice = response["choices"][0]
                message = choice.get("message") if isinstance(choice, dict) else None
                draft = converter.convert(
                    {**message, "role": "assistant"} if isinstance(message, dict) else None
                )
                if isinstance(response.get("model"), str):
                    draft.meta["model"] = response["model"]
                return draft
            call_id, name = metadata.get("tool_call_id"), metadata.get("function_name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise Malformed("tool_call_metadata needs string 'tool_call_id' and 'function_name'")
            thought = args.get("thought")
            tool_input = {k: v for k, v in args.items() if k != "thought"}
            use = tool_use(call_id, name, parse_arguments(tool_input))
            return Draft("assistant", text_blocks(thought if isinstance(thought, str) else None) + [use])
        if action == "system":
            return Draft("system", text_blocks(args.get("content") or event.get("message")))
        if action == "message":
            role = "user" if source == "user" else "assistant"
            blocks = text_blocks(args.get("content") or event.get("message"))
            for url in args.get("image_urls") or []:
                blocks.append(image_from_url(url))
            return Draft(role, blocks)
        if action == "recall" or source != "agent":
            return None
        return Draft("assistant", text_blocks(event.get("message")))
    if "observation" in event:
        observation = event["observation"]
        if not isinstance(observation, str):  # an object is no kind of observation (nor hashable)
            raise Malformed(
                f"an observation must be a string naming its kind; found {type(observation).__name__}"
            )
        if isinstance(metadata, dict):
            call_id = metadata.get("tool_call_id")
            if not isinstance(call_id, str):
                raise Malformed("tool_call_metadata needs a string 'tool_call_id'")
            return Draft("user", [tool_result(call_id, _observation_text(event), observation == "error")])
        if observation == "recall":
            return Draft("user", text_blocks(_recall_text(event)))
        if observation in _SILENT_OBSERVATIONS:
            return None
        return Draft("user", text_blocks(_observation_text(event)))
    raise Malformed("a history event needs an 'action' or an 'observation'")


def parse(text: str | bytes | Iterable[bytes], ctx: Context) -> list[Draft]:
    """Parse an OpenHands output.jsonl into drafts (all runs, in file order)."""
    drafts: list[Draft] = []
    for line, record in iter_jsonl(text, ctx):
        history = record.get("history")
        if not isinstance(history, list):
            ctx.problem("an OpenHands record needs a 'history' list", line=line)
            continue
        first = len(drafts)
        items = [(event, line, f"history[{index}]") for index, event in enumerate(history)]
        convert = partial(_event_draft, converter=OpenAIConverter(), responses=set())
        for event, draft in convert_items(items, ctx, convert):
            if event.get("id") is not None:
                draft.source_id = str(event["id"])
            if isinstance(event.get("timestamp"), str):
                draft.meta["timestamp"] = event["timestamp"]
            drafts.append(draft)
        first_draft = next((d for d in drafts[first:] if d.content), None)
        if first_draft is not None:
            if isinstance(record.get("instance_id"), str):
                first_draft.meta["instance_id"] = record["instance_id"]
            if isinstance(record.get("error"), str) and record["error"]:
                first_draft.meta["run_error"] = record["error"][:500]
    return drafts


def sniff(sample: Sample) -> bool:
    """Claim OpenHands records: JSONL lines with ``instance_id`` and ``history`` (or
    ``instruction``), a head that opens with ``{"instance_id":``, or such a document."""
    if any("instance_id" in r and ("history" in r or "instruction" in r) for r in sample.entries):
        return True
    if _OPENING.match(sample.text[:4096]):
        return True
    document = sample.document
    return isinstance(document, dict) and "instance_id" in document and "history" in document


FORMAT = TranscriptFormat(
    name=NAME,
    priority=50,
    sniff=sniff,
    parse=parse,
    holds="an OpenHands run record ('instance_id' with a 'history' of events)",
    reads_bytes=True,
)
