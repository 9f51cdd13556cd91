"""What the estimator's weight tables are and how well they fit (generated; do not edit).

Written by ``scripts/fit_estimator.py`` with the tables ``compaction/tokens/data/estimator-*.i32.gz``.
``TABLE_SHA256`` is the sha256 of each un-gzipped table; ``HELD_OUT_MAPE`` is the mean absolute
percentage error of the estimate against tiktoken on the held-out pieces of each corpus;
``AGENT_FILE_MAPE`` the same on each agent transcript when the tables are fitted without it.
"""

FORMAT = 'pairs-161-i32le-q16'

TABLE_SHA256: dict[str, str] = {
    "o200k_base": "786ccd0f8353050ac7e1401333d11f66f7125a1d881cd352bc15953bd5b7400a",
    "cl100k_base": "b0897c8b5e8b9e8a091e0dc5d0a020e4c8d6178c6b56d6a1aaedd3741a1eafc8",
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent": 2.04,
        "prose": 2.49,
        "code": 3.59,
        "json": 2.09,
        "cjk": 4.69,
        "base64": 1.83,
        "mixed": 6.12,
        "edge": 13.88,
    },
    "cl100k_base": {
        "agent": 2.09,
        "prose": 2.41,
        "code": 3.79,
        "json": 2.15,
        "cjk": 5.53,
        "base64": 2.07,
        "mixed": 6.48,
        "edge": 12.70,
    },
}

AGENT_FILE_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent-tars__browser__event-stream-with-many-images.json": 4.09,
        "aider__chat-history__slice.md": 4.21,
        "openhands__multi-swe-bench__output.jsonl": 5.83,
        "pi__pi-mono__before-compaction.jsonl": 5.55,
        "swe-agent__marshmallow-1867__function-calling.traj": 4.41,
    },
}
