"""What the estimator's weight tables are and how well they fit (generated; do not edit).

Written by ``scripts/fit_estimator.py`` with the tables ``compaction/tokens/data/estimator-*.i32.gz``.
``TABLE_SHA256`` is the sha256 of each un-gzipped table; ``HELD_OUT_MAPE`` is the mean absolute
percentage error of the estimate against tiktoken on the held-out pieces of each corpus;
``AGENT_FILE_MAPE`` the same on each agent transcript when the tables are fitted without it.
"""

FORMAT = 'pairs-161-i32le-q16'

TABLE_SHA256: dict[str, str] = {
    "o200k_base": "41741bf999a935776a8ffcee5564a19037369883cbc736f8c028b664a14db813",
    "cl100k_base": "9f2414ca9236bc657389e848cb1152624b7acf83656b9bd538c2ace4398093a8",
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent": 1.93,
        "prose": 2.28,
        "code": 3.35,
        "json": 2.03,
        "cjk": 4.77,
        "base64": 1.74,
        "mixed": 5.63,
        "edge": 12.77,
    },
    "cl100k_base": {
        "agent": 2.05,
        "prose": 2.42,
        "code": 3.55,
        "json": 2.06,
        "cjk": 5.56,
        "base64": 1.79,
        "mixed": 6.70,
        "edge": 12.42,
    },
}

AGENT_FILE_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent-tars__browser__event-stream-with-many-images.json": 3.43,
        "aider__chat-history__slice.md": 4.53,
        "claude-code-log__edge_cases.jsonl": 4.13,
        "claude-code-log__representative_messages.jsonl": 2.68,
        "claude-code-log__session_b.jsonl": 1.37,
        "claude-code-log__todowrite_examples.jsonl": 3.06,
        "claude-code-transcripts__sample_session.jsonl": 1.59,
        "claude-code-log__codex-rollout.jsonl": 5.63,
        "openhands__multi-swe-bench__output.jsonl": 6.64,
        "pi__pi-mono__before-compaction.jsonl": 7.22,
        "swe-agent__marshmallow-1867__function-calling.traj": 4.27,
    },
    "cl100k_base": {
        "agent-tars__browser__event-stream-with-many-images.json": 3.70,
        "aider__chat-history__slice.md": 5.21,
        "claude-code-log__edge_cases.jsonl": 4.34,
        "claude-code-log__representative_messages.jsonl": 1.55,
        "claude-code-log__session_b.jsonl": 1.36,
        "claude-code-log__todowrite_examples.jsonl": 2.70,
        "claude-code-transcripts__sample_session.jsonl": 1.58,
        "claude-code-log__codex-rollout.jsonl": 5.78,
        "openhands__multi-swe-bench__output.jsonl": 6.57,
        "pi__pi-mono__before-compaction.jsonl": 7.38,
        "swe-agent__marshmallow-1867__function-calling.traj": 3.47,
    },
}
