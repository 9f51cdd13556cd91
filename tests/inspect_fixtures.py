"""A hostile agent history for the inspector's tests: markup, control characters, huge texts, images."""

from __future__ import annotations

from pathlib import Path

from strategies import png_b64

from compaction import Message, Recipe, Store, compress_and_compile
from compaction.compile import CompiledRequest

#: Texts that would break a page rendered without escaping.
HOSTILE = (
    "<script>document.title='owned'</script>",
    "</style><style>body{display:none}</style>",
    '"><img src=x onerror=alert(1)>',
    "</pre></details></section><h1>FAKE HEADING</h1>",
    "bell\x07 nul\x00 esc\x1b[31m del\x7f c1\x85",
)

#: A text longer than the inspector keeps (it is cut with a marker).
HUGE = "HUGE-" + "x" * 60_000 + "-END"


def hostile_history(rounds: int = 14) -> list[Message]:
    """Return an agent history whose asks, calls, outputs and images carry hostile text."""
    messages = [Message("system", ({"type": "text", "text": "You are a coding agent. " + HOSTILE[1]},))]
    messages.append(Message("user", ({"type": "text", "text": f"Fix the build {HOSTILE[0]} please"},)))
    messages.append(Message("assistant", ({"type": "text", "text": "Reading the log first."},)))
    messages.append(Message("user", ({"type": "text", "text": HUGE},)))
    for index in range(rounds):
        call = f"call_{index}"
        messages.append(
            Message(
                "assistant",
                (
                    {"type": "text", "text": f"Round {index}: {HOSTILE[index % len(HOSTILE)]}"},
                    {"type": "tool_use", "id": call, "name": "Bash", "input": {"command": f"make test_{index} {HOSTILE[2]}"}},
                ),
            )
        )
        output = "\n".join(f"line {k} of round {index} {HOSTILE[(index + k) % len(HOSTILE)]}" for k in range(80))
        content: list[dict[str, object]] = [{"type": "text", "text": output}]
        if index % 4 == 1:
            image = {"type": "base64", "media_type": "image/png", "data": png_b64(64 + index, 48, seed=index)}
            content.append({"type": "image", "source": image})
        messages.append(Message("user", ({"type": "tool_result", "tool_use_id": call, "content": content},)))
        if index % 5 == 2:
            messages.append(Message("user", ({"type": "text", "text": f"Ask {index}: {HOSTILE[3]} and {HOSTILE[4]}"},)))
            messages.append(Message("assistant", ({"type": "text", "text": "On it."},)))
    messages.append(Message("assistant", ({"type": "text", "text": f"Done. {HOSTILE[3]}"},)))
    return messages


def hostile_store(path: str | Path, budget: int = 6000, **settings: object) -> tuple[Store, Recipe, CompiledRequest]:
    """Return an open store of :func:`hostile_history` compressed for ``budget``, its recipe and request."""
    store = Store(path)
    store.append(hostile_history())
    recipe = Recipe(budget_tokens=budget, chunk_target_tokens=1500, mask_keep_rounds=2, **settings)  # type: ignore[arg-type]
    compiled, _reports = compress_and_compile(store, recipe)
    return store, recipe, compiled
