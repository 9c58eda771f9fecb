"""kiln serve's access control and limits: API keys (flag, environment, hashed keys file), 401 for a
missing or wrong key, 403 for a model the key may not use, a per-key rate limit held within 5 %, open
health endpoints, and a full queue answering 429 while the requests already queued succeed."""
import concurrent.futures
import hashlib
import time

import pytest

from conftest import cnn_request, serve, tensor_model

RATE = 20.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    tensor_model(repo, "cnn", {"max_batch": 4})
    tensor_model(repo, "other", {"max_batch": 4})
    return repo


@pytest.fixture(scope="module")
def keyed(kiln, repo, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    sha = lambda k: hashlib.sha256(k.encode()).hexdigest()
    keys.write_text(f"# team keys\n{sha('alice-key')} name=alice models=cnn\n"
                    f"sha256:{sha('bob-key')} name=bob rps={RATE:g} burst=5\n")
    with serve(kiln, repo, "--keys", keys, "--api-key", "flag-key", "--open-health",
               env={"KILN_API_KEYS": "env-key1,env-key2"}) as s:
        yield s


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def test_missing_and_wrong_key_are_401(keyed):
    req, _ = cnn_request(1)
    status, headers, body = keyed.request("/v2/models/cnn/infer", req)
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer" and b"missing API key" in body
    status, _, body = keyed.request("/v2/models/cnn/infer", req, headers=bearer("nope"))
    assert status == 401 and b"invalid API key" in body
    status, _, body = keyed.request("/v1/models", headers={"Authorization": "Basic abc"})
    assert status == 401 and b'"type":"authentication_error"' in body


def test_keys_from_flag_env_and_file(keyed):
    req, _ = cnn_request(1)
    for key in ("flag-key", "env-key1", "env-key2", "alice-key"):
        status, _, body = keyed.request("/v2/models/cnn/infer", req, headers=bearer(key))
        assert status == 200, (key, body)


def test_key_limited_to_models_is_403(keyed):
    req, _ = cnn_request(1)
    status, _, body = keyed.request("/v2/models/other/infer", req, headers=bearer("alice-key"))
    assert status == 403 and b"may not use model 'other'" in body
    assert keyed.request("/v2/models/other/infer", req, headers=bearer("flag-key"))[0] == 200


def test_open_health(keyed):
    assert keyed.request("/v2/health/live")[0] == 200
    assert keyed.request("/v2/health/ready")[0] == 200
    assert keyed.request("/metrics")[0] == 200
    assert keyed.request("/v2/models/cnn")[0] == 401


def test_rate_limit_within_5_percent(keyed):
    """Three clients flood with bob's key for 3 s: the 200s match burst + rate x time within 5 %."""
    duration, burst = 3.0, 5
    start = time.time()

    def flood():
        ok = limited = 0
        last_ok = start
        while time.time() - start < duration:
            status, headers, _ = keyed.request("/v2", headers=bearer("bob-key"))
            if status == 200:
                ok += 1
                last_ok = time.time()
            elif status == 429:
                assert int(headers["Retry-After"]) >= 1
                limited += 1
        return ok, limited, last_ok

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: flood(), range(3)))
    elapsed = max(r[2] for r in results) - start  # the last request let in was admitted by then
    ok = sum(r[0] for r in results)
    assert sum(r[1] for r in results) > 0, "the flood was never limited"
    expected = burst + RATE * elapsed
    assert abs(ok - expected) <= 0.05 * expected, f"{ok} requests passed in {elapsed:.2f} s, expected {expected:.0f}"


def test_queue_full_is_429_while_queued_requests_succeed(kiln, repo, tmp_path):
    tensor_model(tmp_path, "slow", {"max_batch": 8, "max_queue_delay_us": 1500000, "max_queue": 3})
    with serve(kiln, tmp_path) as s:
        req, _ = cnn_request(1)

        def one(_):
            status, headers, _ = s.request("/v2/models/slow/infer", req)
            return status, headers.get("Retry-After")

        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            results = list(pool.map(one, range(10)))
        statuses = sorted(r[0] for r in results)
        assert statuses.count(200) == 3 and statuses.count(429) == 7, statuses
        assert all(r[1] == "1" for r in results if r[0] == 429)
        m = s.metrics()
        assert m['kiln_requests_total{model="slow",version="1",status="429"}'] == 7


def test_request_timeout_in_queue_is_503(kiln, tmp_path):
    tensor_model(tmp_path, "slow", {"max_batch": 8, "max_queue_delay_us": 1500000})
    with serve(kiln, tmp_path) as s:
        req, _ = cnn_request(1)
        req["parameters"] = {"timeout": 200000}
        start = time.time()
        status, err = s.json("/v2/models/slow/infer", req)
        assert status == 503 and "past its timeout of 200 ms" in err["error"]
        assert time.time() - start < 1.4
        req["parameters"] = {"timeout": "soon"}
        status, err = s.json("/v2/models/slow/infer", req)
        assert status == 400 and "parameters.timeout" in err["error"]


def test_circuit_breaker(kiln, tmp_path):
    """Failing runs (injected) take the only instance out of rotation: its requests get 503, later ones
    503 at once without waiting, readiness drops; after the cool-down a probe brings it back."""
    tensor_model(tmp_path, "cnn", {"max_batch": 1, "breaker_failures": 2, "breaker_cooldown_ms": 1500})
    with serve(kiln, tmp_path, env={"KILN_SERVE_FAIL_RUNS": "2"}) as s:
        req, _ = cnn_request(1)
        for _ in range(2):
            status, err = s.json("/v2/models/cnn/infer", req)
            assert status == 503 and "instance 0 failed: injected failure" in err["error"]
        start = time.time()
        status, err = s.json("/v2/models/cnn/infer", req)
        assert status == 503 and "out of rotation" in err["error"] and time.time() - start < 0.5
        assert s.metrics()['kiln_instances{model="cnn",version="1",state="down"}'] == 1
        assert s.request("/v2/health/ready")[0] == 503
        time.sleep(1.7)
        assert s.json("/v2/models/cnn/infer", req)[0] == 200
        assert s.request("/v2/health/ready")[0] == 200
