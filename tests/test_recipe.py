"""The strict recipe loader: the happy path and every kind of error, with its exact text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.errors import CompactionError, RecipeError
from compaction.recipe import Recipe, SummarizerSettings, load_recipe, recipe_from_mapping

FULL = """\
encoding = "cl100k_base"
model = "claude-sonnet-4-5"
budget_tokens = 120000
vision = true
image_policy = "live"
max_live_images = 8
image_strip_depth_tokens = 50000
max_live_image_bytes = 20_000_000
max_compression_image_bytes = 5_000_000
max_compression_images = 4
assumed_url_image_bytes = 2_000_000
chunk_target_tokens = 6000
chunk_min_messages = 3
merge_fanout = 5
summary_max_tokens = 500
summarizer_context_tokens = 32000
output_format = "anthropic"

[summarizer]
kind = "openai"
base_url = "http://localhost:11434/v1"
model = "qwen2.5:7b"
api_key_env = "OLLAMA_API_KEY"
timeout_seconds = 30
max_output_tokens = 600
max_retries = 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


# --- happy path ---------------------------------------------------------------------------


def test_full_recipe_loads(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, FULL))
    assert recipe == Recipe(
        encoding="cl100k_base",
        model="claude-sonnet-4-5",
        budget_tokens=120000,
        vision=True,
        max_live_images=8,
        image_strip_depth_tokens=50000,
        max_live_image_bytes=20_000_000,
        max_compression_image_bytes=5_000_000,
        max_compression_images=4,
        assumed_url_image_bytes=2_000_000,
        chunk_target_tokens=6000,
        chunk_min_messages=3,
        merge_fanout=5,
        summary_max_tokens=500,
        summarizer_context_tokens=32000,
        output_format="anthropic",
        summarizer=SummarizerSettings(
            kind="openai",
            base_url="http://localhost:11434/v1",
            model="qwen2.5:7b",
            api_key_env="OLLAMA_API_KEY",
            timeout_seconds=30,
            max_output_tokens=600,
            max_retries=5,
        ),
    )
    assert recipe.image_policy == "live"
    assert recipe.source == str(tmp_path / "recipe.toml")


def test_empty_recipe_takes_the_defaults(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, "# nothing set\n"))
    assert recipe == Recipe()
    assert (recipe.encoding, recipe.model, recipe.target_model, recipe.budget_tokens, recipe.vision) == (
        "o200k_base",
        None,
        "gpt-4o",
        None,
        True,
    )
    assert recipe.image_policy == "live"
    assert recipe.max_live_images is None and recipe.max_compression_images is None
    assert recipe.assumed_url_image_bytes == 1_000_000
    assert (recipe.chunk_target_tokens, recipe.chunk_min_messages, recipe.merge_fanout) == (4000, 4, 6)
    assert (recipe.summary_max_tokens, recipe.summarizer_context_tokens) == (400, 8000)
    assert recipe.output_format == "openai"
    assert recipe.summarizer == SummarizerSettings(kind="extractive")


def test_vision_false_means_placeholders() -> None:
    assert recipe_from_mapping({"vision": False}).image_policy == "placeholders"
    assert recipe_from_mapping({"image_policy": "placeholders"}).vision is False
    assert (
        recipe_from_mapping({"image_policy": "placeholders", "vision": False}).image_policy == "placeholders"
    )
    assert recipe_from_mapping({"image_policy": "live", "vision": True}).vision is True
    assert recipe_from_mapping({"max_live_images": 0}).max_live_images == 0


def test_to_dict_round_trips(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, FULL))
    assert recipe_from_mapping(recipe.to_dict()) == recipe
    assert recipe_from_mapping(Recipe().to_dict()) == Recipe()
    assert "source" not in recipe.to_dict() and "image_policy" not in recipe.to_dict()


# --- unknown keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("vison = false\n", "recipe.toml: key 'vison': unknown; did you mean 'vision'?"),
        ("budget = 1000\n", "key 'budget': unknown; did you mean 'budget_tokens'?"),
        ("max_live_image = 3\n", "key 'max_live_image': unknown; did you mean 'max_live_images'?"),
        (
            "[summarizer]\nkidn = 'openai'\n",
            "key 'summarizer.kidn': unknown; did you mean 'summarizer.kind'?",
        ),
        (
            "[summarizer]\napi_key = 'OPENAI'\n",
            "key 'summarizer.api_key': unknown; did you mean 'summarizer.api_key_env'?",
        ),
        ("zzz = 1\n", "key 'zzz': unknown; valid keys are ask_cap_tokens, ask_ledger, assistant_prefill, assumed_url_image_bytes"),
    ],
)
def test_unknown_key_suggests_the_nearest(tmp_path: Path, text: str, fragment: str) -> None:
    assert fragment in load_error(tmp_path, text)


def test_unknown_key_named_like_a_secret_explains_api_key_env(tmp_path: Path) -> None:
    message = load_error(tmp_path, "[summarizer]\napi_key = 'OPENAI'\n")
    assert "set api_key_env to the NAME of the environment variable" in message


# --- wrong types ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('vision = "no"\n', "key 'vision': expected a boolean (true or false), found string 'no'"),
        ("vision = 0\n", "key 'vision': expected a boolean (true or false), found integer 0"),
        ("vision = 1\n", "key 'vision': expected a boolean (true or false), found integer 1"),
        ('vision = "false"\n', "found string 'false'"),
        (
            "budget_tokens = true\n",
            "key 'budget_tokens': expected an integer >= 1 (or leave it out for no limit), "
            "found boolean true",
        ),
        ("budget_tokens = 0\n", "key 'budget_tokens': expected an integer >= 1"),
        (
            "budget_tokens = 1000.0\n",
            "key 'budget_tokens': expected an integer >= 1 (or leave it out for no limit), "
            "found float 1000.0",
        ),
        ('budget_tokens = "1000"\n', "found string '1000'"),
        (
            "max_live_images = -1\n",
            "key 'max_live_images': expected an integer >= 0 (or leave it out for no limit), "
            "found integer -1",
        ),
        ("max_compression_images = false\n", "key 'max_compression_images': expected an integer >= 0"),
        ("image_strip_depth_tokens = 1.5\n", "key 'image_strip_depth_tokens': expected an integer >= 0"),
        (
            "max_live_image_bytes = [1]\n",
            "key 'max_live_image_bytes': expected an integer >= 0 (or leave it out for no limit), "
            "found array",
        ),
        ("max_compression_image_bytes = -5\n", "key 'max_compression_image_bytes': expected an integer >= 0"),
        (
            "assumed_url_image_bytes = 0\n",
            "key 'assumed_url_image_bytes': expected an integer >= 1, found integer 0",
        ),
        ("chunk_target_tokens = 0\n", "key 'chunk_target_tokens': expected an integer >= 1"),
        (
            "chunk_min_messages = true\n",
            "key 'chunk_min_messages': expected an integer >= 1, found boolean true",
        ),
        ("merge_fanout = 1\n", "key 'merge_fanout': expected an integer >= 2, found integer 1"),
        ("summary_max_tokens = 0\n", "key 'summary_max_tokens': expected an integer >= 1"),
        (
            "summarizer_context_tokens = '8k'\n",
            "key 'summarizer_context_tokens': expected an integer >= 1, found string '8k'",
        ),
        (
            "summary_max_tokens = 9000\n",
            "key 'summary_max_tokens': 9000 must be below summarizer_context_tokens (8000)",
        ),
        (
            'encoding = "p50k_base"\n',
            "key 'encoding': expected one of 'o200k_base', 'cl100k_base', found string 'p50k_base'",
        ),
        ('encoding = "o200k"\n', "found string 'o200k'; did you mean 'o200k_base'?"),
        ("encoding = 5\n", "key 'encoding': expected one of 'o200k_base', 'cl100k_base', found integer 5"),
        ('model = ""\n', "key 'model': expected a non-empty string, found string ''"),
        ("model = 4\n", "key 'model': expected a non-empty string, found integer 4"),
        (
            'output_format = "gemini"\n',
            "key 'output_format': expected one of 'openai', 'anthropic', 'openai-responses', found string 'gemini'",
        ),
        (
            'image_policy = "off"\n',
            "key 'image_policy': expected one of 'live', 'placeholders', found string 'off'",
        ),
        (
            "image_policy = false\n",
            "key 'image_policy': expected one of 'live', 'placeholders', found boolean false",
        ),
        (
            'summarizer = "openai"\n',
            "key 'summarizer': expected a table ([summarizer]), found string 'openai'",
        ),
        (
            "[summarizer]\nkind = 'ollama'\n",
            "key 'summarizer.kind': expected one of 'extractive', 'openai', 'anthropic', found string 'ollama'",
        ),
        (
            "[summarizer]\nkind = 'openai'\n",
            "key 'summarizer.model': required when summarizer.kind = 'openai'",
        ),
        (
            "[summarizer]\nbase_url = 'localhost:8080'\n",
            "key 'summarizer.base_url': expected an http:// or https:// URL, found string 'localhost:8080'",
        ),
        (
            "[summarizer]\ntimeout_seconds = 0\n",
            "key 'summarizer.timeout_seconds': expected a number > 0 (seconds), found integer 0",
        ),
        (
            "[summarizer]\ntimeout_seconds = true\n",
            "key 'summarizer.timeout_seconds': expected a number > 0 (seconds), found boolean true",
        ),
        (
            "[summarizer]\ntimeout_seconds = nan\n",
            "key 'summarizer.timeout_seconds': expected a number > 0 (seconds), found float nan",
        ),
        ("[summarizer]\ntimeout_seconds = '30'\n", "found string '30'"),
        (
            "[summarizer]\nmax_output_tokens = 0\n",
            "key 'summarizer.max_output_tokens': expected an integer >= 1",
        ),
        (
            "[summarizer]\nmax_retries = -1\n",
            "key 'summarizer.max_retries': expected an integer >= 0, found integer -1",
        ),
        (
            "[summarizer]\nmax_retries = 2.0\n",
            "key 'summarizer.max_retries': expected an integer >= 0, found float 2.0",
        ),
        (
            "[summarizer]\napi_key_env = 'MY-KEY'\n",
            "key 'summarizer.api_key_env': expected the name of an environment variable",
        ),
        (
            "[summarizer]\napi_key_env = 7\n",
            "key 'summarizer.api_key_env': expected a non-empty string, found integer 7",
        ),
    ],
)
def test_wrong_types_and_values_fail_at_load(tmp_path: Path, text: str, fragment: str) -> None:
    message = load_error(tmp_path, text)
    assert fragment in message, message
    assert "recipe.toml: key '" in message


def test_vision_conflicting_with_image_policy(tmp_path: Path) -> None:
    message = load_error(tmp_path, 'vision = false\nimage_policy = "live"\n')
    assert (
        "recipe.toml: key 'image_policy': 'live' conflicts with vision = false; set only one of them"
        in message
    )
    message = load_error(tmp_path, 'vision = true\nimage_policy = "placeholders"\n')
    assert "key 'image_policy': 'placeholders' conflicts with vision = true" in message
    message = load_error(tmp_path, 'vision = "yes"\nimage_policy = "placeholders"\n')
    assert "key 'vision': expected a boolean (true or false), found string 'yes'" in message


# --- secrets ------------------------------------------------------------------------------------


SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEF",
    "AKIAIOSFODNN7EXAMPLE",
    "Bearer abcdef0123456789",
    "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVcXz",
]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize(
    "where", ["[summarizer]\napi_key_env", "[summarizer]\nmodel", "model", "[summarizer]\nbase_url"]
)
def test_key_looking_values_are_refused_without_echo(tmp_path: Path, secret: str, where: str) -> None:
    message = load_error(tmp_path, f'{where} = "{secret}"\n')
    key = where.split("\n")[-1]
    prefix = "summarizer." if where.startswith("[summarizer]") else ""
    assert (
        f"recipe.toml: key '{prefix}{key}': the value looks like an API key or token (not shown)" in message
    )
    assert secret not in message and secret[4:20] not in message
    assert "set summarizer.api_key_env to that variable's name" in message


def test_secret_under_an_unknown_key_is_reported_as_a_secret(tmp_path: Path) -> None:
    message = load_error(tmp_path, f'openai_api_key = "{SECRETS[0]}"\n')
    assert "key 'openai_api_key': the value looks like an API key" in message
    assert SECRETS[0] not in message


def test_ordinary_values_are_not_mistaken_for_secrets() -> None:
    recipe = recipe_from_mapping(
        {
            "model": "claude-3-5-sonnet-20241022",
            "summarizer": {
                "kind": "openai",
                "model": "meta-llama/Llama-3.3-70B-Instruct-Turbo",
                "base_url": "https://api.together.xyz/v1",
                "api_key_env": "TOGETHER_API_KEY",
            },
        }
    )
    assert recipe.summarizer.api_key_env == "TOGETHER_API_KEY"


def test_api_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = SummarizerSettings(kind="openai", model="m", api_key_env="COMPACTION_TEST_KEY")
    monkeypatch.setenv("COMPACTION_TEST_KEY", "secret-value")
    assert settings.api_key() == "secret-value"
    monkeypatch.delenv("COMPACTION_TEST_KEY")
    with pytest.raises(RecipeError, match="environment variable COMPACTION_TEST_KEY is not set"):
        settings.api_key()
    assert SummarizerSettings().api_key() is None


# --- files and TOML -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("vision = \n", "recipe.toml: invalid TOML: Invalid value (at line 1, column 10)"),
        (
            'model = "gpt-4o"\nmodel = "x"\n',
            "recipe.toml: invalid TOML: Cannot overwrite a value (at line 2, column 12)",
        ),
        ("[summarizer\nkind = 'x'\n", "recipe.toml: invalid TOML:"),
    ],
)
def test_invalid_toml_names_file_line_and_column(tmp_path: Path, text: str, fragment: str) -> None:
    message = load_error(tmp_path, text)
    assert fragment in message
    assert "line" in message and "column" in message


def test_not_utf8_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "recipe.toml"
    path.write_bytes(b'model = "\xff"\n')
    with pytest.raises(RecipeError, match=r"recipe\.toml: invalid TOML"):
        load_recipe(path)
    missing = tmp_path / "absent.toml"
    with pytest.raises(RecipeError, match=r"absent\.toml: cannot read the recipe: No such file or directory"):
        load_recipe(missing)


def test_recipe_error_is_a_value_error_and_a_compaction_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_recipe(write(tmp_path, "vison = true\n"))
    with pytest.raises(CompactionError):
        load_recipe(write(tmp_path, "vison = true\n"))


# --- mappings and replace -----------------------------------------------------------------------


def test_mapping_source_is_named() -> None:
    with pytest.raises(RecipeError, match=r"^<mapping>: key 'vison': unknown; did you mean 'vision'\?$"):
        recipe_from_mapping({"vison": True})
    with pytest.raises(RecipeError, match=r"^cfg: key 'encoding': a value is required"):
        recipe_from_mapping({"encoding": None}, source="cfg")
    with pytest.raises(RecipeError, match=r"^<mapping>: a recipe must be a table of keys; found array"):
        recipe_from_mapping([("vision", True)])  # type: ignore[arg-type]
    assert recipe_from_mapping({"max_live_images": None}).max_live_images is None


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(RecipeError, match=r"^<defaults>: key 'vision': expected a boolean"):
        Recipe(vision="no")  # type: ignore[arg-type]
    with pytest.raises(RecipeError, match=r"key 'summarizer.max_retries'"):
        SummarizerSettings(max_retries=True)


def test_replace_revalidates() -> None:
    base = recipe_from_mapping({"budget_tokens": 8000, "max_live_images": 3})
    assert base.replace(max_live_images=None).max_live_images is None
    assert base.replace(image_policy="placeholders").image_policy == "placeholders"
    assert base.replace(vision=False).replace(image_policy="live").vision is True
    assert base.replace(summarizer={"kind": "openai", "model": "m"}).summarizer.model == "m"
    assert base.replace(summarizer=SummarizerSettings(max_retries=0)).summarizer.max_retries == 0
    assert base.replace(budget_tokens=9000).budget_tokens == 9000 and base.budget_tokens == 8000
    with pytest.raises(
        RecipeError, match=r"^<replace>: key 'vision': expected a boolean .* found string 'no'"
    ):
        base.replace(vision="no")
    with pytest.raises(
        RecipeError, match=r"^<replace>: key 'budget': unknown; did you mean 'budget_tokens'\?"
    ):
        base.replace(budget=1)
    with pytest.raises(RecipeError, match=r"'live' conflicts with vision = false"):
        base.replace(vision=False, image_policy="live")
    with pytest.raises(RecipeError, match=r"key 'summarizer.kind'"):
        base.replace(summarizer={"kind": "nope"})
    with pytest.raises(RecipeError, match=r"key 'summarizer': expected a table"):
        base.replace(summarizer="openai")


@given(
    st.dictionaries(
        st.sampled_from(["vision", "budget_tokens", "max_live_images", "merge_fanout", "encoding", "model"]),
        st.one_of(st.booleans(), st.integers(-3, 10**6), st.text(max_size=12), st.floats(allow_nan=False)),
    )
)
def test_any_mapping_either_loads_or_raises_recipe_error(data: dict[str, object]) -> None:
    try:
        recipe = recipe_from_mapping(data)
    except RecipeError as err:
        key = str(err).split("key '", 1)[1].split("'", 1)[0]
        assert key in data
    else:
        assert isinstance(recipe.vision, bool)
        assert recipe.budget_tokens is None or (
            type(recipe.budget_tokens) is int and recipe.budget_tokens > 0
        )
        assert recipe_from_mapping(recipe.to_dict()) == recipe


def test_an_override_keeps_naming_the_recipe_file(tmp_path: Path) -> None:
    """A CLI flag applied to a loaded recipe: errors still name the file (not ``<replace>``)."""
    recipe = load_recipe(write(tmp_path, "budget_tokens = 4000\n"))
    with pytest.raises(RecipeError, match=r"recipe\.toml \(with overrides\): key 'vision': expected a boolean"):
        recipe.replace(vision="no")
    assert recipe.replace(budget_tokens=100).source.endswith("recipe.toml (with overrides)")
