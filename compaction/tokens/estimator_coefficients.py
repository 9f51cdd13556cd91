"""Coefficients of the token estimator, one vector per encoding (generated; do not edit).

Written by ``scripts/fit_estimator.py``; ``HELD_OUT_MAPE`` is the mean absolute percentage
error of the estimate against tiktoken on the held-out pieces of each corpus.
"""

FEATURE_NAMES: tuple[str, ...] = (
    "digit_tokens",
    "lower",
    "upper",
    "word_starts",
    "lower_to_upper",
    "upper_to_lower",
    "upper_to_upper",
    "letter_digit_switches",
    "spaces",
    "space_to_space",
    "loose_spaces",
    "newlines",
    "newline_runs",
    "indents",
    "punct_to_newline",
    "blanks",
    "punct",
    "punct_runs",
    "punct_to_letter",
    "space_to_punct",
    "digit_punct_switches",
    "latin",
    "symbols",
    "han",
    "kana",
    "hangul",
    "cjk_runs",
    "cjk_punct",
    "other",
    "astral",
)

COEFFICIENTS: dict[str, tuple[float, ...]] = {
    "o200k_base": (
        1.0,  # digit_tokens
        0.04245742724536269,  # lower
        0.36302663830056625,  # upper
        0.6970992071414307,  # word_starts
        1.5540712846481328,  # lower_to_upper
        -0.5659224723492504,  # upper_to_lower
        -0.17660792985809065,  # upper_to_upper
        0.42552542455341447,  # letter_digit_switches
        0.1769689851695516,  # spaces
        -0.12006538355915809,  # space_to_space
        0.7493687463562483,  # loose_spaces
        0.041285853886131395,  # newlines
        0.9328205820675266,  # newline_runs
        0.4408898219303119,  # indents
        -0.7425962006243475,  # punct_to_newline
        0.013061688773967925,  # blanks
        0.07443508802239053,  # punct
        0.5023739597156996,  # punct_runs
        0.08045963951426657,  # punct_to_letter
        0.368052347633699,  # space_to_punct
        0.407907787997431,  # digit_punct_switches
        0.11361310307288568,  # latin
        -3.3733288424242565,  # symbols
        0.6599465609295847,  # han
        0.5605205392970979,  # kana
        0.207176982672368,  # hangul
        1.2805126523632937,  # cjk_runs
        -1.4108940329157051,  # cjk_punct
        0.5119290879827886,  # other
        -5.275057770818307,  # astral
    ),
    "cl100k_base": (
        1.0,  # digit_tokens
        0.03378410438647855,  # lower
        0.3376341197405609,  # upper
        0.734242828780127,  # word_starts
        1.7346296885723962,  # lower_to_upper
        -0.6063075826725163,  # upper_to_lower
        -0.1498012442556359,  # upper_to_upper
        0.46896884340825556,  # letter_digit_switches
        0.20988359894826294,  # spaces
        -0.15689570600944264,  # space_to_space
        0.7769367940322311,  # loose_spaces
        0.08949976777784092,  # newlines
        0.8460889567748302,  # newline_runs
        0.41314519951372464,  # indents
        -0.726004687532292,  # punct_to_newline
        -0.014849544023874292,  # blanks
        0.07518192730024414,  # punct
        0.4487503630455278,  # punct_runs
        0.11731619295598747,  # punct_to_letter
        0.368064128176932,  # space_to_punct
        0.440095363935683,  # digit_punct_switches
        2.649861461114093,  # latin
        0.05890821285132949,  # symbols
        0.8714414278721884,  # han
        0.8513041012934441,  # kana
        0.4001733745679002,  # hangul
        1.8240196942500835,  # cjk_runs
        -1.8774454412231765,  # cjk_punct
        0.6568447076880448,  # other
        -21.519846335830284,  # astral
    ),
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {"agent": 4.84, "prose": 4.06, "code": 5.04, "json": 3.51, "cjk": 5.47, "base64": 3.94},
    "cl100k_base": {"agent": 5.14, "prose": 3.53, "code": 5.52, "json": 3.75, "cjk": 5.87, "base64": 4.37},
}
