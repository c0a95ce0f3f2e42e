"""The OpenAI-compatible API (frontend/http/http_openai.c, docs/openai.md).

The acceptance client is the official `openai` npm package, unchanged (tests/openai/: pinned in
package.json, installed by `make openai-client` or by the fixture below with npm ci), driven by
tests/openai/client.mjs; the exact bytes on the wire are checked with requests. The models:
tiny_gpt (the built-in textgen generator), identity_text with openai.enabled (a C handler that
knows nothing of stop or usage: the frontend cuts at the stop sequence and cancels it), and a
Python handler that streams words with send_intermediate_predict_response and reports its usage
in response headers.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

import pytest
import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import MODEL_STORE, ROOT, _yaml_dump, start_server  # noqa: E402
from test_tiny_gpt import plain_loop, probe  # noqa: E402

NODE_DIR = os.path.join(ROOT, "tests", "openai")
PROMPT = "The keeper woke before the sun and"

PY_HANDLER = '''
from ts.protocol.otf_message_handler import send_intermediate_predict_response


def handle(data, context):
    if data is None:
        return None
    body = data[0]["body"]
    words = ["echo:"] + body["prompt"].split()
    words = words[:body.get("max_new_tokens", len(words))]
    context.set_response_header(0, "x-ts-prompt-tokens", str(len(body["prompt"].split())))
    for w in words[:-1]:
        send_intermediate_predict_response([w + " "], context.request_ids, "ok", 200, context)
    context.set_response_header(0, "x-ts-completion-tokens", str(len(words)))
    context.set_response_header(0, "x-ts-finish-reason", "length")
    return [words[-1]]
'''


# answers each word as an OIP tensor payload (common/oip_wire.h) with two outputs, the text in
# the one named "text": what a model answered over OIP tensors looks like to the API
PY_OIP_HANDLER = '''
import json
import struct

from ts.protocol.otf_message_handler import send_intermediate_predict_response


def payload(word):
    w = word.encode()
    hdr = json.dumps({"outputs": [
        {"name": "junk", "datatype": "INT32", "shape": [1], "size": 4},
        {"name": "text", "datatype": "BYTES", "shape": [1], "size": 4 + len(w)}]}).encode()
    return (b"OIP1" + struct.pack("<I", len(hdr)) + hdr + struct.pack("<i", 7) +
            struct.pack("<I", len(w)) + w)


def handle(data, context):
    if data is None:
        return None
    words = data[0]["body"]["prompt"].split()
    context.set_response_content_type(0, "application/x-ts-oip")
    for w in words[:-1]:
        send_intermediate_predict_response([payload(w + " ")], context.request_ids, "ok", 200,
                                           context)
    return [payload(words[-1])]
'''


def write_py_model(store, name, src, yaml):
    d = os.path.join(store, name)
    os.makedirs(os.path.join(d, "MAR-INF"))
    open(os.path.join(d, "handler.py"), "w").write(src)
    open(os.path.join(d, "model-config.yaml"), "w").write(yaml)
    json.dump({"runtime": "python", "model": {"modelName": name, "handler": "handler.py",
                                              "modelVersion": "1.0",
                                              "configFile": "model-config.yaml"}},
              open(os.path.join(d, "MAR-INF", "MANIFEST.json"), "w"))


RUNTIMES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtimes")


def runtime_folders(store):
    """MLServer's TextModel example (model-settings.json names it text-model) and the Inferless
    example app, each with a model-config.yaml that serves it on the API: the prompt in the
    example's input, the text from its output."""
    d = os.path.join(store, "text-model")
    shutil.copytree(os.path.join(RUNTIMES, "mlserver_text"), d)
    mf = os.path.join(d, "model-settings.json")
    st = json.load(open(mf))
    st["parameters"]["extra"] = {"delay_s": 0}
    json.dump(st, open(mf, "w"))
    open(os.path.join(d, "model-config.yaml"), "w").write(
        "openai:\n  enabled: true\n  promptInput: prompt\n  textOutput: output\n")
    d = os.path.join(store, "chat")
    shutil.copytree(os.path.join(RUNTIMES, "inferless_stream"), d)
    open(os.path.join(d, "model-config.yaml"), "w").write(
        "openai:\n  enabled: true\n  promptInput: TEXT\n  textOutput: OUT\n")


def store_with_generators(tmp):
    """tiny_gpt, identity_text served on the API (no delay), mlp (not), and the Python one."""
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    shutil.copy(os.path.join(MODEL_STORE, "tiny_gpt.mar"), store)
    shutil.copy(os.path.join(MODEL_STORE, "mlp.mar"), store)
    d = os.path.join(store, "identity_text")
    with zipfile.ZipFile(os.path.join(MODEL_STORE, "identity_text.mar")) as z:
        z.extractall(d)
    with open(os.path.join(d, "model-config.yaml"), "w") as f:
        f.write(_yaml_dump({"minWorkers": 1, "maxWorkers": 1, "batchSize": 4,
                            "openai": {"enabled": True}, "handler": {"delay_ms": 0}}) + "\n")
    mf = os.path.join(d, "MAR-INF", "MANIFEST.json")
    m = json.load(open(mf))
    m["model"]["configFile"] = "model-config.yaml"
    json.dump(m, open(mf, "w"))
    yaml = "minWorkers: 1\nmaxWorkers: 1\nbatchSize: 1\nopenai:\n  enabled: true\n"
    write_py_model(store, "pywords", PY_HANDLER, yaml)
    write_py_model(store, "pyoip", PY_OIP_HANDLER, yaml + "  textOutput: text\n")
    write_py_model(store, "pyoip_bad", PY_OIP_HANDLER, yaml + "  textOutput: nope\n")
    runtime_folders(store)
    return store


def wait_all(srv):
    srv.wait_ready("tiny_gpt", body={"json": {"prompt": "x", "max_new_tokens": 1}})
    for m in ("identity_text", "pywords", "pyoip", "pyoip_bad", "mlp", "text-model", "chat"):
        deadline = time.time() + 60
        while srv.get(f"/v2/models/{m}/ready").status_code != 200:
            assert time.time() < deadline, srv.log()[-3000:]
            time.sleep(0.2)


@pytest.fixture(scope="module")
def oa(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("oa"))
    srv = start_server(tmp, models=["tiny_gpt", "identity_text", "pywords", "pyoip", "pyoip_bad",
                                    "mlp", "text-model", "chat"],
                       store=store_with_generators(tmp))
    wait_all(srv)
    yield srv
    srv.stop()


def sse_events(r):
    """The data: payloads of an SSE reply, [DONE] included as the string."""
    out = []
    for block in r.text.split("\n\n"):
        if block.startswith("data: "):
            d = block[6:]
            out.append(d if d == "[DONE]" else json.loads(d))
    return out


def err(r, status, param=None, code=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"}
    assert e["param"] == param and e["code"] == code, e
    return e


# ---------------------------------------------------------------- the wire

def test_models_lists_the_models_served_on_the_api(oa):
    r = oa.get("/v1/models")
    assert r.status_code == 200
    ids = sorted(m["id"] for m in r.json()["data"])
    assert ids == ["chat", "identity_text", "pyoip", "pyoip_bad", "pywords", "text-model",
                   "tiny_gpt"]  # not mlp
    one = oa.get("/v1/models/tiny_gpt").json()
    assert one["object"] == "model" and one["owned_by"] == "torchserve-c"
    err(oa.get("/v1/models/nope"), 404, "model", "model_not_found")
    err(oa.get("/v1/models/mlp"), 400, "model", "model_not_supported")
    err(oa.get("/v1/nowhere"), 404, None, "unknown_url")


def test_completion_is_the_models_greedy_text_with_usage(oa):
    r = oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": PROMPT, "max_tokens": 24,
                                         "temperature": 0})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    o = r.json()
    assert o["object"] == "text_completion" and o["id"].startswith("cmpl-")
    assert o["model"] == "tiny_gpt" and isinstance(o["created"], int)
    (c,) = o["choices"]
    assert c == {"index": 0, "text": plain_loop(PROMPT, 24).decode(), "logprobs": None,
                 "finish_reason": "length"}
    assert o["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": 24,
                          "total_tokens": len(PROMPT) + 24}


def test_completion_defaults_are_openais(oa):
    """No max_tokens: 16 tokens; no temperature: 1 (sampled, so not the greedy text)."""
    o = oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": PROMPT}).json()
    assert o["usage"]["completion_tokens"] == 16
    texts = {oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": PROMPT}).json()[
        "choices"][0]["text"] for _ in range(3)}
    assert len(texts) > 1


def test_chat_renders_messages_into_one_prompt(oa):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me"},
                                         {"type": "text", "text": " of the sea"}]}]
    r = oa.post("/v1/chat/completions", json={"model": "tiny_gpt", "messages": msgs,
                                              "max_completion_tokens": 12, "temperature": 0})
    o = r.json()
    prompt = "system: Be brief.\nuser: Tell me of the sea\nassistant:"
    assert o["object"] == "chat.completion" and o["id"].startswith("chatcmpl-")
    assert o["choices"][0]["message"] == {"role": "assistant",
                                          "content": plain_loop(prompt, 12).decode()}
    assert o["usage"]["prompt_tokens"] == len(prompt)


def test_stream_chunks_then_usage_then_done(oa):
    r = oa.post("/v1/chat/completions", stream=True, json={
        "model": "tiny_gpt", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    assert r.headers["cache-control"] == "no-cache"
    ev = sse_events(r)
    assert ev[-1] == "[DONE]"
    usage, last = ev[-2], ev[-3]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"] is None
    content = ev[:-3]
    assert content[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == ev[0]["id"] for e in ev[:-1])
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in content)
    assert text == plain_loop("user: hi\nassistant:", 10).decode()
    assert len(content) == 10  # a chunk per token, as it is made


def test_stop_sequence_cuts_the_text(oa):
    full = plain_loop(PROMPT, 40).decode()
    stop = full[12:15]
    for stream in (False, True):
        r = oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": PROMPT,
                                             "max_tokens": 40, "temperature": 0,
                                             "stop": [stop, "zzz"], "stream": stream})
        if stream:
            ev = sse_events(r)
            text = "".join(e["choices"][0]["text"] for e in ev[:-1])
            finish = ev[-2]["choices"][0]["finish_reason"]
        else:
            text, finish = r.json()["choices"][0]["text"], r.json()["choices"][0]["finish_reason"]
        assert text == full[:full.index(stop)] and finish == "stop"


def test_seed_makes_sampling_repeatable(oa):
    def ask(seed):
        return oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": PROMPT,
                                                "max_tokens": 32, "temperature": 0.9,
                                                "top_p": 0.9, "seed": seed}).json()[
            "choices"][0]["text"]
    assert ask(5) == ask(5) != ask(6)


@pytest.mark.parametrize("body,param,msg", [
    ({"n": 2}, "n", "only 1 choice"),
    ({"presence_penalty": 0.5}, "presence_penalty", "not supported"),
    ({"logprobs": 2}, "logprobs", "not supported"),
    ({"echo": True}, "echo", "not supported"),
    ({"temperature": 3}, "temperature", "[0, 2]"),
    ({"top_p": 0}, "top_p", "(0, 1]"),
    ({"max_tokens": -1}, "max_tokens", ">= 0"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "up to 4"),
    ({"prompt": [1, 2, 3]}, "prompt", "token id arrays"),
    ({"prompt": ["a", "b"]}, "prompt", "one prompt"),
    ({"stream_options": {"include_usage": True}}, "stream_options", "stream is true"),
    ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
])
def test_what_we_cannot_do_is_refused_by_name(oa, body, param, msg):
    r = oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": "x", **body})
    assert msg in err(r, 400, param)["message"]


def test_other_refusals_in_openais_shape(oa):
    assert "model: required" in err(oa.post("/v1/completions", json={"prompt": "x"}), 400,
                                     "model")["message"]
    err(oa.post("/v1/chat/completions", json={"model": "tiny_gpt", "messages": []}), 400,
        "messages")
    err(oa.post("/v1/chat/completions", json={"model": "tiny_gpt", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}), 400,
        "messages")
    err(oa.post("/v1/chat/completions", json={"model": "tiny_gpt", "messages": [
        {"role": "user", "content": "x"}], "tools": [{"type": "function"}]}), 400, "tools")
    err(oa.post("/v1/completions", data="{not json"), 400)
    err(oa.post("/v1/completions", json={"model": "nope", "prompt": "x"}), 404, "model",
        "model_not_found")
    err(oa.post("/v1/completions", json={"model": "mlp", "prompt": "x"}), 400, "model",
        "model_not_supported")
    err(oa.get("/v1/completions"), 405)
    # the model's own 400, in OpenAI's shape
    e = err(oa.post("/v1/completions", json={"model": "tiny_gpt", "prompt": "x" * 600}), 400)
    assert "context holds 512" in e["message"]


def test_torchserve_vllm_urls(oa):
    """TorchServe 0.12's LLM route: /predictions/{model}/{version}/v1/...; a model not served on
    the API still gets the path as url_path, as before."""
    r = oa.post("/predictions/tiny_gpt/1.0/v1/completions", json={
        "prompt": PROMPT, "max_tokens": 8, "temperature": 0})
    assert r.json()["choices"][0]["text"] == plain_loop(PROMPT, 8).decode()
    r = oa.post("/predictions/tiny_gpt/1.0/v1/chat/completions", json={
        "model": "any name", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
        "temperature": 0})
    assert r.json()["model"] == "any name"
    assert [m["id"] for m in oa.get("/predictions/tiny_gpt/1.0/v1/models").json()["data"]] == [
        "tiny_gpt"]
    # the mlp's torchscript handler answers, in TorchServe's error shape
    r = oa.post("/predictions/mlp/1.0/v1/completions", json={"prompt": "x"})
    assert r.status_code == 400 and set(r.json()) == {"code", "type", "message"}, r.text


def test_any_text_generator(oa):
    """A C handler that knows nothing of stop or usage, and a Python handler that reports its
    usage: both stream through the API."""
    r = oa.post("/v1/completions", json={"model": "identity_text", "prompt": "one two three four",
                                         "stream": True, "stop": "thr"})
    ev = sse_events(r)
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == "one two "
    assert ev[-2]["choices"][0]["finish_reason"] == "stop"
    o = oa.post("/v1/completions", json={"model": "identity_text", "prompt": "a b c"}).json()
    assert o["choices"][0]["text"] == "a b c" and o["usage"] is None
    o = oa.post("/v1/chat/completions", json={"model": "pywords", "max_tokens": 3, "messages": [
        {"role": "user", "content": "red green blue"}]}).json()
    assert o["choices"][0]["message"]["content"] == "echo: user: red"
    assert o["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert o["choices"][0]["finish_reason"] == "length"


def test_text_from_a_named_oip_output(oa):
    """A model answering OIP tensors: the text is its openai.textOutput output; one that does
    not answer the output it declares is a 500 naming it, in OpenAI's shape."""
    r = oa.post("/v1/completions", json={"model": "pyoip", "prompt": "sun and sea", "stream": True})
    ev = sse_events(r)
    assert "".join(e["choices"][0]["text"] for e in ev[:-1]) == "sun and sea"
    o = oa.post("/v1/completions", json={"model": "pyoip", "prompt": "sun and sea"}).json()
    assert o["choices"][0]["text"] == "sun and sea"
    e = err(oa.post("/v1/completions", json={"model": "pyoip_bad", "prompt": "sun and sea"}), 500)
    assert e["type"] == "server_error" and "output named nope" in e["message"]
    r = oa.post("/v1/completions", json={"model": "pyoip_bad", "prompt": "sun", "stream": True})
    err(r, 500)  # the first frame: before the stream starts
    r = oa.post("/v1/completions", json={"model": "pyoip_bad", "prompt": "a b", "stream": True})
    err(r, 500)
    # the worker goes on serving
    assert oa.post("/v1/completions", json={"model": "pyoip", "prompt": "x"}).status_code == 200


def test_mlserver_runtime_and_inferless_app(oa):
    """MLServer's TextModel example and the Inferless example app, unchanged, served on the
    API by their model-config.yaml: a stream comes from predict_stream / the app's events, one
    chunk per word; a call that does not stream gets the runtime's predict."""
    q = "What is the capital of France?"
    r = oa.post("/v1/completions", json={"model": "text-model", "prompt": q, "stream": True})
    ev = sse_events(r)
    chunks = [e["choices"][0]["text"] for e in ev[:-2]]
    assert chunks == ["What", " is", " the", " capital", " of", " France?"]
    assert ev[-2]["choices"][0]["finish_reason"] == "stop" and ev[-1] == "[DONE]"
    o = oa.post("/v1/completions", json={"model": "text-model", "prompt": q}).json()
    assert o["choices"][0]["text"] == q.upper() and o["usage"] is None
    r = oa.post("/v1/chat/completions", json={"model": "chat", "stream": True, "messages": [
        {"role": "user", "content": "boil the eggs"}]})
    ev = sse_events(r)
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev[:-2])
    assert "eggs" in text and "boil" in text, text


@pytest.mark.smoke
def test_token_authorization_as_on_predictions(server_factory):
    srv = server_factory(models=["tiny_gpt"], config={"disable_token_authorization": "false"})
    key = json.load(open(os.path.join(srv.tmp, "key_file.json")))["inference"]["key"]
    body = {"model": "tiny_gpt", "prompt": "x", "max_tokens": 2}
    # refused from the head (a body follows) and after routing (none): OpenAI's shape both times
    err(srv.post("/v1/completions", json=body), 401, None, "invalid_api_key")
    err(srv.get("/v1/models"), 401, None, "invalid_api_key")
    err(srv.get("/v1/models", headers={"Authorization": "Bearer wrong"}), 401, None,
        "invalid_api_key")
    ok = {"Authorization": f"Bearer {key}"}
    assert srv.get("/v1/models", headers=ok).status_code == 200
    deadline = time.time() + 60
    while (r := srv.post("/v1/completions", json=body, headers=ok)).status_code != 200:
        assert time.time() < deadline, r.text
        time.sleep(0.2)
    assert r.json()["usage"]["completion_tokens"] == 2


# ---------------------------------------------------------------- the official client

@pytest.fixture(scope="module")
def node_client():
    """tests/openai/node_modules, installed from the pinned package-lock.json if missing."""
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
        r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"npm ci in tests/openai failed (make openai-client):\n{r.stderr}"

    def run(base, model, *scenarios, key="none"):
        r = subprocess.run(["node", "client.mjs", base, key, model, *scenarios], cwd=NODE_DIR,
                           capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, r.stderr
        out = {}
        for line in r.stdout.splitlines():
            o = json.loads(line)
            out[o.pop("scenario")] = o
        return out
    return run


def test_official_client_calls(oa, node_client):
    res = node_client(oa.url("/v1"), "tiny_gpt", "models", "completion", "completion_stream",
                      "chat", "chat_stream", "stop", "seeded", "bad_n", "unknown_model",
                      "too_long")
    greedy = plain_loop(PROMPT, 24).decode()
    assert res["models"]["one"] == "tiny_gpt" and "tiny_gpt" in res["models"]["ids"]
    assert res["completion"]["text"] == greedy and res["completion"]["finish"] == "length"
    assert res["completion"]["usage"]["completion_tokens"] == 24
    assert res["completion_stream"]["text"] == greedy
    assert res["completion_stream"]["usage"] == res["completion"]["usage"]
    assert res["chat"]["role"] == "assistant" and res["chat_stream"]["role"] == "assistant"
    assert res["chat_stream"]["text"] == res["chat"]["text"] == plain_loop(
        "user: Tell me of the sea\nassistant:", 16).decode()
    assert res["chat_stream"]["usage"] == res["chat"]["usage"]
    full = plain_loop(PROMPT, 40).decode()
    assert res["stop"]["finish"] == "stop" and res["stop"]["text"] == full[:full.index("the t")]
    s = res["seeded"]
    assert s["a"] == s["b"] != s["c"]
    assert res["bad_n"]["error"] == "BadRequestError" and res["bad_n"]["param"] == "n"
    assert res["unknown_model"]["error"] == "NotFoundError"
    assert res["unknown_model"]["code"] == "model_not_found"
    assert res["too_long"]["status"] == 400 and "context holds" in res["too_long"]["message"]


def test_official_client_on_torchserve_urls(oa, node_client):
    res = node_client(oa.url("/predictions/tiny_gpt/1.0/v1"), "tiny_gpt", "models", "completion",
                      "chat_stream")
    assert res["models"]["ids"] == ["tiny_gpt"]
    assert res["completion"]["text"] == plain_loop(PROMPT, 24).decode()
    assert res["chat_stream"]["finish"] == "length"


def test_official_client_abort_frees_the_slot(server_factory, node_client):
    """Four streams the client aborts after five chunks, with the model's 4 slots: each abort
    gives its KV cache slot back, so the next ones run and, after them, none is held."""
    # probe() reads the worker's x-ts-worker-* counters: only sent with worker_debug_headers
    srv = server_factory(models=["tiny_gpt"], yaml={"tiny_gpt": {"batchSize": 4}},
                         config={"worker_debug_headers": True})
    srv.wait_ready("tiny_gpt", body={"json": {"prompt": "x", "max_new_tokens": 1}})
    res = node_client(srv.url("/v1"), "tiny_gpt", *["abort"] * 4)
    assert 5 <= res["abort"]["chunks"] < 50
    deadline = time.time() + 30
    while probe(srv)["slots_in_use"] != 1:
        assert time.time() < deadline, "aborted streams still hold their KV cache slots"
        time.sleep(0.1)
    log = srv.log()
    assert log.count("client closed the connection") >= 4
    res = node_client(srv.url("/v1"), "tiny_gpt", "completion_stream", "completion")
    assert res["completion_stream"]["text"] == res["completion"]["text"]
