"""Local models: ``encoding = "hf:PATH"`` counts with a Hugging Face ``tokenizer.json``.

The tokenizers are trained here with ``tokenizers`` itself (BPE, ByteLevel pre-tokenizer, a
few KB of text), written to ``tmp_path``; one real ``tokenizer.json`` is shipped gzipped in
``tests/data/tokenizers`` (see its README for source and licence).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, histories
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from compaction import Message, OverBudget, Recipe, Store, compile_request, compress_and_compile
from compaction.cli import main
from compaction.errors import EncodingDataMissing, RecipeError
from compaction.tokens.batch import count_batch
from compaction.tokens.chat_templates import CHAT_TEMPLATES
from compaction.tokens.counting import cache_key, count_text, count_texts, message_overhead, request_overhead
from compaction.tokens.hf import TokenizerFileError, load_tokenizer

DATA = Path(__file__).parent / "data" / "tokenizers"
CORPUS = (
    "The quick brown fox jumps over the lazy dog. def compile(store, recipe): return plan\n"
    "Le vif renard brun saute par-dessus le chien paresseux. Größe, Straße, naïve café.\n"
    "Быстрая бурая лиса перепрыгивает через ленивую собаку. 敏捷的棕色狐狸跳过了懒狗。\n"
    "{'tool_use_id': 'call_1', 'content': [1, 2, 3]} ```python\nprint('hello')\n```\n"
) * 20

MARKERS = {
    "chatml": ["<|im_start|>", "<|im_end|>"],
    "llama3": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
    "mistral": ["<s>", "</s>", "[INST]", "[/INST]"],
    "none": [],
}


def train(path: Path, special: list[str], corpus: str = CORPUS, vocab: int = 700) -> Tokenizer:
    """Train a small byte-level BPE on ``corpus`` and save it as ``path`` (a tokenizer.json)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([corpus], trainer)
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Tokenizer]:
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    return f"hf:{path}", train(path, MARKERS["chatml"])


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Tokenizer]:
    path = tmp_path_factory.mktemp("real") / "tokenizer.json"
    with gzip.open(DATA / "anthropic-0.34.2-tokenizer.json.gz") as packed, path.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return f"hf:{path}", Tokenizer.from_file(str(path))


def reference(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


# -- exact counts ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_counts_equal_the_tokenizer_on_unicode(trained: tuple[str, Tokenizer], text: str) -> None:
    encoding, tok = trained
    assert count_text(text, encoding) == reference(tok, text)


@settings(max_examples=100, deadline=None)
@given(texts=st.lists(st.text(max_size=80), max_size=8))
def test_batch_and_list_counts_equal_the_tokenizer(trained: tuple[str, Tokenizer], texts: list[str]) -> None:
    encoding, tok = trained
    expected = [reference(tok, t) for t in texts]
    assert count_texts(texts, encoding) == expected
    assert count_batch(texts, encoding, "fast").tolist() == expected
    assert count_batch(texts, encoding, "exact").tolist() == expected


def test_a_long_text_is_counted_whole(trained: tuple[str, Tokenizer]) -> None:
    encoding, tok = trained
    text = CORPUS * 60  # over SEGMENT_CHARS: a local tokenizer is not cut at tiktoken's boundaries
    assert len(text) > 1 << 16
    assert count_text(text, encoding) == reference(tok, text)


def test_special_token_text_counts_as_the_server_tokenizes_it(trained: tuple[str, Tokenizer]) -> None:
    encoding, tok = trained
    text = "<|im_start|>user\nhello<|im_end|>"
    assert count_text(text, encoding) == reference(tok, text)
    assert count_text("<|im_end|>", encoding) == 1


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_real_tokenizer_counts_equal_the_tokenizer(real: tuple[str, Tokenizer], text: str) -> None:
    encoding, tok = real
    assert count_text(text, encoding) == reference(tok, text)


def test_real_tokenizer_values(real: tuple[str, Tokenizer]) -> None:
    encoding, tok = real
    loaded = load_tokenizer(encoding)
    assert loaded.sha256 == "c241737df24b4e7f7c9af4fdcee29a0ca903dcb288a8b753bc346a3092911767"
    assert loaded.template == "none" and loaded.detected
    assert (loaded.message_overhead, loaded.request_overhead) == (0, 0)
    text = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert count_text(text, encoding) == reference(tok, text) > 1000


def test_estimate_is_refused_for_a_local_tokenizer(trained: tuple[str, Tokenizer]) -> None:
    with pytest.raises(EncodingDataMissing, match="no estimator table for encoding 'hf:"):
        count_batch(["hello"], trained[0], "estimate")


# -- chat templates --------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["chatml", "llama3", "mistral", "none"])
def test_template_is_detected_and_its_framing_counted_by_the_tokenizer(tmp_path: Path, family: str) -> None:
    path = tmp_path / "tokenizer.json"
    tok = train(path, MARKERS[family], vocab=400)
    loaded = load_tokenizer(f"hf:{path}")
    assert loaded.template == family and loaded.detected
    template = CHAT_TEMPLATES[family]
    per_message = max(reference(tok, a) + reference(tok, b) for a, b in template.message.values())
    assert loaded.message_overhead == per_message
    assert loaded.request_overhead == reference(tok, template.start) + reference(tok, template.reply)
    if family == "llama3":
        # special tokens are one token each: <|begin_of_text|>, then the primer's two headers
        assert loaded.request_overhead == 1 + 2 + reference(tok, "assistant") + reference(tok, "\n\n")
    assert message_overhead(f"hf:{path}") == loaded.message_overhead
    assert request_overhead(f"hf:{path}") == loaded.request_overhead


def test_the_recipe_names_the_template(tmp_path: Path, trained: tuple[str, Tokenizer]) -> None:
    encoding, tok = trained
    recipe = Recipe(encoding=encoding, chat_template="llama3")
    assert recipe.encoding == f"{encoding}#llama3"
    assert load_tokenizer(recipe.encoding).template == "llama3"
    assert not load_tokenizer(recipe.encoding).detected
    # llama3's markers are not special tokens of this tokenizer: they are counted as the text they are
    before, after = CHAT_TEMPLATES["llama3"].message["assistant"]
    assert message_overhead(recipe.encoding) >= reference(tok, before) + reference(tok, after) > 5
    assert Recipe(encoding=encoding).replace(chat_template="none").encoding == f"{encoding}#none"
    assert Recipe(encoding=encoding, chat_template="none").to_dict()["encoding"] == f"{encoding}#none"
    again = Recipe(encoding=recipe.encoding, chat_template="llama3")
    assert again == recipe
    with pytest.raises(RecipeError, match="key 'chat_template': applies only to an hf: encoding"):
        Recipe(chat_template="chatml")
    with pytest.raises(RecipeError, match="key 'chat_template': expected one of 'llama3', 'chatml'"):
        Recipe(encoding=encoding, chat_template="vicuna")


# -- errors ----------------------------------------------------------------------------------


def test_a_missing_file_is_one_typed_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "tokenizer.json"
    with pytest.raises(TokenizerFileError, match=f"cannot read the tokenizer file {missing}"):
        count_text("hello", f"hf:{missing}")
    with pytest.raises(RecipeError, match=f"key 'encoding': .*cannot read the tokenizer file {missing}"):
        Recipe(encoding=f"hf:{missing}")
    with pytest.raises(EncodingDataMissing, match=str(missing)):
        Store(":memory:", encoding=f"hf:{missing}")


def test_an_invalid_file_is_refused(tmp_path: Path) -> None:
    for name, data in [("empty.json", b""), ("other.json", b'{"a": 1}'), ("bytes.json", b"\xff\xfe")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(TokenizerFileError, match=f"{path} is not a Hugging Face tokenizer.json"):
            load_tokenizer(f"hf:{path}")


def test_a_directory_means_its_tokenizer_json(tmp_path: Path, trained: tuple[str, Tokenizer]) -> None:
    train(tmp_path / "tokenizer.json", [])
    assert load_tokenizer(f"hf:{tmp_path}").path == str(tmp_path / "tokenizer.json")
    with pytest.raises(
        TokenizerFileError, match=f"cannot read the tokenizer file {tmp_path / 'x' / 'tokenizer.json'}"
    ):
        (tmp_path / "x").mkdir()
        load_tokenizer(f"hf:{tmp_path / 'x'}")


@pytest.mark.parametrize("name", ["hf:meta-llama/Llama-3.1-8B-Instruct", "hf:Qwen/Qwen2.5-7B-Instruct"])
def test_a_hub_id_is_refused_with_what_to_do(name: str) -> None:
    with pytest.raises(
        TokenizerFileError,
        match="looks like a Hugging Face Hub model id .* never downloads: download its tokenizer.json",
    ):
        count_text("hello", name)


def test_a_url_and_an_empty_path_are_refused() -> None:
    with pytest.raises(TokenizerFileError, match="is a URL; compaction never downloads"):
        load_tokenizer("hf:https://huggingface.co/x/y/resolve/main/tokenizer.json")
    with pytest.raises(TokenizerFileError, match="no path after 'hf:'"):
        load_tokenizer("hf:")


# -- the store's cached counts ---------------------------------------------------------------


def test_the_cache_key_is_the_file_content_not_its_path(tmp_path: Path) -> None:
    first, second, copy = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c" / "a.json"
    train(first, MARKERS["chatml"])
    train(second, MARKERS["chatml"], corpus=CORPUS.upper())
    copy.parent.mkdir()
    shutil.copy(first, copy)
    key_a, key_b, key_copy = (cache_key(f"hf:{p}") for p in (first, second, copy))
    assert key_a != key_b
    assert key_a == key_copy
    assert str(tmp_path) not in key_a
    assert key_a.startswith(f"hf:{load_tokenizer(f'hf:{first}').sha256}#chatml@")
    assert cache_key(f"hf:{first}#none") != key_a  # another template frames messages differently


def test_a_store_caches_counts_under_each_files_content_key(tmp_path: Path) -> None:
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    tok_a = train(first, [])
    tok_b = train(second, [], corpus=CORPUS.upper(), vocab=300)
    text = "Быстрая бурая лиса: the quick brown fox, 敏捷的棕色狐狸"
    db = tmp_path / "store.sqlite"
    with Store(db, encoding=f"hf:{first}") as store:
        store.append([Message("user", ({"type": "text", "text": text},))])
        facts_b = store.facts(0, encoding=f"hf:{second}")
        facts_a = store.facts(0)
        rows = dict(store._db.execute("SELECT encoding, text_tokens FROM token_counts").fetchall())
    assert facts_a[0].text_tokens == reference(tok_a, text)  # no framing: neither has a template
    assert facts_b[0].text_tokens == reference(tok_b, text)
    assert facts_a[0].text_tokens != facts_b[0].text_tokens
    assert rows == {
        cache_key(f"hf:{first}"): facts_a[0].text_tokens,
        cache_key(f"hf:{second}"): facts_b[0].text_tokens,
    }


# -- compile: within budget, plan == gate ----------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(
    messages=histories(max_turns=8),
    budget=st.integers(min_value=300, max_value=6000),
    fmt=st.sampled_from(["openai", "anthropic"]),
    template=st.sampled_from([None, "llama3", "mistral"]),
)
def test_compile_under_hf_stays_in_budget_and_plan_equals_gate(
    trained: tuple[str, Tokenizer], messages: list[Message], budget: int, fmt: str, template: str | None
) -> None:
    encoding = trained[0]
    recipe = Recipe(
        encoding=encoding,
        chat_template=template,
        budget_tokens=budget,
        output_format=fmt,  # type: ignore[arg-type]
        chunk_target_tokens=200,
        chunk_min_messages=1,
        summary_max_tokens=60,
    )
    store = Store(":memory:", encoding=recipe.encoding)
    try:
        store.append(messages)
        raw = compile_request(store, recipe.replace(budget_tokens=10_000_000))
        if all(r.kind == "image" for r in raw.request.replacements):
            assert raw.planned_tokens == raw.tokens
        try:
            compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
        except OverBudget:
            return
        assert compiled.tokens <= budget
        if all(r.kind == "image" for r in compiled.request.replacements):
            assert compiled.planned_tokens == compiled.tokens
    finally:
        store.close()


def test_a_text_request_counts_at_least_its_rendered_prompt(tmp_path: Path) -> None:
    """The reported tokens cover the prompt the chat template renders, tokenized whole."""
    path = tmp_path / "tokenizer.json"
    tok = train(path, MARKERS["chatml"])
    encoding = f"hf:{path}"
    turns = [
        ("user", "Fix the failing test in compile.py"),
        ("assistant", "I read compile.py; the budget check is off by one."),
    ]
    turns += [
        ("user", "Größe und Straße: 敏捷的棕色狐狸 " * 5),
        ("assistant", "Done.\n```python\nprint('ok')\n```"),
    ]
    store = Store(":memory:", encoding=encoding)
    try:
        store.append([Message(role, ({"type": "text", "text": text},)) for role, text in turns])
        compiled = compile_request(store, Recipe(encoding=encoding, budget_tokens=100_000))
    finally:
        store.close()
    body = json.loads(compiled.request.payload)
    prompt = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
    prompt += "<|im_start|>assistant\n"
    shipped = reference(tok, prompt)
    # each message is charged its most expensive role's framing (a tool result's, here)
    cheapest = min(
        reference(tok, a) + reference(tok, b) for a, b in CHAT_TEMPLATES["chatml"].message.values()
    )
    slack = message_overhead(encoding) - cheapest
    assert slack > 0
    assert shipped <= compiled.tokens <= shipped + len(turns) * (slack + 1)


# -- command line and import cost ------------------------------------------------------------


def test_count_command_takes_an_hf_encoding(tmp_path: Path, trained: tuple[str, Tokenizer]) -> None:
    encoding, tok = trained
    text_file = tmp_path / "a.txt"
    text_file.write_text(CORPUS, encoding="utf-8")
    result = CliRunner().invoke(main, ["count", "--encoding", encoding, "--json", str(text_file)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["total"] == reference(tok, CORPUS)
    result = CliRunner().invoke(main, ["count", "--encoding", "hf:Qwen/Qwen2.5-7B", str(text_file)])
    assert result.exit_code == 1
    assert "looks like a Hugging Face Hub model id" in result.output


def test_run_command_takes_an_hf_encoding(tmp_path: Path, trained: tuple[str, Tokenizer]) -> None:
    encoding, tok = trained
    transcript = tmp_path / "t.jsonl"
    lines = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + CORPUS[:400]}
        for i in range(30)
    ]
    transcript.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    reports = {}
    for name in (encoding, "o200k_base"):
        result = CliRunner().invoke(
            main, ["run", str(transcript), "--budget", "3000", "--encoding", name, "--json"]
        )
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(result.output[result.output.index("{") :])
    report = reports[encoding]
    # every message's text counted by the local tokenizer, framing on top
    assert report["tokens_before"] >= sum(reference(tok, line["content"]) for line in lines)
    assert report["tokens_before"] != reports["o200k_base"]["tokens_before"]
    assert 0 < report["tokens_after"] <= 3000
    result = CliRunner().invoke(
        main, ["run", str(transcript), "--budget", "3000", "--encoding", "hf:/nope.json"]
    )
    assert result.exit_code == 1
    assert "cannot read the tokenizer file /nope.json" in result.output


def test_import_and_tiktoken_counts_never_import_tokenizers() -> None:
    code = (
        "import sys, compaction; from compaction.tokens.counting import count_text;"
        "count_text('hello world'); from compaction import Recipe; Recipe();"
        "print('tokenizers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
