// A model in: an ONNX graph becomes the kevo kernels that compute it. Matrix products (MatMul,
// Gemm) with their bias and activation epilogues fused where the graph allows (the intermediate
// has a single consumer), Softmax, LayerNormalization and the ReduceMean/Sub/Pow/Sqrt/Div pattern
// torch exports for it, RMSNorm patterns, chains of elementwise ops fused into one kernel, and
// attention subgraphs (MatMul, scale, Softmax, MatMul) recognised as one attention kernel. Every
// node that is not part of a kernel is listed with the reason kevo cannot express it (data
// movement, shape arithmetic, unknown ops); none is dropped silently. Identical kernels (the same
// ir::kernel_hash) are listed once with their count. ONNX: https://onnx.ai/onnx/intro/concepts.html
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kevo/core/expected.hpp"
#include "kevo/ir/kernel.hpp"

namespace kevo::model {

struct ImportOptions {
  // Values of the graph's dynamic (named) dimensions, e.g. {"batch", 1}: every dim_param of the
  // graph's inputs must be bound (the CLI's --dim batch=1).
  std::map<std::string, std::int64_t, std::less<>> dims;
  // Storage dtype of every kernel tensor (e.g. bf16 where the target's matrix engine needs it);
  // empty: the graph's own element types.
  std::optional<ir::DType> dtype;
};

// Which ONNX value a kernel tensor is: `value` of shape `shape` (the kernel may see it flattened,
// e.g. [S, B, D] as [M, K], or without its broadcast dims of size 1; row-major order is the same).
struct Binding {
  std::string tensor;  // the kernel's tensor name
  std::string value;   // the ONNX value (graph input, initializer, or a node's output)
  std::vector<std::int64_t> shape;
  bool initializer = false;  // a weight (its data is in Model::weights)
};

struct Instance {
  std::vector<std::string> nodes;  // the ONNX nodes this kernel computes (names, or op#index)
  std::vector<Binding> inputs, outputs;
};

struct ModelKernel {
  std::string kind;   // matmul, matmul_bias_act, gemm, bmm, softmax, layernorm, rmsnorm, attention, eltwise, reduce
  std::string op;     // the ONNX ops it covers, e.g. "MatMul+Add+Relu"
  ir::Kernel kernel;
  std::uint64_t hash = 0;  // ir::kernel_hash
  std::string shape;       // "M=2048,N=1024,K=1024"
  std::vector<Instance> instances;  // every place in the graph computing this kernel (count = size)
  [[nodiscard]] std::size_t count() const noexcept { return instances.size(); }
};

struct Unsupported {
  std::string node;     // name, or op#index when the node has none
  std::string op_type;  // e.g. "Transpose"
  std::string reason;   // why kevo does not express it as a kernel
};

struct Weight {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

struct Model {
  std::string file;
  std::string producer;          // e.g. "pytorch 1.13.1"
  std::int64_t opset = 0;
  std::size_t nodes = 0;         // nodes in the graph
  std::vector<ModelKernel> kernels;       // deduplicated, in graph order of first appearance
  std::vector<Unsupported> unsupported;   // every node that no kernel covers, in graph order
  std::map<std::string, Weight, std::less<>> weights;  // the initializers kernels read (float data)
};

// Reads and imports an ONNX model file. Errors are one line naming the file and, where it is the
// cause, the node or value ("model.onnx: node 'x' (Conv): ..."); a file that is not an ONNX model
// or a graph with no kernel kevo can express is an error.
Expected<Model, std::string> import_onnx(const std::filesystem::path& file, const ImportOptions& opt = {});
// The same from the serialized ModelProto bytes; `name` is what errors are located in.
Expected<Model, std::string> import_onnx_bytes(std::string_view bytes, const std::string& name,
                                               const ImportOptions& opt = {});

// "batch=1,seq=128" -> {"batch": 1, "seq": 128}; errors name the bad entry.
Expected<std::map<std::string, std::int64_t, std::less<>>, std::string> parse_dims(std::string_view text);

}  // namespace kevo::model
