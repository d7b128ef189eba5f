"""The engine server as a real subprocess on loopback, with a tiny random model (float32) and a character-level
tokenizer: OpenAI endpoints, streaming, continuous batching, live config changes, statistics, metrics, errors, auth
and client disconnects."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.config import SpecConfig
from engine.engine import Request, SpecEngine
from engine.models import load_model
from engine.sampling import SamplingParams
from tests.engine.server_harness import ServerProcess, free_port, save_tiny_server_model, sse_events

TOKEN = "test-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TINY_ENV = {"OMP_NUM_THREADS": "1", "SPECTUNE_ADMIN_TOKEN": TOKEN}
PROFILED = {"method": "ngram", "k": 2, "min_n": 1, "max_n": 2}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny_server_model(tmp_path_factory.mktemp("tiny-server-model"))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """Target and draft are the same tiny model (the draft's tokens are all accepted), max batch 4, one workload
    configured by a profile file at startup."""
    tmp = tmp_path_factory.mktemp("server")
    profile = tmp / "profile.json"
    profile.write_text(json.dumps({"workloads": {"profiled": PROFILED}}))
    proc = ServerProcess(["--target", str(model_dir), "--draft", str(model_dir), "--max-batch", "4",
                          "--profile-source", str(profile)], tmp / "server.log", TINY_ENV)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def reference(model_dir):
    """Greedy output ids of one request served alone, in this process, with speculation off."""
    loaded = load_model(model_dir, dtype="float32", progress=False)
    cache: dict[tuple[tuple[int, ...], int, bool], list[int]] = {}

    def greedy(prompt_ids: list[int], max_tokens: int, ignore_eos: bool = False) -> list[int]:
        key = (tuple(prompt_ids), max_tokens, ignore_eos)
        if key not in cache:
            params = SamplingParams(max_new_tokens=max_tokens, ignore_eos=ignore_eos)
            out = SpecEngine(loaded, max_batch=1).run([Request("ref", prompt_ids, params, SpecConfig())])
            cache[key] = out["ref"][0]
        return cache[key]

    greedy.tokenizer = loaded.tokenizer
    return greedy


def put_config(client: httpx.Client, config: dict, workload: str | None = None) -> httpx.Response:
    body = {"config": config} | ({"workload": workload} if workload else {})
    return client.put("/admin/spec-config", json=body, headers=AUTH)


def complete(client: httpx.Client, prompt: str, max_tokens: int = 24, **extra) -> dict:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "return_token_ids": True} | extra
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def stream(client: httpx.Client, path: str, body: dict) -> list[dict | str]:
    with client.stream("POST", path, json=body | {"stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response.iter_lines()))


def metric_values(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(predicate, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def request_entries(client: httpx.Client, request_id: str) -> tuple[list[dict], list[dict]]:
    page = client.get("/stats", params={"since": 0, "limit": 10_000}).json()
    return ([s for s in page["steps"] if s["request_id"] == request_id],
            [r for r in page["requests"] if r["request_id"] == request_id])


# -- serving ----------------------------------------------------------------------------------------------------------
def test_completion_matches_the_request_served_alone(client, reference):
    prompt = "Once upon a time"
    body = complete(client, prompt, max_tokens=30)
    prompt_ids = reference.tokenizer.encode(prompt)
    choice = body["choices"][0]
    assert choice["token_ids"] == reference(prompt_ids, 30)
    assert choice["text"] == reference.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert choice["finish_reason"] == ("length" if len(choice["token_ids"]) == 30 else "stop")
    assert body["usage"] == {"prompt_tokens": len(prompt_ids), "completion_tokens": len(choice["token_ids"]),
                             "total_tokens": len(prompt_ids) + len(choice["token_ids"])}
    stats = body["spectune"]
    assert stats["workload"] == "default" and stats["output_len"] == len(choice["token_ids"])
    assert stats["steps"] == len(choice["token_ids"]) and stats["drafts"] == 0  # default config: off


def test_chat_completion_applies_the_chat_template(client, reference):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    response = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 20, "temperature": 0,
                                                         "return_token_ids": True})
    assert response.status_code == 200, response.text
    body = response.json()
    text = reference.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = reference.tokenizer.encode(text, add_special_tokens=False)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["token_ids"] == reference(prompt_ids, 20)
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)


def test_streaming_gives_the_same_text_and_ends_with_done(client):
    whole = complete(client, "streams of text", max_tokens=25, workload="profiled")
    events = stream(client, "/v1/completions", {"prompt": "streams of text", "max_tokens": 25, "temperature": 0,
                                                "workload": "profiled"})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert last["usage"] == whole["usage"]
    assert last["spectune"]["drafts"] > 0  # the profile file's n-gram config is in force for this workload

    chat = stream(client, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 12, "temperature": 0})
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chat[-1] == "[DONE]" and chat[-2]["object"] == "chat.completion.chunk"
    assert chat[-2]["usage"]["completion_tokens"] >= 1


def test_concurrent_requests_each_get_their_own_greedy_output(client, reference):
    """12 requests at once on a max batch of 4: requests join and leave the batch between steps, under different
    per-workload configs (off, n-gram from the profile file, a draft-model tree), and each still gets exactly the
    output it gets alone."""
    assert put_config(client, {"method": "draft", "k": 3, "tree": {"branching": [2, 1]}}, "drafted").status_code == 200
    workloads = ["default", "profiled", "drafted"]
    prompts = [f"prompt {i}: " + "abc " * (i % 4) + f"x{i}y" for i in range(12)]
    lengths = [8 + 5 * (i % 5) for i in range(12)]

    def one(i: int) -> dict:
        return complete(client, prompts[i], max_tokens=lengths[i], workload=workloads[i % 3])

    with ThreadPoolExecutor(12) as pool:
        bodies = list(pool.map(one, range(12)))
    for i, body in enumerate(bodies):
        expected = reference(reference.tokenizer.encode(prompts[i]), lengths[i])
        assert body["choices"][0]["token_ids"] == expected, f"request {i} ({workloads[i % 3]})"
        assert body["spectune"]["workload"] == workloads[i % 3]
    drafted = [b["spectune"] for b in bodies if b["spectune"]["workload"] == "drafted"]
    assert all(s["accepted_per_position"][0] == s["drafts"] > 0 for s in drafted)  # the draft is the target
    ids = {b["id"] for b in bodies}
    batch_sizes = [s["batch_size"] for s in client.get("/stats", params={"limit": 10_000}).json()["steps"]
                   if s["request_id"] in ids]
    assert max(batch_sizes) == 4  # the batch filled up to --max-batch and never beyond


def test_a_short_request_leaves_the_batch_without_waiting_for_a_long_one(client, server):
    with httpx.Client(base_url=server.url, timeout=120) as other:
        body = {"prompt": "long one", "max_tokens": 400, "ignore_eos": True, "temperature": 0, "stream": True}
        with other.stream("POST", "/v1/completions", json=body) as long_stream:
            lines = long_stream.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            long_id = json.loads(first.removeprefix("data: "))["id"]
            short = complete(client, "short one", max_tokens=3, ignore_eos=True)
            assert short["usage"]["completion_tokens"] == 3
            assert client.get("/health").json()["running"] == 1  # the long request is still decoding
            short_steps, _ = request_entries(client, short["id"])
            assert {s["batch_size"] for s in short_steps} == {2}
        wait_for(lambda: request_entries(client, long_id)[1])  # closing the stream aborted it
        assert request_entries(client, long_id)[1][0]["finish_reason"] == "abort"


def test_stop_strings_cut_the_text_in_both_modes(client):
    full = complete(client, "stop here", max_tokens=40, ignore_eos=True)["choices"][0]["text"]
    stop = full[10:12]
    expected = full[:full.find(stop)]
    body = complete(client, "stop here", max_tokens=40, ignore_eos=True, stop=[stop, "never-matches"])
    assert body["choices"][0]["text"] == expected
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["spectune"]["finish_reason"] == "stop"
    events = stream(client, "/v1/completions", {"prompt": "stop here", "max_tokens": 40, "ignore_eos": True,
                                                "temperature": 0, "stop": stop})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == expected
    assert events[-2]["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_is_reproducible(client):
    body = {"prompt": "sample me", "max_tokens": 20, "temperature": 0.9, "top_p": 0.9, "seed": 1234,
            "return_token_ids": True, "workload": "profiled"}
    first = client.post("/v1/completions", json=body).json()
    second = client.post("/v1/completions", json=body).json()
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]


def test_workload_from_header_and_body(client):
    by_header = client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2},
                            headers={"X-Spectune-Workload": "from-header"}).json()
    assert by_header["spectune"]["workload"] == "from-header"
    by_body = client.post("/v1/completions", json={"prompt": "a", "max_tokens": 2, "workload": "from-body"},
                          headers={"X-Spectune-Workload": "from-header"}).json()
    assert by_body["spectune"]["workload"] == "from-body"


def test_models_and_health(client, model_dir):
    models = client.get("/v1/models").json()
    assert models["object"] == "list"
    [model] = models["data"]
    assert model["id"] == model_dir.name
    assert model["spectune"]["draft"] == model_dir.name and model["spectune"]["max_batch"] == 4
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == model_dir.name


# -- live control -----------------------------------------------------------------------------------------------------
def test_profile_file_is_applied_at_startup(client):
    table = client.get("/admin/spec-config", headers=AUTH).json()
    assert table["workloads"]["profiled"] == SpecConfig(**PROFILED).model_dump(mode="json")
    assert table["default"] == SpecConfig().model_dump(mode="json")


def test_config_changes_mid_stream_without_touching_the_output(client, reference):
    """The client changes its workload's config three times while its own request streams: each change applies
    from the next step, and the output is still exactly the greedy output served alone."""
    assert put_config(client, {"method": "off"}, "live").status_code == 200
    body = {"prompt": "a long live stream", "max_tokens": 480, "ignore_eos": True, "temperature": 0,
            "workload": "live", "return_token_ids": True}
    token_ids: list[int] = []
    changes = [(5, {"method": "ngram", "k": 4, "max_n": 3}), (120, {"method": "draft", "k": 2}),
               (240, {"method": "off"})]
    with client.stream("POST", "/v1/completions", json=body | {"stream": True}) as response:
        for event in sse_events(response.iter_lines()):
            if event == "[DONE]":
                break
            request_id = event["id"]
            token_ids += event["choices"][0]["token_ids"]
            if changes and len(token_ids) >= changes[0][0]:
                assert put_config(client, changes.pop(0)[1], "live").status_code == 200
    assert not changes
    assert token_ids == reference(reference.tokenizer.encode(body["prompt"]), 480, ignore_eos=True)
    steps, [summary] = request_entries(client, request_id)
    methods = [s["method"] for s in steps]  # "off" also marks an n-gram step that found no match
    ngram = [i for i, m in enumerate(methods) if m == "ngram"]
    draft = [i for i, m in enumerate(methods) if m == "draft"]
    assert methods[0] == "off" and ngram and draft and ngram[-1] < draft[0]
    assert draft[-1] < len(methods) - 10 and set(methods[draft[-1] + 1:]) == {"off"}
    assert summary["output_len"] == 480 and summary["finish_reason"] == "length"
    config_changes = client.get("/stats", params={"limit": 10_000}).json()["config_changes"]
    assert [c["config"]["method"] for c in config_changes if c["workload"] == "live"][-3:] == ["ngram", "draft", "off"]


@pytest.mark.parametrize(("config", "message"), [
    ({"method": "ngram", "k": 3, "speed": "fast"}, "config.speed: Extra inputs are not permitted"),
    ({"method": "ngram", "k": 0}, "config.k: Input should be greater than or equal to 1"),
    ({"method": "beam"}, "config.method: Input should be 'off', 'draft' or 'ngram'"),
    ({"method": "ngram", "min_n": 5, "max_n": 2}, "config: Value error, min_n (5) must not exceed max_n (2)"),
    ({"method": "ngram", "tree": {"branching": [2], "top_k": 2}}, "config.tree: Value error, tree: give either"),
])
def test_invalid_configs_get_422_and_change_nothing(client, config, message):
    before = client.get("/admin/spec-config", headers=AUTH).json()
    response = put_config(client, config, "profiled")
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith(message)
    assert client.get("/admin/spec-config", headers=AUTH).json() == before


def test_admin_endpoints_require_the_bearer_token(client):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}):
        for method in ("GET", "PUT"):
            response = client.request(method, "/admin/spec-config", headers=headers,
                                      json={"config": {"method": "off"}})
            assert response.status_code == 401, (headers, method)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["param"] == "authorization"
            assert "'Bearer <SPECTUNE_ADMIN_TOKEN>'" in response.json()["error"]["message"]
    assert client.get("/admin/spec-config", headers=AUTH).status_code == 200


# -- observability ----------------------------------------------------------------------------------------------------
def test_stats_cursor_returns_only_new_entries(client):
    head = client.get("/stats", params={"since": 10**9}).json()
    assert head["steps"] == [] and head["requests"] == []
    cursor = head["next_cursor"]
    body = complete(client, "count me", max_tokens=6, ignore_eos=True)
    page = client.get("/stats", params={"since": cursor}).json()
    assert [s["request_id"] for s in page["steps"]] == [body["id"]] * body["spectune"]["steps"]
    [summary] = page["requests"]
    assert summary["request_id"] == body["id"] and summary["output_len"] == 6 and summary["ttft_s"] > 0
    seqs = sorted(e["seq"] for e in page["steps"] + page["requests"])
    assert seqs == list(range(cursor, page["next_cursor"])) and page["dropped"] == 0
    assert client.get("/stats", params={"since": page["next_cursor"]}).json()["steps"] == []
    paged = client.get("/stats", params={"since": cursor, "limit": 2}).json()
    assert len(paged["steps"]) == 2 and paged["next_cursor"] == cursor + 2
    assert page["epoch"] == head["epoch"]


def test_metrics_match_the_summed_request_statistics(client):
    assert put_config(client, {"method": "ngram", "k": 3, "max_n": 2}, "metered").status_code == 200
    prompts = ["ab ab ab ab ab", "hello hello hello", "xyz", "the the the the"]
    with ThreadPoolExecutor(4) as pool:
        bodies = list(pool.map(lambda p: complete(client, p, max_tokens=30, workload="metered"), prompts))
    stats = [b["spectune"] for b in bodies]
    values = metric_values(client)
    w = (("workload", "metered"),)

    def value(name: str, labels: tuple = w) -> float:
        return values.get((name, labels), 0.0)

    assert value("spectune:spec_decode_num_drafts_total") == sum(s["drafts"] for s in stats) > 0
    assert value("spectune:spec_decode_num_draft_tokens_total") == sum(s["draft_tokens"] for s in stats)
    assert value("spectune:spec_decode_num_accepted_tokens_total") == sum(s["accepted_tokens"] for s in stats)
    for pos in range(3):
        per_pos = sum(s["accepted_per_position"][pos] for s in stats if len(s["accepted_per_position"]) > pos)
        assert value("spectune:spec_decode_num_accepted_tokens_per_pos_total",
                     (("position", str(pos)), ("workload", "metered"))) == per_pos
    assert value("spectune:generation_tokens_total") == sum(b["usage"]["completion_tokens"] for b in bodies)
    assert value("spectune:prompt_tokens_total") == sum(b["usage"]["prompt_tokens"] for b in bodies)
    assert value("spectune:time_to_first_token_seconds_count") == 4
    assert value("spectune:e2e_request_latency_seconds_count") == 4
    assert value("spectune:inter_token_latency_seconds_count") == sum(s["steps"] - 1 for s in stats)
    assert value("spectune:spec_config_updates_total") == 1
    assert ("spectune:num_requests_running", ()) in values and ("spectune:num_requests_waiting", ()) in values


# -- bad input --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "body", "status", "message"), [
    ("/v1/completions", {"max_tokens": 5}, 422, "prompt: Field required"),
    ("/v1/completions", {"prompt": "x", "temperature": -1}, 422, "temperature: Input should be greater than or equal"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 422, "max_tokens: Input should be greater than or equal"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {}}, 422, "logit_bias: Extra inputs are not permitted"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 422, "n: Input should be less than or equal to 1"),
    ("/v1/completions", {"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}, 422, "stop: List should have at most 4"),
    ("/v1/completions", {"prompt": "x", "workload": "no spaces"}, 422, "workload: String should match pattern"),
    ("/v1/completions", {"prompt": ""}, 400, "prompt: must not be empty"),
    ("/v1/completions", {"prompt": [5, 96]}, 400, "prompt: token ids must be in [0, 96)"),
    ("/v1/completions", {"prompt": "x", "model": "gpt-4"}, 404, "model: 'gpt-4' is not served here"),
    ("/v1/chat/completions", {"messages": []}, 422, "messages: List should have at least 1 item"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 422, "messages.0.role: Input should"),
])
def test_bad_bodies_are_refused_naming_the_field(client, path, body, status, message):
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"].startswith(message)
    assert error["code"] == status


def test_malformed_json_is_a_422(client):
    response = client.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"]["message"].startswith("body: JSON decode error")


def test_oversized_max_tokens_is_refused_with_the_context_limit(client):
    response = client.post("/v1/completions", json={"prompt": "four", "max_tokens": 100_000})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "max_tokens: 100000 + 4 prompt tokens exceed the model context of 512 tokens",
        "type": "invalid_request_error", "param": "max_tokens", "code": 400}
    assert client.post("/v1/completions", json={"prompt": "four", "max_tokens": 508}).status_code == 200


# -- client disconnects -----------------------------------------------------------------------------------------------
def test_a_disconnected_streaming_client_frees_its_slot(client, server):
    with httpx.Client(base_url=server.url, timeout=120) as gone:
        body = {"prompt": "nobody listens", "max_tokens": 450, "ignore_eos": True, "stream": True}
        with gone.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            request_id = json.loads(next(line for line in lines if line.startswith("data: "))[6:])["id"]
    wait_for(lambda: request_entries(client, request_id)[1])
    [summary] = request_entries(client, request_id)[1]
    assert summary["finish_reason"] == "abort" and summary["output_len"] < 450
    wait_for(lambda: client.get("/health").json()["running"] == 0)


def test_a_disconnected_waiting_client_frees_its_slot(client, server):
    before = client.get("/stats", params={"since": 10**9}).json()["next_cursor"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json={"prompt": "gone", "max_tokens": 450, "ignore_eos": True,
                                                         "workload": "impatient"},
                   timeout=httpx.Timeout(10.0, read=0.3))  # 450 tiny-model steps take a second or more

    def aborted() -> list[dict]:
        page = client.get("/stats", params={"since": before, "limit": 10_000}).json()
        return [r for r in page["requests"] if r["workload"] == "impatient"]

    wait_for(aborted)
    assert aborted()[0]["finish_reason"] == "abort" and aborted()[0]["output_len"] < 450
    wait_for(lambda: client.get("/health").json()["running"] == 0)


# -- fail-open startup ------------------------------------------------------------------------------------------------
def test_an_unreachable_profile_source_falls_back_to_the_default(model_dir, tmp_path):
    source = f"http://127.0.0.1:{free_port()}"
    proc = ServerProcess(["--target", str(model_dir), "--profile-source", source], tmp_path / "server.log",
                         {"OMP_NUM_THREADS": "1"})
    try:
        with httpx.Client(base_url=proc.url, timeout=60) as c:
            assert c.get("/admin/spec-config").json() == {"default": SpecConfig().model_dump(mode="json"),
                                                          "workloads": {}}  # no token set: open
            values = metric_values(c)
            assert values[("spectune:profile_source_failures_total", (("reason", "unreachable"),))] == 1
            assert c.post("/v1/completions", json={"prompt": "still serving", "max_tokens": 3}).status_code == 200
            response = put_config(c, {"method": "draft"})
            assert response.status_code == 422
            assert response.json()["error"]["message"].startswith("config.method: 'draft' needs a draft model")
        assert "profile source failed (unreachable)" in proc.logs()
    finally:
        proc.stop()
