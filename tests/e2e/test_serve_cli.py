"""`vpod serve` as vLLM users type it: the model as a positional argument,
several served names, --tokenizer, --chat-template, --generation-config,
--max-logprobs, --log-level after `serve`, the error for a Hugging Face id,
weight-loading progress in the log, and stream_options.continuous_usage_stats
through the official openai client."""

import json
import os
import shutil
import subprocess

import httpx
import openai
import pytest

from conftest import MODEL_NAME, VPOD_BIN, Server

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "chat_template.jinja")


def serve_fails(*args, env=None):
    """Runs `vpod serve ARGS` that must fail; (code, stderr)."""
    p = subprocess.run([VPOD_BIN, "serve", *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    return p.returncode, p.stderr


def client_of(s):
    return openai.OpenAI(base_url=s.url + "/v1", api_key="x", timeout=120, max_retries=0)


def copy_model(model_dir, to):
    shutil.copytree(model_dir, to)
    return to


# ---- --load-format dummy -----------------------------------------------------

def test_load_format_dummy_serves_make_models_weights(model_dir, tmp_path):
    """A folder from `make-model --no-weights` serves with --load-format dummy
    (vLLM's flag) and answers as the written model of the same seed does;
    without the flag the error names it."""
    bare = tmp_path / "bare"
    subprocess.run([VPOD_BIN, "make-model", "--out", str(bare), "--preset", "tiny", "--seed", "1",
                    "--no-weights"], check=True, timeout=120, stdout=subprocess.DEVNULL)
    assert not (bare / "model.safetensors").exists()
    code, err = serve_fails("--model", str(bare))
    assert code != 0 and "--load-format dummy" in err, err

    def greedy(s):
        r = client_of(s).completions.create(model=MODEL_NAME, prompt="The capital of France is",
                                            max_tokens=12, temperature=0)
        return r.choices[0].text

    written = Server(model_dir, tmp_path / "written.log")
    try:
        expected = greedy(written)
    finally:
        assert written.stop() == 0, written.log()
    dummy = Server(bare, tmp_path / "dummy.log", "--load-format", "dummy", "--seed", "1")
    try:
        assert greedy(dummy) == expected
    finally:
        assert dummy.stop() == 0, dummy.log()


# ---- the model argument ------------------------------------------------------

def test_positional_model_and_several_served_names(model_dir, tmp_path):
    s = Server(model_dir, tmp_path / "serve.log",
               model_args=[str(model_dir), "--served-model-name", "first", "second"])
    try:
        c = client_of(s)
        assert [m.id for m in c.models.list().data] == ["first", "second"]
        for name in ("first", "second"):
            r = c.completions.create(model=name, prompt="Hi", max_tokens=2)
            assert r.model == "first"  # the first name is reported
            chat = c.chat.completions.create(model=name, max_tokens=2,
                                             messages=[{"role": "user", "content": "Hi"}])
            assert chat.model == "first"
        with pytest.raises(openai.NotFoundError):
            c.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2)
    finally:
        assert s.stop() == 0, s.log()


def test_positional_model_equal_to_flag_is_accepted(model_dir, tmp_path):
    s = Server(model_dir, tmp_path / "serve.log",
               model_args=[str(model_dir), "--model", str(model_dir)])
    try:
        # No served name: the folder as given, as vLLM names it.
        assert [m.id for m in client_of(s).models.list().data] == [str(model_dir)]
    finally:
        assert s.stop() == 0, s.log()


def test_model_given_twice_differently_is_an_error(model_dir, tmp_path):
    other = tmp_path / "other"
    code, err = serve_fails(str(model_dir), "--model", str(other))
    assert code == 2, err
    assert "given twice" in err and str(other) in err


def test_no_model_is_an_error():
    code, err = serve_fails("--port", "0")
    assert code == 2, err
    assert "vpod serve MODEL_DIR" in err


def test_a_hugging_face_id_gets_how_to_download_it(tmp_path):
    hub = tmp_path / "hub"
    code, err = serve_fails("meta-llama/Llama-3.2-1B-Instruct", "--device", "cpu",
                            env={"HF_HUB_CACHE": str(hub)})
    assert code == 2, err
    assert "local model folders only" in err
    assert str(hub / "models--meta-llama--Llama-3.2-1B-Instruct") in err  # where it looked
    assert ("huggingface-cli download meta-llama/Llama-3.2-1B-Instruct --local-dir "
            "models/Llama-3.2-1B-Instruct") in err


def test_a_hugging_face_id_is_found_in_the_local_cache(model_dir, tmp_path):
    """The hub library's layout: models--ORG--NAME/snapshots/REV, refs/main."""
    repo = tmp_path / "hf" / "hub" / "models--some-org--tiny"
    shutil.copytree(model_dir, repo / "snapshots" / "0123abcd")
    (repo / "snapshots" / "older").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    s = Server(model_dir, tmp_path / "serve.log", model_args=["some-org/tiny"],
               env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": ""})
    try:
        c = client_of(s)
        assert [m.id for m in c.models.list().data] == ["some-org/tiny"]
        assert c.completions.create(model="some-org/tiny", prompt="Hi", max_tokens=2).choices
    finally:
        assert s.stop() == 0, s.log()
    assert "0123abcd" in s.log()


def test_log_level_after_serve(model_dir, tmp_path):
    code, err = serve_fails(str(model_dir), "--log-level", "loud")
    assert code != 0 and "loud" in err
    # warn after `serve` wins over the `--log-level info` before it.
    s = Server(model_dir, tmp_path / "serve.log", "--log-level", "warn")
    try:
        assert httpx.get(s.url + "/health", timeout=30).status_code == 200
    finally:
        assert s.stop() == 0, s.log()
    assert "listening on" not in s.log()  # an info line


def test_weight_loading_progress_is_logged(model_dir, tmp_path):
    s = Server(model_dir, tmp_path / "serve.log")
    try:
        log = s.log()
    finally:
        assert s.stop() == 0, s.log()
    lines = [line for line in log.splitlines() if "loading weights:" in line]
    assert lines and "100%" in lines[-1], log


# ---- tokenizer and chat template ---------------------------------------------

def test_tokenizer_from_another_folder(model_dir, tmp_path):
    model = copy_model(model_dir, tmp_path / "weights")
    tok = tmp_path / "tok"
    tok.mkdir()
    for name in TOKENIZER_FILES:
        if (model / name).exists():
            shutil.move(model / name, tok / name)
    code, err = serve_fails(str(model), "--device", "cpu", "--port", "0")
    assert code != 0  # no tokenizer in the model folder alone
    s = Server(model, tmp_path / "serve.log", "--tokenizer", str(tok))
    try:
        r = httpx.post(s.url + "/tokenize", json={"prompt": "hello world"}, timeout=30)
        assert r.status_code == 200 and r.json()["count"] > 0
        chat = client_of(s).chat.completions.create(
            model=MODEL_NAME, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
        assert chat.choices[0].finish_reason in ("stop", "length")
    finally:
        assert s.stop() == 0, s.log()


INLINE_TEMPLATE = "[inline]{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"


def tokenized(url, **body):
    r = httpx.post(url + "/tokenize", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


@pytest.mark.parametrize("as_file", [False, True])
def test_chat_template_inline_or_file(model_dir, tmp_path, as_file):
    value = INLINE_TEMPLATE
    if as_file:
        (tmp_path / "t.jinja").write_text(INLINE_TEMPLATE)
        value = str(tmp_path / "t.jinja")
    s = Server(model_dir, tmp_path / "serve.log", "--chat-template", value)
    try:
        messages = [{"role": "user", "content": "Hi"}]
        assert (tokenized(s.url, messages=messages)
                == tokenized(s.url, prompt="[inline]<user>Hi", add_special_tokens=False))
    finally:
        assert s.stop() == 0, s.log()


def test_chat_template_path_that_does_not_exist(model_dir, tmp_path):
    missing = str(tmp_path / "missing.jinja")
    code, err = serve_fails(str(model_dir), "--device", "cpu", "--port", "0",
                            "--chat-template", missing)
    assert code != 0
    assert "missing.jinja" in err and "no such file" in err


# ---- sampling defaults and limits --------------------------------------------

def greedy_model(model_dir, tmp_path):
    """The tiny model with a generation_config.json that asks for greedy decoding."""
    model = copy_model(model_dir, tmp_path / "greedy")
    path = model / "generation_config.json"
    config = json.loads(path.read_text())
    config.update({"do_sample": False, "temperature": 0.0})
    path.write_text(json.dumps(config))
    return model


def texts(c, seeds, **kwargs):
    return [c.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=12,
                                 seed=seed, extra_body={"ignore_eos": True}, **kwargs)
            .choices[0].text for seed in seeds]


def test_generation_config_defaults_apply_unless_the_request_sets_them(model_dir, tmp_path):
    model = greedy_model(model_dir, tmp_path)
    s = Server(model, tmp_path / "auto.log")  # --generation-config auto (the default)
    try:
        c = client_of(s)
        greedy = texts(c, [0], temperature=0)[0]
        assert texts(c, [1, 2]) == [greedy, greedy]  # the file's temperature 0
        sampled = texts(c, [1, 2], temperature=1.0)  # the request's wins
        assert sampled[0] != sampled[1] and greedy not in sampled
    finally:
        assert s.stop() == 0, s.log()
    assert "temperature=0" in s.log()  # the defaults taken are logged

    s = Server(model, tmp_path / "vllm.log", "--generation-config", "vllm")
    try:
        c = client_of(s)
        assert texts(c, [1, 2]) == sampled  # the engine's temperature 1
    finally:
        assert s.stop() == 0, s.log()

    # A folder: the file there, over the model's own.
    s = Server(model_dir, tmp_path / "folder.log", "--generation-config", str(model))
    try:
        assert texts(client_of(s), [1, 2]) == [greedy, greedy]
    finally:
        assert s.stop() == 0, s.log()


def test_max_logprobs(model_dir, tmp_path):
    s = Server(model_dir, tmp_path / "serve.log", "--max-logprobs", "2")
    try:
        c = client_of(s)
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, logprobs=3)
        assert "between 0 and 2" in e.value.body["message"], e.value.body
        assert e.value.body["param"] == "logprobs"
        with pytest.raises(openai.BadRequestError) as e:
            c.chat.completions.create(model=MODEL_NAME, max_tokens=2, logprobs=True,
                                      top_logprobs=3,
                                      messages=[{"role": "user", "content": "Hi"}])
        assert e.value.body["param"] == "top_logprobs"
        r = c.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=2, logprobs=2)
        assert len(r.choices[0].logprobs.top_logprobs[0]) >= 2
    finally:
        assert s.stop() == 0, s.log()


# ---- continuous usage ----------------------------------------------------------

@pytest.fixture(scope="module")
def shared(model_dir, tmp_path_factory):
    s = Server(model_dir, tmp_path_factory.mktemp("shared") / "serve.log")
    yield s
    assert s.stop() == 0, s.log()


def check_continuous_usage(chunks, prompt_tokens, max_tokens):
    with_choices = [ch for ch in chunks if ch.choices]
    assert with_choices
    generated = []
    for ch in with_choices:
        u = ch.usage
        assert u is not None, ch
        assert u.prompt_tokens == prompt_tokens
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens
        generated.append(u.completion_tokens)
    assert generated == sorted(generated) and generated[-1] == max_tokens
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == max_tokens


def test_continuous_usage_stats_completions(shared):
    c = client_of(shared)
    prompt_tokens = len(tokenized(shared.url, prompt="Count with me"))
    chunks = list(c.completions.create(
        model=MODEL_NAME, prompt="Count with me", max_tokens=10, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    check_continuous_usage(chunks, prompt_tokens, 10)


def test_continuous_usage_stats_chat(shared):
    c = client_of(shared)
    messages = [{"role": "user", "content": "Count with me"}]
    prompt_tokens = len(tokenized(shared.url, messages=messages))
    chunks = list(c.chat.completions.create(
        model=MODEL_NAME, messages=messages, max_tokens=10, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        extra_body={"ignore_eos": True}))
    check_continuous_usage(chunks, prompt_tokens, 10)


def test_without_continuous_usage_only_the_last_chunk_has_usage(shared):
    chunks = list(client_of(shared).completions.create(
        model=MODEL_NAME, prompt="Count with me", max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert all(ch.usage is None for ch in chunks[:-1])
    assert chunks[-1].usage.completion_tokens == 5
