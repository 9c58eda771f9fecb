"""kiln serve's OpenAI endpoints on models/kjv-gpt2 (CPU), through the official `openai` client and
raw HTTP: completions and chat, plain and streamed, greedy output equal to `kiln generate
--temperature 0`, sampling parameters, logprobs, stop strings, n, usage, errors in OpenAI's shape,
admission control (429 with Retry-After), a disconnecting client freeing its KV blocks, and prefix
caching (the /metrics counters, the same text with "prefix_cache": false)."""
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import KJV_GPT2, serve

PROMPT = "In the beginning"


@pytest.fixture(scope="module")
def server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    shutil.copytree(KJV_GPT2, repo / "kjv" / "1")
    (repo / "kjv" / "config.json").write_text(json.dumps({"aliases": ["bible"], "max_seqs": 4}))
    with serve(kiln, repo, "--api-key", "sk-test", "--open-health") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0, timeout=60)


def kiln_generate(kiln, prompt, max_tokens):
    p = subprocess.run([kiln, "generate", KJV_GPT2, "--prompt", prompt, "--temperature", "0", "--max-tokens",
                        str(max_tokens)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_models_list(client):
    ids = {m.id for m in client.models.list().data}
    assert ids == {"kjv", "bible"}


def test_greedy_completion_equals_kiln_generate(kiln, client):
    r = client.completions.create(model="kjv", prompt=PROMPT, max_tokens=24, temperature=0)
    assert r.choices[0].text == kiln_generate(kiln, PROMPT, 24)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 24 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 24
    assert r.object == "text_completion" and r.id.startswith("cmpl-")


def test_greedy_chat_equals_kiln_generate_chat(kiln, client):
    r = client.chat.completions.create(model="kjv", temperature=0, max_tokens=20, messages=[
        {"role": "system", "content": "Thou art a scribe."}, {"role": "user", "content": "Who begat Enos?"}])
    p = subprocess.run([kiln, "generate", KJV_GPT2, "--chat", "--system", "Thou art a scribe.", "--prompt",
                        "Who begat Enos?", "--temperature", "0", "--max-tokens", "20"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert r.choices[0].message.content == p.stdout


def test_streamed_completion_equals_plain(client):
    plain = client.completions.create(model="bible", prompt=PROMPT, max_tokens=16, temperature=0)
    chunks = list(client.completions.create(model="bible", prompt=PROMPT, max_tokens=16, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert len({c.id for c in chunks}) == 1


def test_chat_plain_and_streamed(client):
    messages = [{"role": "system", "content": "You are the KJV."}, {"role": "user", "content": "Who made the heaven?"}]
    plain = client.chat.completions.create(model="kjv", messages=messages, max_tokens=12, temperature=0)
    assert plain.choices[0].message.role == "assistant" and plain.object == "chat.completion"
    assert plain.usage.completion_tokens == 12
    stream = client.chat.completions.create(model="kjv", messages=messages, max_completion_tokens=12, temperature=0,
                                            stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_raw_sse_ends_with_done(server):
    status, headers, body = server.request("/v1/completions", {"model": "kjv", "prompt": PROMPT, "max_tokens": 3,
                                                               "stream": True}, headers={"Authorization": "Bearer sk-test"})
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = [e for e in body.decode().split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"


def test_seeded_sampling_is_reproducible_and_n_choices_differ(client):
    kw = dict(model="kjv", prompt=PROMPT, max_tokens=16, temperature=1.0, top_p=0.9, seed=7, n=3,
              extra_body={"top_k": 50, "min_p": 0.01, "repetition_penalty": 1.1})
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert sorted(c.index for c in a.choices) == [0, 1, 2]
    assert len({c.text for c in a.choices}) > 1
    assert a.usage.completion_tokens == 48


def test_stop_strings(client):
    full = client.completions.create(model="kjv", prompt=PROMPT, max_tokens=24, temperature=0).choices[0].text
    word = full.split()[3]
    r = client.completions.create(model="kjv", prompt=PROMPT, max_tokens=24, temperature=0, stop=[word, "zzz"])
    assert r.choices[0].text == full[:full.index(word)] and r.choices[0].finish_reason == "stop"
    r = client.completions.create(model="kjv", prompt=PROMPT, max_tokens=24, temperature=0, stop=word)
    assert r.choices[0].text == full[:full.index(word)]


def test_logprobs(client):
    r = client.chat.completions.create(model="kjv", messages=[{"role": "user", "content": "Amen"}], max_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == 5
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob, abs=1e-5)  # greedy: the most likely
    c = client.completions.create(model="kjv", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and all(len(t) <= 2 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == c.choices[0].text


def test_token_id_prompt_and_penalties(client):
    r = client.completions.create(model="kjv", prompt=[40, 262, 3726], max_tokens=5, temperature=0,
                                  presence_penalty=1.0, frequency_penalty=0.5, extra_body={"ignore_eos": True})
    assert r.usage.prompt_tokens == 3 and r.usage.completion_tokens == 5


@pytest.mark.parametrize("body, param, message", [
    ({"prompt": PROMPT}, "model", "'model' must be a string"),
    ({"model": "kjv", "prompt": PROMPT, "temperature": "hot"}, "temperature", "'temperature' must be a number"),
    ({"model": "kjv", "prompt": PROMPT, "temperature": 3}, "temperature", "in [0, 2]"),
    ({"model": "kjv", "prompt": PROMPT, "max_tokens": 0}, "max_tokens", "'max_tokens'"),
    ({"model": "kjv", "prompt": PROMPT, "n": 100}, "n", "'n'"),
    ({"model": "kjv", "prompt": PROMPT, "stop": [1, 2]}, "stop", "'stop'"),
    ({"model": "kjv", "prompt": {"text": PROMPT}}, "prompt", "'prompt' must be"),
    ({"model": "kjv", "prompt": PROMPT, "stream_options": {"include_usage": True}}, "stream_options", "stream"),
    ({"model": "kjv", "prompt": PROMPT, "max_tokens": 1000}, "max_tokens", "maximum context length is 256 tokens"),
])
def test_bad_completion_requests(server, body, param, message):
    status, _, data = server.request("/v1/completions", body, headers={"Authorization": "Bearer sk-test"})
    err = json.loads(data)["error"]
    assert status == 400 and err["type"] == "invalid_request_error" and err["code"] == 400
    assert err["param"] == param and message in err["message"], err


def test_bad_chat_requests_and_unknown_model(server):
    auth = {"Authorization": "Bearer sk-test"}
    status, _, data = server.request("/v1/chat/completions", {"model": "kjv", "messages": "hi"}, headers=auth)
    assert status == 400 and json.loads(data)["error"]["param"] == "messages"
    status, _, data = server.request("/v1/chat/completions", {"model": "kjv", "messages": [{"content": "x"}]}, headers=auth)
    assert status == 400 and "'role'" in json.loads(data)["error"]["message"]
    status, _, data = server.request("/v1/completions", b"{oops", headers=auth)
    assert status == 400 and json.loads(data)["error"]["type"] == "invalid_request_error"
    status, _, data = server.request("/v1/completions", {"model": "gpt-5", "prompt": "x"}, headers=auth)
    assert status == 404 and "unknown model 'gpt-5'" in json.loads(data)["error"]["message"]


def test_wrong_key_through_the_client(server):
    import openai
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="kjv", prompt=PROMPT, max_tokens=2)


def test_client_disconnect_frees_kv_blocks(server):
    host, port = server.url.removeprefix("http://").split(":")
    for stream in (True, False):
        body = json.dumps({"model": "kjv", "prompt": PROMPT, "max_tokens": 200, "ignore_eos": True,
                           "stream": stream}).encode()
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        label = 'model="kjv",version="1"'
        deadline = time.time() + 20
        while server.metrics()[f"kiln_kv_cache_blocks_used{{{label}}}"] == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert server.metrics()[f"kiln_num_requests_running{{{label}}}"] == 1
        s.close()
        deadline = time.time() + 10
        while time.time() < deadline:
            m = server.metrics()
            # the access record (status 499) is written when the connection ends, which may come after
            # the engine loop freed the blocks: wait for both
            if (m[f"kiln_kv_cache_blocks_used{{{label}}}"] == 0 and m[f"kiln_num_requests_running{{{label}}}"] == 0
                    and m.get(f'kiln_requests_total{{{label},status="499"}}', 0) >= 1):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"KV blocks still held or no 499 recorded {10} s after the client went away "
                        f"(stream={stream}): {m}")
        assert m[f'kiln_requests_total{{{label},status="499"}}'] >= 1


def test_half_close_during_generation_is_a_disconnect(server):
    # the client sends its whole request, then shuts its sending side while tokens flow (to the
    # server a close and a half-close look the same): the request is cancelled, its KV blocks freed
    # and status 499 recorded (not 200 after its last token), plain or streamed
    host, port = server.url.removeprefix("http://").split(":")
    label = 'model="kjv",version="1"'
    for stream in (False, True):
        before = server.metrics().get(f'kiln_requests_total{{{label},status="499"}}', 0)
        body = json.dumps({"model": "kjv", "prompt": PROMPT, "max_tokens": 250, "ignore_eos": True,
                           "stream": stream}).encode()
        s = socket.create_connection((host, int(port)))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.time() + 20
        while server.metrics()[f"kiln_kv_cache_blocks_used{{{label}}}"] == 0 and time.time() < deadline:
            time.sleep(0.05)
        s.shutdown(socket.SHUT_WR)
        deadline = time.time() + 5
        while time.time() < deadline:
            m = server.metrics()
            if (m[f"kiln_kv_cache_blocks_used{{{label}}}"] == 0
                    and m.get(f'kiln_requests_total{{{label},status="499"}}', 0) > before):
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"a half-closed request (stream={stream}) still holds KV blocks or was not recorded as "
                        f"499 5 s later: {m}")
        s.close()


def test_waiting_queue_full_is_429(kiln, tmp_path):
    shutil.copytree(KJV_GPT2, tmp_path / "kjv" / "1")
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"max_seqs": 1, "max_waiting": 1}))
    with serve(kiln, tmp_path) as s:
        import concurrent.futures
        body = {"model": "kjv", "prompt": PROMPT, "max_tokens": 40, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda _: s.request("/v1/completions", body), range(6)))
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) >= 1 and statuses.count(429) >= 1 and len(set(statuses)) == 2, statuses
        for status, headers, data in results:
            if status == 429:
                assert headers["Retry-After"] == "1" and json.loads(data)["error"]["type"] == "rate_limit_error"
        assert s.request("/v1/completions", body)[0] == 200  # the queue drained: requests are accepted again


def test_tokens_per_minute_limit(kiln, tmp_path):
    import hashlib
    shutil.copytree(KJV_GPT2, tmp_path / "repo" / "kjv" / "1")
    keys = tmp_path / "keys.txt"
    keys.write_text(hashlib.sha256(b"small").hexdigest() + " name=small tpm=30\n")
    with serve(kiln, tmp_path / "repo", "--keys", keys) as s:
        auth = {"Authorization": "Bearer small"}
        body = {"model": "kjv", "prompt": PROMPT, "max_tokens": 40, "ignore_eos": True}
        assert s.request("/v1/completions", body, headers=auth)[0] == 200  # charged ~43 tokens of 30
        status, headers, data = s.request("/v1/completions", body, headers=auth)
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert "tokens per minute" in json.loads(data)["error"]["message"]


def test_kiln_load_streams_from_kiln_serve(kiln, server, tmp_path):
    out = tmp_path / "load.json"
    p = subprocess.run([kiln, "load", server.url, "--api", "openai-completions", "--model", "kjv", "--stream",
                        "--sweep", "rate=2,4", "--duration", "2s", "--warmup", "0", "--input-len", "8",
                        "--output-len", "8", "--ignore-eos", "-H", "Authorization: Bearer sk-test", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    steps = json.loads(out.read_text())["steps"]
    for st in steps:
        assert st["failed"] == 0 and st["ok"] == st["scheduled"] > 0, st
        assert st["latency_ms"]["ttft"]["count"] == st["ok"] and st["out_tokens"] == 8 * st["ok"]
    assert json.loads(out.read_text())["token_counts"] == "usage"


def test_model_chat_template_file(kiln, tmp_path):
    template = ("{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}ANSWER:{% endif %}")
    shutil.copytree(KJV_GPT2, tmp_path / "kjv" / "1")
    (tmp_path / "kjv" / "scribe.jinja").write_text(template)
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"chat_template": "scribe.jinja"}))
    with serve(kiln, tmp_path) as s:
        status, out = s.json("/v1/chat/completions", {"model": "kjv", "temperature": 0, "max_tokens": 12,
                                                      "messages": [{"role": "user", "content": "Who begat Enos?"}]})
        assert status == 200, out
    p = subprocess.run([kiln, "generate", KJV_GPT2, "--chat", "--chat-template", str(tmp_path / "kjv" / "scribe.jinja"),
                        "--prompt", "Who begat Enos?", "--temperature", "0", "--max-tokens", "12"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert out["choices"][0]["message"]["content"] == p.stdout
    (tmp_path / "kjv" / "config.json").write_text(json.dumps({"chat_template": "missing.jinja"}))
    with serve(kiln, tmp_path) as s:
        assert "chat_template" in "".join(s.log) and "missing.jinja" in "".join(s.log)


def test_spec_decode_metrics(kiln, tmp_path):
    # a model config with speculative decoding: the greedy text of plain decoding, and its counters
    prompt = "And God said, Let there be light: and there was light. " * 3
    label = 'model="kjv",version="1"'
    texts = []
    for spec in ("ngram", "off"):
        shutil.copytree(KJV_GPT2, tmp_path / spec / "kjv" / "1")
        (tmp_path / spec / "kjv" / "config.json").write_text(json.dumps({"spec": spec, "draft_tokens": 4}))
        with serve(kiln, tmp_path / spec) as s:
            status, out = s.json("/v1/completions", {"model": "kjv", "prompt": prompt, "max_tokens": 24, "temperature": 0})
            assert status == 200, out
            texts.append(out["choices"][0]["text"])
            m = s.metrics()
            drafts, accepted = m[f"kiln_spec_decode_num_draft_tokens_total{{{label}}}"], m[f"kiln_spec_decode_num_accepted_tokens_total{{{label}}}"]
            steps, emitted = m[f"kiln_spec_decode_num_drafts_total{{{label}}}"], m[f"kiln_spec_decode_num_emitted_tokens_total{{{label}}}"]
            if spec == "ngram":
                assert drafts >= accepted > 0 and steps > 0 and accepted < emitted <= accepted + steps
            else:
                assert drafts == accepted == steps == emitted == 0
    assert texts[0] == texts[1]


def test_draft_model_config(kiln, tmp_path):
    # a model config with a draft model (the model itself: every draft accepted) or its own early exit
    # ("layers:4"): the greedy text of plain decoding
    prompt = "And God said, Let there be light: and there was light."
    label = 'model="kjv",version="1"'
    texts = []
    configs = (("draft", {"draft": str(KJV_GPT2), "draft_tokens": 3}), ("exit", {"draft": "layers:4"}), ("off", {}))
    for name, cfg in configs:
        shutil.copytree(KJV_GPT2, tmp_path / name / "kjv" / "1")
        (tmp_path / name / "kjv" / "config.json").write_text(json.dumps(cfg))
        with serve(kiln, tmp_path / name) as s:
            status, out = s.json("/v1/completions", {"model": "kjv", "prompt": prompt, "max_tokens": 16, "temperature": 0})
            assert status == 200, out
            texts.append(out["choices"][0]["text"])
            m = s.metrics()
            drafts, accepted = m[f"kiln_spec_decode_num_draft_tokens_total{{{label}}}"], m[f"kiln_spec_decode_num_accepted_tokens_total{{{label}}}"]
            assert (drafts > 0) == (name != "off") and (drafts == accepted or name == "exit")
    assert texts[0] == texts[1] == texts[2]


def test_prefix_cache_metrics_and_off(kiln, tmp_path):
    system = "And God said, Let there be light: and there was light. And God saw the light, that it was good: " * 2
    prompts = [system + "and God divided the light", system + "And the evening and the morning"]
    label = 'model="kjv",version="1"'
    texts = {}
    for cache in (True, False):
        shutil.copytree(KJV_GPT2, tmp_path / str(cache) / "kjv" / "1")
        (tmp_path / str(cache) / "kjv" / "config.json").write_text(json.dumps({"prefix_cache": cache}))
        with serve(kiln, tmp_path / str(cache)) as s:
            for p in prompts:
                status, out = s.json("/v1/completions", {"model": "kjv", "prompt": p, "max_tokens": 16, "temperature": 0})
                assert status == 200, out
                texts.setdefault(p, set()).add(out["choices"][0]["text"])
            m = s.metrics()
            queries, hits = m[f"kiln_prefix_cache_queries_total{{{label}}}"], m[f"kiln_prefix_cache_hits_total{{{label}}}"]
            if cache:  # the second prompt finds the first one's full blocks of the shared text
                assert queries > hits >= 16 and m[f"kiln_prefix_cache_hit_ratio{{{label}}}"] == pytest.approx(hits / queries, abs=1e-5)
                status, _, page = s.request("/")  # the status page shows the hit rate
                assert status == 200 and f"prefix cache {100 * hits / queries:.1f}% of {queries:.0f} prompt tokens" in page.decode()
            else:
                assert queries == hits == 0 and m[f"kiln_prefix_cache_hit_ratio{{{label}}}"] == 0
    assert all(len(t) == 1 for t in texts.values()), texts  # the same text with and without the cache
    (tmp_path / "True" / "kjv" / "config.json").write_text(json.dumps({"prefix_cache": "no"}))
    with serve(kiln, tmp_path / "True") as s:
        assert "'prefix_cache' must be true or false" in "".join(s.log)
