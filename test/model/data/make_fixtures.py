#!/usr/bin/env python3
"""Writes the tiny ONNX fixtures of the kevo model tests (test/cli's `kevo model` cases) with
onnx.helper (https://onnx.ai/onnx/api/helper.html). Run from this folder: python3 make_fixtures.py"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)


def init(name, shape):
    return numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)


def save(graph, path, opset=13):
    m = helper.make_model(graph, producer_name="kevo-fixtures", opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


# mlp.onnx: x[batch, 32] -> Gemm(transB) + Relu -> MatMul + Add -> Transpose -> Softmax
nodes = [
    helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1", transB=1),
    helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
    helper.make_node("MatMul", ["hr", "W2"], ["o"], name="fc2"),
    helper.make_node("Add", ["o", "b2"], ["ob"], name="fc2_bias"),
    helper.make_node("Transpose", ["ob"], ["t"], name="swap", perm=[1, 0]),
    helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=-1),
]
g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, "batch"])],
                      [init("W1", [64, 32]), init("b1", [64]), init("W2", [64, 16]), init("b2", [16])])
save(g, "mlp.onnx")

# fancy.onnx: one op kevo has no kernel for.
g = helper.make_graph([helper.make_node("Einsum", ["a", "b"], ["y"], name="contract", equation="ij,jk->ik")], "fancy",
                      [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 4]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
save(g, "fancy.onnx")

# junk.onnx: bytes that are not a ModelProto.
with open("junk.onnx", "wb") as f:
    f.write(b"\x08\x01\x12\xff\xff this is not an ONNX model\n")

# untimed.onnx: a MatMul whose 65536 x 65536 weight lives in a side file (not read: external
# data), too large for the default schedule to be timed, beside a small Relu that is.
w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[65536, 65536], data_location=TensorProto.EXTERNAL)
w.external_data.add(key="location", value="w.bin")
g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"], name="big"), helper.make_node("Relu", ["z"], ["y2"], name="small")],
                      "untimed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 65536]),
                                  helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])],
                      [helper.make_tensor_value_info("h", TensorProto.FLOAT, [64, 65536]),
                       helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 8])], [w])
m = helper.make_model(g, producer_name="kevo-fixtures", opset_imports=[helper.make_opsetid("", 13)])
m.ir_version = 8
onnx.save(m, "untimed.onnx")  # (the checker would look for w.bin)
