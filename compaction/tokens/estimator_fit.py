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
    "repeated_spaces",
    "repeated_punct",
    "repeated_symbols",
    "repeated_letters",
)

COEFFICIENTS: dict[str, tuple[float, ...]] = {
    "o200k_base": (
        1.0,  # digit_tokens
        0.05860901521674739,  # lower
        -0.16057703981938332,  # upper
        0.5446527449201327,  # word_starts
        1.1223882719397298,  # lower_to_upper
        0.09871328289927,  # upper_to_lower
        0.603707903937163,  # upper_to_upper
        0.7252855115188285,  # letter_digit_switches
        0.2787314299979886,  # spaces
        -0.10425825327613325,  # space_to_space
        0.6175634137124265,  # loose_spaces
        0.10932564120787915,  # newlines
        1.2140335925193557,  # newline_runs
        0.42571126239239243,  # indents
        -1.0243089963430398,  # punct_to_newline
        0.15186433898981466,  # blanks
        0.3201936423218754,  # punct
        0.1978227849784124,  # punct_runs
        0.14063019117531597,  # punct_to_letter
        0.3297846888147654,  # space_to_punct
        0.34603867914117353,  # digit_punct_switches
        0.23989654019536988,  # latin
        1.1614516322807762,  # symbols
        0.6095166339429677,  # han
        0.5641780471999212,  # kana
        0.23042197572059236,  # hangul
        1.0993775777302655,  # cjk_runs
        0.3120109339930547,  # cjk_punct
        1.1353359377336936,  # other
        1.8588627936167872,  # astral
        -0.1357797832488756,  # repeated_spaces
        -0.2683814730090889,  # repeated_punct
        -1.0580450588646275,  # repeated_symbols
        -0.27501225967608345,  # repeated_letters
    ),
    "cl100k_base": (
        1.0,  # digit_tokens
        0.040298253149972686,  # lower
        -0.25211184525980945,  # upper
        0.7239383391675288,  # word_starts
        1.2323323026714315,  # lower_to_upper
        0.11254103148318774,  # upper_to_lower
        0.7076178369110073,  # upper_to_upper
        0.7834018151182518,  # letter_digit_switches
        0.20721116290978672,  # spaces
        -0.039442475851973226,  # space_to_space
        0.7559842732199362,  # loose_spaces
        0.26034248458019826,  # newlines
        0.8576676625316065,  # newline_runs
        0.44317256895449786,  # indents
        -0.9281801451015286,  # punct_to_newline
        0.1385636849766749,  # blanks
        0.2238518296800114,  # punct
        0.2717043810998271,  # punct_runs
        0.06273977577355777,  # punct_to_letter
        0.5623946562558819,  # space_to_punct
        0.3961878159944442,  # digit_punct_switches
        0.478675958262501,  # latin
        1.175521469176562,  # symbols
        0.839503930754596,  # han
        0.919522289236798,  # kana
        0.5669383724911757,  # hangul
        1.3614597427351018,  # cjk_runs
        0.5150535675968265,  # cjk_punct
        1.2423476863974756,  # other
        1.9621654176043206,  # astral
        -0.134173625507381,  # repeated_spaces
        -0.17085059915798484,  # repeated_punct
        -1.10370939724688,  # repeated_symbols
        -0.2829765226403566,  # repeated_letters
    ),
}

HELD_OUT_MAPE: dict[str, dict[str, float]] = {
    "o200k_base": {
        "agent": 4.67,
        "prose": 3.80,
        "code": 5.12,
        "json": 2.41,
        "cjk": 5.52,
        "base64": 2.46,
        "mixed": 10.67,
    },
    "cl100k_base": {
        "agent": 5.04,
        "prose": 3.70,
        "code": 5.51,
        "json": 2.62,
        "cjk": 6.14,
        "base64": 2.84,
        "mixed": 11.52,
    },
}
