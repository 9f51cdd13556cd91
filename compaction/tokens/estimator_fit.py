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
    "o200k_base": "5a7888cac8c52c8da4ab789f3b48ef8dad229e0cfb9356e3415b5d74e1ee7fca",
    "cl100k_base": "1bac37ccd648c1c0e5480267b55bcae5eddfd66aa9c3fb5c23c17b8c29086470",
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent": 1.86,
        "prose": 2.38,
        "code": 3.38,
        "json": 2.00,
        "cjk": 3.52,
        "base64": 1.70,
        "mixed": 3.75,
        "edge": 13.80,
        "cyrillic": 5.95,
        "greek": 4.36,
        "arabic": 4.06,
        "hebrew": 3.78,
        "vietnamese": 3.59,
        "devanagari": 3.04,
        "indic_north": 4.43,
        "indic_south": 5.08,
        "thai": 4.95,
        "korean": 4.39,
        "japanese": 3.06,
        "chinese": 3.24,
        "latin_ext": 5.61,
        "georgian_armenian": 4.33,
    },
    "cl100k_base": {
        "agent": 1.96,
        "prose": 2.30,
        "code": 3.44,
        "json": 1.99,
        "cjk": 3.62,
        "base64": 1.66,
        "mixed": 4.56,
        "edge": 13.01,
        "cyrillic": 6.01,
        "greek": 1.52,
        "arabic": 3.08,
        "hebrew": 1.44,
        "vietnamese": 4.90,
        "devanagari": 2.40,
        "indic_north": 1.60,
        "indic_south": 5.87,
        "thai": 2.72,
        "korean": 4.48,
        "japanese": 4.37,
        "chinese": 4.34,
        "latin_ext": 5.77,
        "georgian_armenian": 1.44,
    },
}

AGENT_FILE_MAPE_FORMAT = 'pairs-161-i32le-q16'

AGENT_FILE_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent-tars__browser__event-stream-with-many-images.json": 4.09,
        "aider__chat-history__slice.md": 4.21,
        "openhands__multi-swe-bench__output.jsonl": 5.83,
        "pi__pi-mono__before-compaction.jsonl": 5.55,
        "swe-agent__marshmallow-1867__function-calling.traj": 4.41,
    },
}
