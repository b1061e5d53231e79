"""kevo.from_torch / kevo.import_onnx on models no one here wrote: PyTorch's own
nn.TransformerEncoderLayer, an nn.Sequential MLP and a small CNN, exported to ONNX at test time.
The imported kernels' reference evaluation (kevo's evaluator) is compared with PyTorch's own
modules on random inputs; the kernel table's shares add up to 1."""
import dataclasses
import math
import os

import numpy as np
import pytest

import kevo

if not hasattr(kevo._kevo, "_import_onnx"):
    pytest.skip("kevo was built without ONNX support (libonnx-dev, libprotobuf-dev)", allow_module_level=True)
torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian: python3-torch)")
pytest.importorskip("onnx", reason="torch.onnx.export needs the onnx package (Debian: python3-onnx)")
F = torch.nn.functional


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def instance_of(model, kind, node_prefix):
    """The (kernel, instance index) of `kind` whose instance covers a node named node_prefix*."""
    for k in model.kernels_of(kind):
        for i, inst in enumerate(k.instances):
            if any(n.startswith(node_prefix) for n in inst["nodes"]):
                return k, i
    raise AssertionError(f"no {kind} kernel covers {node_prefix}: {[(k.kind, k.instances) for k in model.kernels]}")


def close(a, b, tol=2e-4):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    err = np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b)))
    assert err < tol, err


# KEVO_MODEL_FULL=1: the size (d_model 1024, 16 heads, seq 2048, feed-forward 2048, about
# a minute of reference evaluation); by default a small layer of the same structure.
FULL = os.environ.get("KEVO_MODEL_FULL") == "1"


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    d, heads, seq, ff = (1024, 16, 2048, 2048) if FULL else (64, 4, 32, 128)
    layer = torch.nn.TransformerEncoderLayer(d_model=d, nhead=heads, dim_feedforward=ff, dropout=0.0).eval()
    x = torch.randn(seq, 1, d)  # (seq, batch, d_model)
    return layer, kevo.from_torch(layer, x, target="trn2")


def test_encoder_layer_kernels(encoder):
    layer, m = encoder
    kinds = {k.kind for k in m.kernels}
    assert {"attention", "layernorm", "matmul_bias_act"} <= kinds, kinds
    assert m.kernels_of("layernorm")[0].count == 2  # norm1 and norm2: one kernel, two instances
    # Nothing dropped: every node is in a kernel or listed with its reason.
    covered = sum(len(i["nodes"]) for k in m.kernels for i in k.instances)
    assert covered + len(m.not_expressed) == m.nodes
    assert all(u["reason"] for u in m.not_expressed)
    assert {"Transpose", "Reshape"} <= {u["op"] for u in m.not_expressed}


def test_encoder_layer_table_shares_add_up(encoder):
    _, m = encoder
    assert len(m.table) == len(m.kernels)
    assert all(r["ok"] and r["default_ns"] > 0 for r in m.table)
    assert math.isclose(sum(r["share"] for r in m.table), 1.0, rel_tol=1e-12)
    assert math.isclose(sum(r["total_ns"] for r in m.table), m.total_ns, rel_tol=1e-12)


def test_encoder_layer_linears_match_pytorch(encoder):
    layer, m = encoder
    sa = layer.self_attn
    cases = [("/self_attn/MatMul", sa.in_proj_weight, sa.in_proj_bias, False),
             ("/self_attn/Gemm", sa.out_proj.weight, sa.out_proj.bias, False),
             ("/linear1/MatMul", layer.linear1.weight, layer.linear1.bias, True),
             ("/linear2/MatMul", layer.linear2.weight, layer.linear2.bias, False)]
    for seed, (node, w, b, relu) in enumerate(cases):
        k, i = instance_of(m, "matmul_bias_act", node)
        a_shape = k.bindings(i)["A"]["shape"]
        a = rand(a_shape, seed)
        got = m.reference(k, {"A": a}, instance=i)["C"]
        with torch.no_grad():
            want = F.linear(torch.from_numpy(a), w, b)
            want = F.relu(want) if relu else want
        close(got, want.numpy())


def test_reference_takes_weights_from_inputs_and_names_what_is_missing(encoder):
    layer, m = encoder
    k, i = instance_of(m, "matmul_bias_act", "/linear2/MatMul")
    b = k.bindings(i)
    weights = [t["name"] for t in k.kernel.tensors if t["role"] == "input" and b[t["name"]]["initializer"]]
    assert len(weights) == 2, weights  # the weight matrix and the bias
    a = rand(b["A"]["shape"], 3)
    # Every weight passed as zeros: the output is zero (the model's weights were not used).
    zeros = {w: np.zeros(b[w]["shape"], dtype=np.float32) for w in weights}
    assert not np.any(m.reference(k, {"A": a, **zeros}, instance=i)["C"])
    with pytest.raises(ValueError, match="'A' .* is missing from inputs"):
        m.reference(k, {}, instance=i)
    # A weight whose data the importer could not read (external data) must be passed.
    missing = dict(m.weights)
    del missing[b[weights[0]]["value"]]
    with pytest.raises(ValueError, match="pass it in inputs"):
        kevo.Model.reference(dataclasses.replace(m, weights=missing), k, {"A": a}, instance=i)
    # An instance index outside the kernel's instances is refused, not counted from the end.
    n = len(k.instances)
    for bad in (-1, n):
        with pytest.raises(kevo.Error, match=rf"instance must be an integer in \[0, {n - 1}\], not {bad}"):
            m.reference(k, {"A": a, **zeros}, instance=bad)


def test_encoder_layer_norms_match_pytorch(encoder):
    layer, m = encoder
    for seed, (node, norm) in enumerate([("/norm1/", layer.norm1), ("/norm2/", layer.norm2)]):
        k, i = instance_of(m, "layernorm", node)
        x = rand(k.bindings(i)["X"]["shape"], 10 + seed)
        got = m.reference(k, {"X": x}, instance=i)["Y"]
        with torch.no_grad():
            close(got, norm(torch.from_numpy(x)).numpy())


def test_encoder_layer_attention_matches_pytorch(encoder):
    _, m = encoder
    k, i = instance_of(m, "attention", "/self_attn/")
    b = k.bindings(i)
    q, kt, v = (rand(b[n]["shape"], 20 + j) for j, n in enumerate(["Q", "KT", "V"]))
    got = m.reference(k, {"Q": q, "KT": kt, "V": v}, instance=i)["O"]
    d = q.shape[-1]
    with torch.no_grad():
        scores = torch.from_numpy(q) / math.sqrt(d) @ torch.from_numpy(kt)
        want = torch.softmax(scores, dim=-1) @ torch.from_numpy(v)
    close(got, want.numpy())


def test_mlp_chain_matches_pytorch_end_to_end():
    torch.manual_seed(1)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32), torch.nn.Softmax(dim=-1)).eval()
    x = torch.randn(16, 64)
    m = kevo.from_torch(mlp, x, target="trn2")
    assert [k.kind for k in m.kernels] == ["matmul_bias_act", "matmul_bias_act", "softmax"]
    assert m.kernels[0].op == "Gemm+Relu" and m.kernels[2].op == "Softmax"
    assert m.not_expressed == []
    # The kernels in graph order, each fed the previous one's output: the whole model.
    h = x.numpy()
    for k in m.kernels:
        ins = [t["name"] for t in k.kernel.tensors if t["role"] == "input" and not k.bindings()[t["name"]]["initializer"]]
        assert len(ins) == 1
        h = next(iter(m.reference(k, {ins[0]: h}).values()))
    with torch.no_grad():
        close(h, mlp(x).numpy())
    assert math.isclose(sum(r["share"] for r in m.table), 1.0, rel_tol=1e-12)


def test_small_cnn_imports_with_every_node_accounted_for():
    torch.manual_seed(2)
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(8 * 8 * 8, 10)).eval()
    x = torch.randn(2, 3, 16, 16)
    m = kevo.from_torch(cnn, x, target="trn2")
    covered = sum(len(i["nodes"]) for k in m.kernels for i in k.instances)
    assert covered + len(m.not_expressed) == m.nodes
    ops = {u["op"]: u["reason"] for u in m.not_expressed}
    assert "Flatten" in ops or "Reshape" in ops
    assert [k.kind for k in m.kernels] == ["conv2d", "eltwise", "matmul_bias_act"]
    assert "MaxPool" in ops
    conv, i = instance_of(m, "conv2d", "/0/")
    x = rand(conv.bindings(i)["X"]["shape"], 31)
    pre = m.reference(conv, {"X": x}, instance=i)["Y"]
    bias_relu = m.kernels[1]
    assert bias_relu.op == "Conv bias+Relu"
    got = m.reference(bias_relu, {"X0": pre})["Y"]
    with torch.no_grad():
        close(got, F.relu(cnn[0](torch.from_numpy(x))).numpy())
    lin, i = instance_of(m, "matmul_bias_act", "/4/")
    a = rand(lin.bindings(i)["A"]["shape"], 30)
    got = m.reference(lin, {"A": a}, instance=i)["C"]
    with torch.no_grad():
        close(got, F.linear(torch.from_numpy(a), cnn[4].weight, cnn[4].bias).numpy())
    assert math.isclose(sum(r["share"] for r in m.table), 1.0, rel_tol=1e-12)


def test_bad_onnx_file_is_a_located_parse_error(tmp_path):
    p = tmp_path / "junk.onnx"
    p.write_bytes(b"\x08\x01\x12\xff\xff not a model")
    with pytest.raises(kevo.ParseError, match=r"junk.onnx: not an ONNX model"):
        kevo.import_onnx(str(p))
