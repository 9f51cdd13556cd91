"""Read a stretch of raw messages into a :class:`~._record.Record`: the offline summary's facts.

One pass over the messages, in order:

- **Asks**: each user turn :func:`compaction.asks.ask_text` calls a person's ask, by message
  and its first words (the ask ledger carries them verbatim); the first is the **Goal**.
  User turns that are terminal output a harness shows as the user's (pi's ``Ran `cmd```,
  aider's ``Applied edit to …``, ``Tokens: … sent``) are tool runs, not asks.
- **Tool calls** pair with their results.  Each call has an action and a subject: ``read``,
  ``edit``, ``create``, ``write``, ``delete`` of a path (by the tool's name and its
  sub-command, or the shell command's verb: ``cat`` reads, ``rm`` deletes, ``sed -i``
  edits), ``run`` of a shell command (subject: its last ``&&`` part; identified by its head),
  or ``call`` of any other tool.  Files get what happened to them (only calls that
  succeeded); commands that change something, and other tools, are **Done** lines with their
  outcome; read-only commands (``ls``, ``grep``, ``git status``…) only name their files.
- **Errors** are what :func:`compaction.evidence.error_fragment` calls one (``is_error``, a
  non-zero exit code, a traceback, an error line at the start of a line; a search that found
  nothing is none, and a passing run such as ``# fail 0`` is none), each marked ``resolved``
  when a later run with the same action and subject succeeded in the stretch, else ``open``.
  An entry shows the error line, then the error's other lines (after ``⟩``: a compiler's
  "Types of parameters … are incompatible", a test's ``FAILED`` name, the lines before an
  exit code), rule lines, retry notices and lines that repeat it left out, long paths cut to
  their last three parts.
- **Decisions**: the plan sentences of the assistant's text
  (:func:`compaction.evidence.decision_sentences`).  **Done** also gets the assistant's report
  at the end of a turn (its first sentence), and the completed items of its todo list.
- **Open threads**: the last todo or plan state (items not completed), the assistant's last
  question when no ask followed it, the last stated plan, and runs of tests still failing.
- **Names**: the names (:func:`compaction.evidence.identifiers`, 80 characters at most) in the asks, the
  assistant's text and the tool calls' arguments, with how often each occurs; tool outputs
  are not read for names (a file dump names thousands).

Tool arguments are read decoded (dicts, or JSON strings parsed), never shown as escaped JSON.
For a split part (one tool round cut into flat text), :func:`unflatten` first rebuilds the
calls and results from the part's ``[assistant called tool …]`` / ``[tool result for …]``
markers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from ..asks import ask_text
from ..blocks import Block, Message, iter_strings
from ..evidence import (
    COMMAND_KEYS,
    ERROR_LINE,
    PATCH_HEADER,
    PATH_KEYS,
    PLAN_TOOL,
    READ_TOOLS,
    checklist_items,
    command_head,
    command_paths,
    decision_sentences,
    error_fragment,
    identifiers,
    is_file,
)
from ._record import ACTION_PAST, ErrorItem, Record, clip, clip_words

__all__ = ["extract", "unflatten", "message_range"]

#: Words of an ask shown in its reference line; words of the goal.
ASK_WORDS = 15
GOAL_WORDS = 25
#: Characters of tool output scanned for errors at each end (the middle is content).
_SCAN_CHARS = 20_000
#: Characters of an error entry's error line, and of the whole entry with its context lines.
ERROR_LINE_CHARS = 160
ERROR_ENTRY_CHARS = 300
#: A word of an error's lines (4+ letters): a context line with none the entry lacks is left out.
_CONTEXT_WORD = re.compile(r"[^\W\d_]{4,}")
_RETRYING = re.compile(r"^Retrying in [\d.]+ seconds", re.IGNORECASE)
#: A path of three or more parts, cut to its last three in an error's context lines.
_LONG_PATH = re.compile(r"(?:[\w.@+~-]*/){3,}[\w.@+-]+")
#: A rule line's run of decoration (``=====``, ``_____``, ``━━━━``, ``^^^^``, ``.....``).
_RULE = re.compile(r"[=_\-━─~^*#]{3,}|\.{4,}")
#: The longest name the Names section takes (characters; a longer URL costs more than it says).
MAX_NAME_CHARS = 80

_RANGE = re.compile(r"messages? (\d+)(?:–(\d+))?")
_DATA_URI = re.compile(r"data:image/[\w.+-]*;base64,[A-Za-z0-9+/=]*")
#: The first line of terminal output a harness shows as the user's turn (pi, aider), not a person's ask.
_OUTPUT_LIKE = re.compile(
    r"^(?:Tokens: [\d,.]+k? sent|Applied edit to |Added \S+ to the chat|Removed \S+ from the chat|Dropping all files"
    r"|Add the output to the chat\?|Aider v\d|Commit [0-9a-f]{7}|\^C|=+ test session starts|Ran `|litellm\."
    r"|WARNING: |Warning: |Traceback \(|\S+\.{4,}(?:Passed|Failed|Skipped)|> |E {3}|Here are summaries of some files"
    r"|Git repo: |Repo-map: |Models?: |Only \d+ reflections|No changes made|/\S+/bin/\S+)"
)
_RAN = re.compile(r"^Ran `([^`\n]*)`\n?")
_APPLIED = re.compile(r"^Applied edit to (\S+)$", re.MULTILINE)
_ADDED = re.compile(r"^Added (\S+) to the chat", re.MULTILINE)
_TYPED_RUN = re.compile(r"^/(?:run|test)\s+(.+)")
_SUMMARY_LINE = re.compile(
    r"\b(?:\d+ (?:passed|failed|tests?|errors?|warnings?)|passed|succeeded|success|Tests?:|OK|Finished|Compiled"
    r"|Built)\b|^# (?:pass|fail) \d+",
    re.IGNORECASE,
)
_TEST_RUN = re.compile(
    r"^(?:pytest|py\.test|tox|nox|jest|vitest|mocha|ava|rspec|phpunit|ctest|\S*run_tests\S*"
    r"|python3? -m (?:pytest|unittest)|(?:npm|pnpm|yarn|bun)(?: run)? test|cargo test|go test|make (?:test|check)"
    r"|npm run check|dotnet test|mvn test|gradle test)\b"
)
_READ_ONLY = frozenset(
    "cat head tail less more nl grep egrep rg ag find fd ls tree wc diff awk pwd echo which file stat "
    "du type sort uniq cut jq".split()
)
_GIT_READ = frozenset("status log diff show blame branch remote rev-parse ls-files grep".split())
_DELETES = frozenset({"rm", "unlink", "rmdir"})
_CREATES = frozenset({"touch", "mkdir"})
_RUNS = frozenset(
    "python python3 node bash sh zsh ruby deno bun tsx ts-node perl php pytest jest vitest mocha npx".split()
)
_STATUS = {"completed": "done", "in_progress": "in progress", "pending": ""}
_MARKER = re.compile(
    r"^\[(?:(user|assistant)(?: called tool (\S+) \(id ([^)]*)\))?(?: thinking)?|tool (result|error) for (\S+))\]\s?"
)


def message_range(text: str) -> tuple[int, int] | None:
    """Return the first and last message a summary request names ("messages 3–9"), or ``None``."""
    match = _RANGE.search(text)
    if not match:
        return None
    start = int(match.group(1))
    return start, int(match.group(2)) if match.group(2) else start


def _text(block: Block) -> str:
    text = block.get("text", "")
    if not isinstance(text, str):
        return ""
    return _DATA_URI.sub("[image data]", text) if ";base64," in text else text


def _result_text(block: Block) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(b) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _scanned(text: str) -> str:
    if len(text) <= 2 * _SCAN_CHARS:
        return text
    return text[:_SCAN_CHARS] + "\n" + text[-_SCAN_CHARS:]


def _decoded_input(block: Block) -> dict[str, Any]:
    value = block.get("input", {})
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON, or nested past Python's recursion limit
            return {"input": value}
    return value if isinstance(value, dict) else {"input": value}



def _names(text: str) -> Iterator[str]:
    return (name for name in identifiers(text) if len(name) <= MAX_NAME_CHARS)


def _short_paths(line: str) -> str:
    """Return ``line`` with each long path cut to its last three parts (``…/litellm/utils.py``)."""
    return _LONG_PATH.sub(lambda m: "…/" + "/".join(m.group(0).split("/")[-3:]), line)


def _error_line(fragment: str) -> str:
    """Return an error's entry: its error line, then the fragment's other lines (what the error says).

    The error line (or, for an exit code, the line naming it) comes first, cut to
    :data:`ERROR_LINE_CHARS`; the fragment's other lines follow after ``⟩`` markers, their
    rule lines (``=====``, ``____``) left out, the whole cut to :data:`ERROR_ENTRY_CHARS`: a
    compiler's "Types of parameters … are incompatible", a test's ``FAILED`` name and a
    traceback's frames sit in those lines.
    """
    lines = [line.strip() for line in fragment.splitlines() if line.strip()]
    if not lines:
        return ""
    at = next((i for i, line in enumerate(lines) if ERROR_LINE.search(line)), len(lines) - 1)
    head = clip(lines[at], ERROR_LINE_CHARS)
    seen = set(_CONTEXT_WORD.findall(lines[at].lower()))
    context: list[str] = []
    for n, line in enumerate(lines):
        line_words = set(_CONTEXT_WORD.findall(line.lower()))
        if n == at or not line_words - seen or _RETRYING.match(line):
            continue  # the error line, a line saying nothing new, a retry notice
        seen |= line_words
        context.append(_short_paths(_RULE.sub(" ", line)).strip())
    if not context:
        return head.replace("`", "'")
    return clip(" ⟩ ".join([head, *context]), ERROR_ENTRY_CHARS).replace("`", "'")


def _first_sentence(text: str, words: int) -> str:
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s", text)
    return clip_words(text[: match.start()] if match and match.start() > 20 else text, words)


class _Call:
    """One tool call: its action, subject, shown form and the files it touches."""

    __slots__ = ("verb", "subject", "shown", "files", "reads", "command", "read_only", "plan")

    def __init__(self, name: str, tool_input: dict[str, Any]) -> None:
        self.plan = bool(PLAN_TOOL.search(name)) and not any(k in tool_input for k in COMMAND_KEYS)
        path = next((tool_input[k] for k in PATH_KEYS if isinstance(tool_input.get(k), str)), None)
        raw_command = next((tool_input[k] for k in COMMAND_KEYS if k in tool_input), None)
        if isinstance(raw_command, list):
            raw_command = " ".join(str(part) for part in raw_command)
        command = raw_command if isinstance(raw_command, str) else ""
        sub = command if command.isidentifier() else ""
        lname = name.lower()
        self.files: list[tuple[str, str]] = []
        self.command = ""
        self.read_only = False
        if path is not None and (sub or not command):
            self.verb = _path_verb(lname, sub)
            self.subject = path.strip().replace("`", "'")
            self.files.append((self.subject, self.verb))
        elif command:
            self.command = command
            self.verb, self.subject = "run", _last_part(command)
            self.read_only = _read_only(self.subject)
            self.files.extend(_command_files(command))
        else:
            self.verb = "call"
            argument = next((v for v in tool_input.values() if isinstance(v, str) and v.strip()), "")
            self.subject = clip(f"{name} {argument}".strip(), 80).replace("`", "'")
        for value in tool_input.values():
            if isinstance(value, str) and ("*** Begin Patch" in value or "\n+++ " in value):
                self.files.extend(_patch_files(value))
        self.reads = lname in READ_TOOLS or sub == "view"
        self.shown = _shown_command(command) if command else ""

    @property
    def key(self) -> tuple[str, str]:
        return self.verb, command_head(self.subject) if self.verb == "run" else self.subject


def _path_verb(lname: str, sub: str) -> str:
    if lname in READ_TOOLS or sub == "view":
        return "read"
    if sub == "create" or "create" in lname:
        return "create"
    if "delete" in lname or "remove" in lname:
        return "delete"
    if lname in ("write", "write_file", "writefile", "write_to_file") or "write" in lname:
        return "write"
    if (
        "edit" in lname
        or "replace" in lname
        or "patch" in lname
        or sub in ("str_replace", "insert", "undo_edit")
    ):
        return "edit"
    return "use"


def _last_part(command: str) -> str:
    parts = [p.strip() for p in re.split(r"\s*(?:&&|\|\||;)\s+", command.split("\n", 1)[0]) if p.strip()]
    parts = [p for p in parts if not p.startswith("cd ")] or parts
    return clip(parts[-1] if parts else command, 80).replace("`", "'")


def _shown_command(command: str) -> str:
    """Return a command as a Done line shows it: its first line, ``cd`` steps left out, cut to 100 characters."""
    parts = [p.strip() for p in re.split(r"\s*&&\s+", command.split("\n", 1)[0]) if p.strip()]
    parts = [p for p in parts if not p.startswith("cd ")] or parts
    return clip(" && ".join(parts), 100).replace("`", "'")


def _read_only(part: str) -> bool:
    words = part.split()
    if not words:
        return True
    head = words[0].rsplit("/", 1)[-1]
    if head == "git":
        return len(words) > 1 and words[1] in _GIT_READ
    if head == "sed":
        return "-i" not in words and not any(w.startswith("-i") for w in words)
    return head in _READ_ONLY


def _command_files(command: str) -> Iterator[tuple[str, str]]:
    first = command.strip().split("\n", 1)[0]
    part = _last_part(first)
    words = part.split()
    head = words[0].rsplit("/", 1)[-1] if words else ""
    if "*** Begin Patch" in command or head == "apply_patch":
        return
    if head in _DELETES or (head == "git" and words[1:2] == ["rm"]):
        action = "delete"
    elif head == "sed" and any(w.startswith("-i") for w in words):
        action = "edit"
    elif head in _CREATES:
        action = "create"
    elif head in _RUNS or head.startswith("python") or (words and is_file(words[0], from_command=True)):
        action = "run"
    elif _read_only(part):
        action = "read"
    else:
        action = "use"
    for path in command_paths(first):
        yield path, action


def _patch_files(text: str) -> Iterator[tuple[str, str]]:
    for match in PATCH_HEADER.finditer(text):
        if match.group(1):
            verb = {"Add": "create", "Delete": "delete"}.get(match.group(0).split()[1], "edit")
            path = match.group(1).strip()
        else:
            verb, path = "edit", (match.group(2) or "").strip()
            if match.group(0).startswith("---"):
                continue
        if path and path != "/dev/null" and is_file(path, from_command=False):
            yield path, verb


def _plan_state(value: Any) -> list[tuple[str, str]]:
    """Return ``(status, item)`` of each entry of a todo or plan tool's input."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        text = next(
            (value[k] for k in ("content", "step", "title", "task") if isinstance(value.get(k), str)), None
        )
        if text is not None:
            status = value.get("status")
            return [(status if isinstance(status, str) else "pending", text)]
        for item in value.values():
            found.extend(_plan_state(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(_plan_state(item))
    return found


class _Reader:
    """The state of one pass (see the module docstring)."""

    def __init__(self, first_seq: int) -> None:
        self.first_seq = first_seq
        self.record = Record()
        self.calls: dict[str, _Call] = {}
        self.attempts: list[tuple[tuple[str, str], bool]] = []
        self.errors: list[tuple[int, ErrorItem]] = []  # index into attempts, error
        self.running = ""  # aider: the command of the last /run or /test line
        self.plan: list[tuple[str, str]] = []
        self.checklist: list[tuple[bool, str]] = []
        self.last_text: tuple[int, str] | None = None  # the newest assistant text, unanswered so far
        self.next_step = ""

    # -- one outcome --------------------------------------------------------------------------
    def outcome(self, seq: int, call: _Call, text: str, is_error: bool) -> None:
        fragment = error_fragment(_scanned(text), is_error, call.reads, call.command)
        self.attempts.append((call.key, fragment is None))
        if fragment is not None:
            error = ErrorItem("open", call.verb, call.subject, seq, _error_line(fragment))
            self.errors.append((len(self.attempts) - 1, error))
        elif not call.plan:
            for path, verb in call.files:
                self.record.add_file(path, ACTION_PAST[verb])
        if call.plan or call.verb in ("read", "edit", "create", "write", "delete", "use") or call.read_only:
            return
        if fragment is not None:
            code = re.search(r"exit(?:ed)?(?: with)?(?: exit)? (?:code|status)[\s:=]*(\d+)", fragment, re.I)
            result = f"failed (exit {code.group(1)})" if code else "failed"
        else:
            lines = [line for line in text.splitlines() if line.strip()]
            tail = next((line for line in reversed(lines[-5:]) if _SUMMARY_LINE.search(line)), None)
            size = f" ({len(lines):,} lines)" if len(lines) > 1 else ""
            result = f"ok{size}: {clip(tail, 70)}" if tail else f"ok{size}"
        verb = "ran" if call.verb == "run" else "called"
        self.record.add_done(f"{verb} `{call.shown or call.subject}` → {result}".replace("\n", " "))

    # -- messages -------------------------------------------------------------------------------
    def user(self, seq: int, blocks: Sequence[Block]) -> None:
        texts = [_text(b) for b in blocks if b.get("type") == "text"]
        for block in blocks:
            if block.get("type") == "tool_result":
                call = self.calls.pop(str(block.get("tool_use_id", "")), None)
                if call is not None:
                    self.outcome(seq, call, _result_text(block), bool(block.get("is_error")))
        joined = "\n".join(t for t in texts if t)
        if not joined.strip():
            return
        if _OUTPUT_LIKE.match(joined) or ERROR_LINE.match(joined):
            self.terminal_output(seq, joined)
            return
        typed = _TYPED_RUN.match(joined.strip())
        self.running = typed.group(1) if typed else ""
        added = re.match(r"^/(?:add|read-only|read)\s+(.+)", joined.strip())
        if added:
            for path in added.group(1).split():
                if is_file(path, from_command=False):
                    self.record.add_file(path, "read")
            return
        ask = ask_text(Message("user", tuple({"type": "text", "text": t} for t in texts)))
        if ask is None or (joined.startswith("[") and "summar" in joined[:80].lower()):
            return
        self.last_text = None  # an ask answers the assistant's open question
        self.record.names.update(_names(ask))
        if not self.record.goal:
            self.record.goal = clip_words(ask, GOAL_WORDS)
        self.record.asks.setdefault(seq, clip_words(ask, ASK_WORDS))

    def terminal_output(self, seq: int, text: str) -> None:
        ran = _RAN.match(text)
        command = ran.group(1) if ran else self.running
        call = _Call("bash", {"command": command}) if command else _Call("output", {})
        for path in _APPLIED.findall(text):
            self.record.add_file(path, "edited")
        for path in _ADDED.findall(text):
            self.record.add_file(path, "read")
        body = text[ran.end() :] if ran else text
        if command:
            before = len(self.record.done)
            self.outcome(seq, call, body, bool(re.search(r"command cancelled", body[-300:])))
            if ran and len(self.record.done) > before:
                self.record.done[-1] = "user " + self.record.done[-1]
        else:
            fragment = error_fragment(_scanned(body), False, False)
            if fragment is not None:
                self.errors.append(
                    (len(self.attempts), ErrorItem("open", "run", "?", seq, _error_line(fragment)))
                )
                self.attempts.append((("run", "?"), False))
        if ran:
            self.running = ""

    def assistant(self, seq: int, blocks: Sequence[Block]) -> None:
        text = "\n".join(_text(b) for b in blocks if b.get("type") == "text").strip()
        calls = False
        for block in blocks:
            if block.get("type") != "tool_use":
                continue
            calls = True
            name = str(block.get("name", ""))
            tool_input = _decoded_input(block)
            for value in iter_strings(tool_input):
                self.record.names.update(_names(value))
            call = _Call(name, tool_input)
            self.calls[str(block.get("id", ""))] = call
            if call.plan:
                state = _plan_state(tool_input)
                if state:
                    self.plan = state
        if not text:
            return
        self.record.names.update(_names(text))
        sentences = [clip_words(s, 30, 220) for s in decision_sentences(text)]
        for sentence in sentences:
            self.record.add_decision(sentence)
        self.next_step = sentences[-1] if sentences else ""  # only the newest text's plan is the next step
        items = list(checklist_items(text))
        if items:
            self.checklist = items
        self.last_text = None if calls else (seq, text)
        self.running = ""

    # -- the end --------------------------------------------------------------------------------
    def finish(self) -> Record:
        record = self.record
        for index, error in self.errors:
            later = self.attempts[index + 1 :]
            if error.key != ("run", "?") and any(key == error.key and ok for key, ok in later):
                error.status = "resolved"
            record.add_error(error)
        for call in self.calls.values():  # called, no result in this stretch
            if not (call.plan or call.read_only or call.verb == "read"):
                record.add_done(
                    f"{'ran' if call.verb == 'run' else 'called'} `{call.shown or call.subject}` → no result yet"
                )
        if self.last_text is not None:
            seq, text = self.last_text
            report = _first_sentence(text, 30)
            record.add_done(f"reported (message {seq}): {report}")
            question = next(
                (s for s in reversed(re.split(r"(?<=[.!?])\s+", " ".join(text.split()))) if s.endswith("?")),
                None,
            )
            if question:
                record.open.append(f"question to the user (message {seq}): {clip_words(question, 30)}")
        for status, item in self.plan:
            if status == "completed":
                record.add_done(f"completed: {clip_words(item, 20)}")
            else:
                label = _STATUS.get(status, status)
                record.open.append(f"todo{f' ({label})' if label else ''}: {clip_words(item, 20)}")
        for checked, item in self.checklist if not self.plan else []:
            if checked:
                record.add_done(f"completed: {clip_words(item, 20)}")
            else:
                record.open.append(f"todo: {clip_words(item, 20)}")
        if self.next_step:
            if self.next_step in record.decisions:
                record.decisions.remove(self.next_step)
            record.open.append(f"next: {self.next_step}")
        for error in record.errors:
            if error.status == "open" and error.verb == "run" and _TEST_RUN.match(error.subject):
                record.open.append(f"failing: run `{error.subject}`, message {error.seq}")
        return record


def extract(
    messages: Sequence[tuple[str, Sequence[Block]]], first_seq: int, *, one_message: bool = False
) -> Record:
    """Return the record of ``messages`` (role and blocks), the first being message ``first_seq``.

    ``one_message``: the pieces all belong to message ``first_seq`` (a split part).
    """
    reader = _Reader(first_seq)
    for index, (role, blocks) in enumerate(messages):
        seq = first_seq if one_message else first_seq + index
        if role == "assistant":
            reader.assistant(seq, blocks)
        elif role == "user":
            reader.user(seq, blocks)
    return reader.finish()


def unflatten(blocks: Sequence[Block]) -> list[tuple[str, list[Block]]]:
    """Rebuild messages from a split part's flat text pieces (see :func:`compaction.splitting.flatten`).

    A call whose JSON input was cut keeps what can be read of it (its ``path`` or
    ``command``); a piece with no marker continues the piece before it.
    """
    messages: list[tuple[str, list[Block]]] = []
    current: Block | None = None
    for block in blocks:
        if block.get("type") != "text":
            continue
        text = block.get("text", "")
        match = _MARKER.match(text)
        if match is None:
            if current is not None:
                key = (
                    "content"
                    if current["type"] == "tool_result"
                    else ("_raw" if current["type"] == "tool_use" else "text")
                )
                current[key] = current.get(key, "") + text
            continue
        role, name, call_id, status, result_id = match.groups()
        rest = text[match.end() :]
        if name is not None:
            current = {"type": "tool_use", "id": call_id, "name": name, "_raw": rest}
            messages.append(("assistant", [current]))
        elif result_id is not None:
            current = {
                "type": "tool_result",
                "tool_use_id": result_id,
                "content": rest,
                "is_error": status == "error",
            }
            messages.append(("user", [current]))
        elif text.startswith(f"[{role} thinking]"):
            current = None
        else:
            current = {"type": "text", "text": rest}
            messages.append((role or "user", [current]))
    for _role, message in messages:
        for piece in message:
            if piece["type"] == "tool_use":
                piece["input"] = _partial_json(piece.pop("_raw", ""))
    return messages


def _partial_json(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
        return value if isinstance(value, dict) else {"input": value}
    except ValueError:
        pass
    found: dict[str, Any] = {}
    for match in re.finditer(r'"(\w+)":"((?:[^"\\]|\\.)*)"', raw[:20_000]):
        if match.group(1) in PATH_KEYS or match.group(1) in COMMAND_KEYS:
            try:
                found.setdefault(match.group(1), json.loads(f'"{match.group(2)}"'))
            except ValueError:
                continue
    return found
