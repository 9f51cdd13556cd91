"""What the estimator's weight tables are and how well they fit (generated; do not edit).

Written by ``scripts/fit_estimator.py`` with the tables ``compaction/tokens/data/estimator-*.i32.gz``.
``TABLE_SHA256`` is the sha256 of each un-gzipped table; ``HELD_OUT_MAPE`` is the mean absolute
percentage error of the estimate against tiktoken on the held-out pieces of each corpus;
``AGENT_FILE_MAPE`` the same on each agent transcript when the tables are fitted without it
(``--by-file``; measured on tables of ``AGENT_FILE_MAPE_FORMAT``, kept from an earlier fit when
a fit runs without ``--by-file``).
"""

FORMAT = 'pairs-187-i32le-q16'

TABLE_SHA256: dict[str, str] = {
    "o200k_base": "c456385617483d9cce86824453c32db48a5d4ac2aa9b8fdc31503a76ffe6fd33",
    "cl100k_base": "d766efb8010aa7532bd0b9f4f3dcf2c8c2c36d1d7a86fc12af7e47aa0439626c",
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent": 1.87,
        "prose": 2.34,
        "code": 3.38,
        "json": 1.99,
        "cjk": 3.54,
        "base64": 1.66,
        "mixed": 3.84,
        "edge": 13.68,
        "cyrillic": 5.85,
        "greek": 4.33,
        "arabic": 4.05,
        "hebrew": 3.55,
        "vietnamese": 3.27,
        "devanagari": 3.05,
        "indic_north": 4.26,
        "indic_south": 5.04,
        "thai": 4.93,
        "korean": 4.42,
        "japanese": 3.09,
        "chinese": 3.25,
        "latin_ext": 5.65,
        "georgian_armenian": 4.19,
    },
    "cl100k_base": {
        "agent": 1.90,
        "prose": 2.21,
        "code": 3.40,
        "json": 2.06,
        "cjk": 3.58,
        "base64": 1.73,
        "mixed": 4.55,
        "edge": 13.00,
        "cyrillic": 5.89,
        "greek": 1.56,
        "arabic": 3.09,
        "hebrew": 1.43,
        "vietnamese": 5.02,
        "devanagari": 2.38,
        "indic_north": 1.60,
        "indic_south": 5.87,
        "thai": 2.75,
        "korean": 4.51,
        "japanese": 4.26,
        "chinese": 4.33,
        "latin_ext": 5.86,
        "georgian_armenian": 1.49,
    },
}

AGENT_FILE_MAPE_FORMAT = 'pairs-187-i32le-q16'

AGENT_FILE_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent-tars__browser__event-stream-with-many-images.json": 3.53,
        "aider__chat-history__slice.md": 3.39,
        "openhands__multi-swe-bench__output.jsonl": 5.92,
        "pi__pi-mono__before-compaction.jsonl": 12.75,
        "swe-agent__marshmallow-1867__function-calling.traj": 4.64,
    },
}
