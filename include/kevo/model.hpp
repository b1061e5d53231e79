// kevo::model — whole models in: an ONNX graph (or, through the Python module, a PyTorch module)
// becomes kevo kernels; the kernel table, the hot kernels tuned, the end-to-end gain (docs/MODEL.md).
#pragma once
#include "kevo/model/import.hpp"
#include "kevo/model/tune.hpp"
