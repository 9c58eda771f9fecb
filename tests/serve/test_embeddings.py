"""kiln serve's POST /v1/embeddings on tiny encoder ONNX models built here (an embedding-table Gather,
so that the expected vectors are numpy's), through the official `openai` client and raw HTTP: mean
pooling over the tokens, a [batch, hidden] output used as is, batches of inputs, float and base64
encodings, token-id and text inputs (kjv-gpt2's tokenizer.json), and errors in OpenAI's shape."""
import base64
import json
import shutil

import numpy as np
import pytest

from conftest import KJV_GPT2, serve, tensor_model

VOCAB, HIDDEN = 8256, 8  # kjv-gpt2's tokenizer has ids below 8256
TABLE = np.random.default_rng(7).standard_normal((VOCAB, HIDDEN)).astype(np.float32)


def encoder_onnx(path, pooled, seq="seq"):
    """seq: the sequence dimension (a name, or a static length); pooled False: input_ids, attention_mask, token_type_ids (int64 [batch, seq]) ->
    (TABLE[input_ids] + token_type_ids) * attention_mask [batch, seq, hidden];
    pooled True: input_ids (int32 [batch, seq]) -> sum over seq of TABLE[input_ids] [batch, hidden]."""
    from onnx import TensorProto, helper, numpy_helper, save
    ids_type = TensorProto.INT32 if pooled else TensorProto.INT64
    inputs = [helper.make_tensor_value_info("input_ids", ids_type, ["batch", seq])]
    inits = [numpy_helper.from_array(TABLE, "table"), numpy_helper.from_array(np.array([2], np.int64), "axis2")]
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["emb"], axis=0)]
    if pooled:
        inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
        nodes.append(helper.make_node("ReduceSum", ["emb", "axis1"], ["out"], keepdims=0))
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", HIDDEN])
    else:
        inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", seq])
                   for n in ("attention_mask", "token_type_ids")]
        nodes += [helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
                  helper.make_node("Unsqueeze", ["mask_f", "axis2"], ["mask3"]),
                  helper.make_node("Cast", ["token_type_ids"], ["types_f"], to=TensorProto.FLOAT),
                  helper.make_node("Unsqueeze", ["types_f", "axis2"], ["types3"]),
                  helper.make_node("Add", ["emb", "types3"], ["typed"]),
                  helper.make_node("Mul", ["typed", "mask3"], ["out"])]
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", seq, HIDDEN])
    graph = helper.make_graph(nodes, "encoder", inputs, [out], inits)
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


@pytest.fixture(scope="module")
def server(kiln, tmp_path_factory):
    repo = tmp_path_factory.mktemp("repo")
    (repo / "enc" / "1").mkdir(parents=True)
    encoder_onnx(repo / "enc" / "1" / "model.onnx", pooled=False)
    shutil.copy(f"{KJV_GPT2}/tokenizer.json", repo / "enc" / "1" / "tokenizer.json")
    (repo / "pooled" / "1").mkdir(parents=True)
    encoder_onnx(repo / "pooled" / "1" / "model.onnx", pooled=True)
    (repo / "fixed" / "1").mkdir(parents=True)
    encoder_onnx(repo / "fixed" / "1" / "model.onnx", pooled=False, seq=6)
    (repo / "fixed_nomask" / "1").mkdir(parents=True)
    encoder_onnx(repo / "fixed_nomask" / "1" / "model.onnx", pooled=True, seq=4)
    tensor_model(str(repo), "cnn")
    shutil.copytree(KJV_GPT2, repo / "kjv" / "1")
    with serve(kiln, repo) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


def mean_pooled(ids):
    return TABLE[np.array(ids)].mean(axis=0)


def test_client_token_ids_batch_mean_pooled(client, server):
    inputs = [[1, 2, 3], [5, 6], [8191], [7, 8], [9, 10], [11, 12, 13]]  # equal lengths run as one batch
    r = client.embeddings.create(model="enc", input=inputs)
    assert r.object == "list" and r.model == "enc" and len(r.data) == len(inputs)
    for i, ids in enumerate(inputs):
        assert r.data[i].index == i and r.data[i].object == "embedding"
        np.testing.assert_allclose(r.data[i].embedding, mean_pooled(ids), rtol=1e-6, atol=1e-7)
    assert r.usage.prompt_tokens == 13 and r.usage.total_tokens == 13
    m = server.metrics()  # runs: [1, 2, 3] | [5, 6] | [8191] | [7, 8], [9, 10] | [11, 12, 13]
    assert m['kiln_compute_duration_seconds_count{model="enc",version="1"}'] == 5
    assert m['kiln_batch_size_count{model="enc",version="1"}'] == 5
    assert m['kiln_batch_size_sum{model="enc",version="1"}'] == 6


def test_client_text_uses_the_tokenizer(client):
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(f"{KJV_GPT2}/tokenizer.json")
    texts = ["In the beginning God created the heaven and the earth.", "And God said"]
    r = client.embeddings.create(model="enc", input=texts)
    ids = [tok.encode(t).ids for t in texts]
    for i in range(2):
        np.testing.assert_allclose(r.data[i].embedding, mean_pooled(ids[i]), rtol=1e-6, atol=1e-7)
    assert r.usage.prompt_tokens == sum(map(len, ids))
    one = client.embeddings.create(model="enc", input=texts[1])
    np.testing.assert_allclose(one.data[0].embedding, r.data[1].embedding, rtol=0, atol=0)


def test_raw_float_and_base64(server):
    status, out = server.json("/v1/embeddings", {"model": "enc", "input": [7, 9, 11], "encoding_format": "float"})
    assert status == 200, out
    expected = mean_pooled([7, 9, 11])
    np.testing.assert_allclose(out["data"][0]["embedding"], expected, rtol=1e-6, atol=1e-7)
    status, b64 = server.json("/v1/embeddings", {"model": "enc", "input": [7, 9, 11], "encoding_format": "base64"})
    assert status == 200, b64
    decoded = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(decoded, np.array(out["data"][0]["embedding"], np.float32))
    assert b64["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


def test_pooled_output_used_as_is_and_dimensions(client, server):
    r = client.embeddings.create(model="pooled", input=[[3, 4], [10, 20, 30]], dimensions=HIDDEN)
    np.testing.assert_allclose(r.data[0].embedding, TABLE[[3, 4]].sum(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(r.data[1].embedding, TABLE[[10, 20, 30]].sum(axis=0), rtol=1e-6, atol=1e-6)
    status, out = server.json("/v1/embeddings", {"model": "pooled", "input": [3], "dimensions": 4})
    assert status == 400 and out["error"]["param"] == "dimensions" and "8" in out["error"]["message"]


def test_static_sequence_is_padded_under_the_mask(client):
    r = client.embeddings.create(model="fixed", input=[[4, 5, 6], [1, 2, 3, 4, 5, 6]])
    np.testing.assert_allclose(r.data[0].embedding, mean_pooled([4, 5, 6]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(r.data[1].embedding, mean_pooled([1, 2, 3, 4, 5, 6]), rtol=1e-6, atol=1e-7)
    r = client.embeddings.create(model="fixed_nomask", input=[1, 2, 3, 4])
    np.testing.assert_allclose(r.data[0].embedding, TABLE[[1, 2, 3, 4]].sum(axis=0), rtol=1e-6, atol=1e-6)


def error(server, body, status):
    got, out = server.json("/v1/embeddings", body)
    assert got == status, out
    assert set(out["error"]) == {"message", "type", "param", "code"} and out["error"]["code"] == status
    return out["error"]["message"]


def test_errors(server):
    assert "token ids only" in error(server, {"model": "pooled", "input": "hello"}, 400)
    assert "LLM" in error(server, {"model": "kjv", "input": [1, 2]}, 400)
    assert "not an encoder" in error(server, {"model": "cnn", "input": [1, 2]}, 400)
    assert "no-such" in error(server, {"model": "no-such", "input": [1]}, 404)
    assert "encoding_format" in error(server, {"model": "enc", "input": [1], "encoding_format": "int8"}, 400)
    assert "token ids" in error(server, {"model": "enc", "input": [1, -2]}, 400)
    assert "empty" in error(server, {"model": "enc", "input": [[1], []]}, 400)
    assert "'input'" in error(server, {"model": "enc", "input": {"text": "x"}}, 400)
    assert "all be strings" in error(server, {"model": "enc", "input": ["a", [1]]}, 400)
    assert error(server, {"model": "enc", "input": []}, 400)
    assert "out of range" in error(server, {"model": "enc", "input": [1, VOCAB]}, 400)
    assert "at most 6" in error(server, {"model": "fixed", "input": [1] * 7}, 400)
    assert "exactly 4" in error(server, {"model": "fixed_nomask", "input": [1, 2]}, 400)
