// The Triton emitter. Templates are plain Python text with ${NAME} placeholders, filled from the
// kernel's sizes and the schedule's genes: the emitted module is what a user takes away, so it
// reads like hand-written Triton (Triton's tutorials: matmul with grouped launch order, fused
// softmax / layer norm, fused attention), with every size a compile-time constant.
#include "kevo/gpu/triton.hpp"

#include "kevo/core/error.hpp"

#include <fmt/format.h>

#include <map>

namespace kevo::gpu {
namespace {

using Vars = std::map<std::string, std::string>;

std::string subst(std::string_view tpl, const Vars& v) {
  std::string out;
  out.reserve(tpl.size() + 256);
  for (std::size_t i = 0; i < tpl.size();) {
    if (tpl[i] == '$' && i + 1 < tpl.size() && tpl[i + 1] == '{') {
      const auto end = tpl.find('}', i);
      const std::string key(tpl.substr(i + 2, end - i - 2));
      const auto it = v.find(key);
      if (it == v.end()) throw std::logic_error("triton template: no value for ${" + key + "}");
      out += it->second;
      i = end + 1;
    } else {
      out += tpl[i++];
    }
  }
  return out;
}

std::string tl_dtype(ir::DType t) {
  switch (t) {
    case ir::DType::bf16: return "tl.bfloat16";
    case ir::DType::fp16: return "tl.float16";
    case ir::DType::fp32: return "tl.float32";
    case ir::DType::fp8_e4m3fn: return "tl.float8e4nv";  // OCP E4M3FN, the GPUs' E4M3
    case ir::DType::fp8_e4m3:  // IEEE-style E4M3 has no Triton dtype; the kernels here refuse fp8 before
      throw Error("fp8_e4m3 (IEEE-style, NeuronCore) has no Triton dtype; GPUs store fp8_e4m3fn");
  }
  return "tl.float32";
}

std::string header(const GpuKernel& k, const std::string& schedule, const GpuTarget& t) {
  std::string ins, outs, args;
  for (const auto& r : k.tensors) {
    (r.output ? outs : ins) += fmt::format("\"{}\", ", r.name);
    args += (args.empty() ? "" : ", ") + r.name;
  }
  return fmt::format(
      "# Triton kernel emitted by kevo for {} on {} (docs/GPU.md): one schedule, every size a constant.\n"
      "# kernel:   {}\n"
      "# schedule: {}\n"
      "import torch\n"
      "import triton\n"
      "import triton.language as tl\n\n"
      "INPUTS = ({})\n"
      "OUTPUTS = ({})\n",
      k.name, t.name, k.describe(), schedule, ins, outs);
}

std::string act_fn(const std::string& act) {
  if (act == "gelu")  // 0.5·x·(1 + tanh(z)) = x·sigmoid(2z), z = sqrt(2/pi)·(x + 0.044715·x³)
    return "@triton.jit\ndef _act(x):\n    # GELU, tanh form: x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3))\n"
           "    return x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))\n\n\n";
  if (act == "gelu_erf")
    return "@triton.jit\ndef _act(x):\n    # GELU, erf form\n    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))\n\n\n";
  if (act == "relu") return "@triton.jit\ndef _act(x):\n    return tl.maximum(x, 0.0)\n\n\n";
  if (act == "silu") return "@triton.jit\ndef _act(x):\n    return x * tl.sigmoid(x)\n\n\n";
  return {};
}

// ---------------------------------------------------------------------------------------------
// matmul (+ bias + activation)
constexpr std::string_view kMatmulTile = R"PY(
@triton.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr,
                  M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):
    # one program per BLOCK_M x BLOCK_N output tile (and K slice), launched in groups of GROUP_M
    # tile rows so that neighbouring programs share A and B tiles in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
${TILE_BODY}
)PY";

constexpr std::string_view kMatmulPersistent = R"PY(
@triton.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr,
                  M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, NUM_PROGRAMS: tl.constexpr):
    # persistent: NUM_PROGRAMS programs (one per SM) walk the output tiles in grouped order
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    num_tiles = num_pid_m * num_pid_n
    for tile in range(tl.program_id(0), num_tiles, NUM_PROGRAMS):
        group_id = tile // num_pid_in_group
        first_pid_m = group_id * GROUP_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
        pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
        pid_n = (tile % num_pid_in_group) // group_size_m
${TILE_BODY}
)PY";

std::string indent(const std::string& s, int n) {
  std::string pad(static_cast<std::size_t>(n), ' ');
  std::string out;
  std::size_t start = 0;
  while (start < s.size()) {
    auto e = s.find('\n', start);
    if (e == std::string::npos) e = s.size();
    const std::string line = s.substr(start, e - start);
    out += line.empty() ? "\n" : pad + line + "\n";
    start = e + 1;
  }
  return out;
}

std::string emit_matmul(const GpuKernel& k, const TritonSchedule& s, const GpuTarget& t, const std::string& sched) {
  const std::int64_t bm = s.get("block_m"), bn = s.get("block_n"), bk = s.get("block_k");
  const std::int64_t sk = s.get("split_k", 1), gm = s.get("group_m", 1);
  const bool persistent = s.label("program") == "persistent";
  const bool fused = k.has_epilogue() && sk == 1 && s.label("epilogue", "fused") == "fused";
  const bool separate = k.has_epilogue() && !fused;
  const bool even_m = k.M % bm == 0, even_n = k.N % bn == 0;
  const std::string dt = tl_dtype(k.dtype);
  // operand layouts as read: as stored, or a transposed contiguous copy made by launch()
  const bool a_copy = s.label("a_layout", "as_stored") == "transposed_copy";
  const bool b_copy = s.label("b_layout", "as_stored") == "transposed_copy";
  const bool a_t = k.a_trans != a_copy, b_t = k.b_trans != b_copy;  // A read as [K, M]; B read as [N, K]
  // element strides of the operands as read
  const std::string sam = a_t ? "1" : "K", sak = a_t ? "M" : "1";
  const std::string sbk = b_t ? "1" : "N", sbn = b_t ? "K" : "1";
  std::string body;
  body += "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n";
  body += "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)\n";
  // Rows and columns past the edge are read wrapped (and never stored), so loads need no masks.
  body += even_m ? "offs_am = offs_m\n" : "offs_am = offs_m % M  # edge tiles read wrapped rows, never stored\n";
  body += even_n ? "offs_bn = offs_n\n" : "offs_bn = offs_n % N  # edge tiles read wrapped columns, never stored\n";
  if (sk > 1) {
    body += "pid_k = tl.program_id(1)  # this program's K slice\n";
    body += "offs_k = pid_k * (K // SPLIT_K) + tl.arange(0, BLOCK_K)\n";
  } else {
    body += "offs_k = tl.arange(0, BLOCK_K)\n";
  }
  body += fmt::format("a_ptrs = a_ptr + offs_am[:, None] * {} + offs_k[None, :] * {}\n", sam, sak);
  body += fmt::format("b_ptrs = b_ptr + offs_k[:, None] * {} + offs_bn[None, :] * {}\n", sbk, sbn);
  body += "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)\n";
  body += "for _ in range(0, K // SPLIT_K, BLOCK_K):\n";
  body += "    a = tl.load(a_ptrs)\n    b = tl.load(b_ptrs)\n    acc = tl.dot(a, b, acc)\n";
  body += fmt::format("    a_ptrs += BLOCK_K * {}\n    b_ptrs += BLOCK_K * {}\n", sak, sbk);
  const bool need_mask = !even_m || !even_n;
  const std::string mask = need_mask ? ", mask=(offs_m[:, None] < M) & (offs_n[None, :] < N)" : "";
  if (sk > 1) {
    body += "# partial sums of the K slices meet in an fp32 workspace\n";
    body += fmt::format("tl.atomic_add(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc{}, sem=\"relaxed\")\n", mask);
  } else {
    if (fused) {
      body += "# epilogue, fused: bias and activation on the fp32 accumulator\n";
      if (k.bias) body += "acc += tl.load(bias_ptr + offs_bn)[None, :].to(tl.float32)\n";
      if (k.act != "none") body += "acc = _act(acc)\n";
    }
    body += fmt::format("tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to({}){})\n", dt, mask);
  }
  std::string src = act_fn(fused || separate ? k.act : std::string("none"));
  src += subst(persistent ? kMatmulPersistent : kMatmulTile, {{"TILE_BODY", indent(body, persistent ? 8 : 4)}});
  if (separate || sk > 1) {
    src += R"PY(

@triton.jit
def epilogue_kernel(x_ptr, bias_ptr, c_ptr, N: tl.constexpr, TOTAL: tl.constexpr, BLOCK: tl.constexpr):
    # the epilogue as its own pass over C
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < TOTAL
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
)PY";
    if (k.bias) src += "    x += tl.load(bias_ptr + offs % N, mask=mask, other=0.0).to(tl.float32)\n";
    if (k.act != "none") src += "    x = _act(x)\n";
    src += fmt::format("    tl.store(c_ptr + offs, x.to({}), mask=mask)\n", dt);
  }
  if (a_copy || b_copy)
    src += R"PY(

@triton.jit
def transpose_kernel(src_ptr, dst_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, BLOCK: tl.constexpr):
    # dst[COLS, ROWS] = src[ROWS, COLS] transposed, one BLOCK x BLOCK tile per program
    offs_r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs_r[:, None] * COLS + offs_c[None, :], mask=(offs_r[:, None] < ROWS) & (offs_c[None, :] < COLS))
    tl.store(dst_ptr + offs_c[:, None] * ROWS + offs_r[None, :], tl.trans(x), mask=(offs_c[:, None] < COLS) & (offs_r[None, :] < ROWS))
)PY";
  const auto* A = k.role("A");
  const auto* B = k.role("B");
  const auto* C = k.role("C");
  const auto* bias = k.role("bias");
  std::string args;
  for (const auto& r : k.tensors) args += (args.empty() ? "" : ", ") + r.name;
  const std::string bias_arg = bias != nullptr ? bias->name : C->name;  // unused pointer when there is no bias
  const std::int64_t tiles = ((k.M + bm - 1) / bm) * ((k.N + bn - 1) / bn);
  const std::string common = fmt::format("M={}, N={}, K={}, BLOCK_M={}, BLOCK_N={}, BLOCK_K={}, GROUP_M={}, SPLIT_K={}", k.M, k.N, k.K,
                                         bm, bn, bk, gm, sk);
  const std::string tune = fmt::format("num_warps={}, num_stages={}", s.get("warps"), s.get("stages"));
  std::string launch = fmt::format("\n\n_workspace = {{}}\n\n\ndef launch({}):\n", args);
  std::string a_arg = A->name, b_arg = B->name;
  // a transposed contiguous copy of an operand (transpose_kernel, into a buffer kept between
  // calls); the copy runs on every call, so its cost is inside the timed call
  constexpr std::int64_t kTBlock = 64;
  auto copy = [&](const TensorRole* op, const char* key, std::int64_t rows, std::int64_t cols, std::string& arg) {
    launch += fmt::format("    {0} = _workspace.get(\"{0}\")\n    if {0} is None or {0}.device != {1}.device:\n", key, op->name);
    launch += fmt::format("        {0} = _workspace[\"{0}\"] = torch.empty(({2}, {3}), dtype={1}.dtype, device={1}.device)\n", key,
                          op->name, rows, cols);
    launch += fmt::format("    # {0} transposed: [{1}, {2}] -> [{2}, {1}], counted in the call's time\n", op->name, cols, rows);
    launch += fmt::format("    transpose_kernel[({}, {})]({}, {}, ROWS={}, COLS={}, BLOCK={}, num_warps=4)\n", (cols + kTBlock - 1) / kTBlock,
                          (rows + kTBlock - 1) / kTBlock, op->name, key, cols, rows, kTBlock);
    arg = key;
  };
  // A as read is [K, M] when a_t, else [M, K]; B as read is [N, K] when b_t, else [K, N]
  if (a_copy) copy(A, "a_t", a_t ? k.K : k.M, a_t ? k.M : k.K, a_arg);
  if (b_copy) copy(B, "b_t", b_t ? k.N : k.K, b_t ? k.K : k.N, b_arg);
  std::string out_ptr = C->name;
  if (sk > 1) {
    launch += fmt::format("    ws = _workspace.get(\"acc\")\n    if ws is None or ws.device != {}.device:\n", C->name);
    launch += fmt::format("        ws = _workspace[\"acc\"] = torch.empty(({}, {}), dtype=torch.float32, device={}.device)\n", k.M, k.N,
                          C->name);
    launch += "    ws.zero_()\n";
    out_ptr = "ws";
  }
  if (persistent) {
    const std::int64_t progs = std::min<std::int64_t>(t.sm_count, tiles);
    launch += fmt::format("    matmul_kernel[({},)]({}, {}, {}, {}, {}, NUM_PROGRAMS={}, {})\n", progs, a_arg, b_arg, bias_arg,
                          out_ptr, common, progs, tune);
  } else {
    launch += fmt::format("    matmul_kernel[({}, {})]({}, {}, {}, {}, {}, {})\n", tiles, sk, a_arg, b_arg, bias_arg, out_ptr,
                          common, tune);
  }
  if (sk > 1 || separate) {
    const std::int64_t total = k.M * k.N, block = 1024;
    launch += fmt::format("    epilogue_kernel[({},)]({}, {}, {}, N={}, TOTAL={}, BLOCK={}, num_warps=4)\n", (total + block - 1) / block,
                          sk > 1 ? "ws" : C->name, bias_arg, C->name, k.N, total, block);
  }
  return header(k, sched, t) + "\n" + src + launch;
}

// ---------------------------------------------------------------------------------------------
// row kernels: one program per ROWS rows; one pass when a block holds a whole row, else two
// passes over BLOCK_C-column chunks (statistics, then the normalised output).
std::string emit_row(const GpuKernel& k, const TritonSchedule& s, const GpuTarget& t, const std::string& sched) {
  const std::int64_t bc = s.get("block_c"), rows = s.get("rows", 1), warps = s.get("warps");
  const bool one_pass = s.get("passes", bc >= k.C ? 1 : 2) == 1;
  const bool two_d = rows > 1;
  const bool masked = k.C % bc != 0;
  const bool persistent = s.label("program", "row") == "persistent";
  const std::string dt = tl_dtype(k.dtype);
  // 1-D (one row) or 2-D ([ROWS, BLOCK_C]) spellings of the same code
  const std::string ax = two_d ? "axis=1" : "axis=0";
  auto st = [&](const std::string& x) { return two_d ? x + "[:, None]" : x; };   // a per-row statistic, broadcast
  auto cv = [&](const std::string& x) { return two_d ? x + "[None, :]" : x; };   // a per-column vector, broadcast
  const std::string shape = two_d ? "(ROWS, BLOCK_C)" : "(BLOCK_C,)";
  const bool wide = k.R * k.C >= (std::int64_t{1} << 31);
  const std::string group = persistent ? "rb" : "tl.program_id(0)";
  std::string b;
  b += two_d ? fmt::format("rows = {} * ROWS + tl.arange(0, ROWS)\n", group) : fmt::format("rows = {}\n", group);
  if (wide) b += "rows = rows.to(tl.int64)\n";
  const std::string base = two_d ? "rows[:, None] * C" : "rows * C";
  const bool has_gamma = k.row != RowOp::softmax, has_beta = k.row == RowOp::layernorm;
  const std::string cache = s.label("cache", "normal");
  const bool stream = cache == "stream", keep = cache == "keep";
  const bool store_stream = s.label("store", "normal") == "stream";
  // `last`: the final read of X (its L2 lines are not needed again); else pass 1's read, which
  // cache=keep holds in L2 for pass 2
  auto load = [&](const std::string& c, const std::string& other, bool last) {
    const std::string m = masked ? fmt::format(", mask={}, other={}", cv("(" + c + " < C)"), other) : "";
    std::string ev;
    if ((stream || keep) && last) ev = ", eviction_policy=\"evict_first\"";
    else if (keep && !last) ev = ", eviction_policy=\"evict_last\"";
    return fmt::format("tl.load(x_ptr + {} + {}{}{}).to(tl.float32)", base, cv(c), m, ev);
  };
  auto store = [&](const std::string& c, const std::string& v) {
    const std::string m = masked ? fmt::format(", mask={}", cv("(" + c + " < C)")) : "";
    return fmt::format("tl.store(y_ptr + {} + {}, ({}).to({}){}{})\n", base, cv(c), v, dt, m,
                       store_stream ? ", cache_modifier=\".cs\"" : "");
  };
  auto vec = [&](const std::string& ptr, const std::string& c) {
    const std::string m = masked ? fmt::format(", mask={} < C, other=0.0", c) : "";
    return fmt::format("tl.load({} + {}{}{}).to(tl.float32)", ptr, c, m, stream || keep ? ", eviction_policy=\"evict_last\"" : "");
  };
  auto out_expr = [&](const std::string& c) {
    switch (k.row) {
      case RowOp::softmax: return fmt::format("tl.exp(x - {}) / {}", st("mx"), st("den"));
      case RowOp::rmsnorm: return fmt::format("x * {} * {}", st("rstd"), cv(vec("gamma_ptr", c)));
      case RowOp::layernorm:
        return fmt::format("(x - {}) * {} * {} + {}", st("mean"), st("rstd"), cv(vec("gamma_ptr", c)), cv(vec("beta_ptr", c)));
    }
    return std::string();
  };
  if (one_pass) {
    b += "# one pass: the whole row is in registers\n";
    b += fmt::format("x = {}\n", load("cols", k.row == RowOp::softmax ? "-float(\"inf\")" : "0.0", true));
    if (k.row == RowOp::softmax) {
      b += fmt::format("mx = tl.max(x, {})\n", ax);
      b += fmt::format("den = tl.sum(tl.exp(x - {}), {})\n", st("mx"), ax);
    } else if (k.row == RowOp::rmsnorm) {
      b += fmt::format("rstd = tl.rsqrt(tl.sum(x * x, {}) / C + EPS)\n", ax);
    } else {
      b += fmt::format("mean = tl.sum(x, {}) / C\n", ax);
      if (masked) b += fmt::format("xc = tl.where({}, x - {}, 0.0)\n", cv("(cols < C)"), st("mean"));
      else b += fmt::format("xc = x - {}\n", st("mean"));
      b += fmt::format("rstd = tl.rsqrt(tl.sum(xc * xc, {}) / C + EPS)\n", ax);
    }
    b += store("cols", out_expr("cols"));
  } else {
    b += keep ? "# pass 1: row statistics over BLOCK_C-column chunks (elementwise partials, reduced once); X stays in L2\n"
              : "# pass 1: row statistics over BLOCK_C-column chunks (elementwise partials, reduced once)\n";
    if (k.row == RowOp::softmax) {
      b += fmt::format("m_part = tl.full({}, -1.0e30, tl.float32)\nl_part = tl.zeros({}, tl.float32)\n", shape, shape);
    } else {
      b += fmt::format("s1 = tl.zeros({}, tl.float32)\n", shape);
      if (k.row == RowOp::layernorm) b += fmt::format("s2 = tl.zeros({}, tl.float32)\n", shape);
    }
    b += "for c0 in range(0, C, BLOCK_C):\n    c = c0 + cols\n";
    b += fmt::format("    x = {}\n", load("c", k.row == RowOp::softmax ? "-float(\"inf\")" : "0.0", false));
    if (k.row == RowOp::softmax) {
      b += "    m_new = tl.maximum(m_part, x)\n    l_part = l_part * tl.exp(m_part - m_new) + tl.exp(x - m_new)\n    m_part = m_new\n";
    } else if (k.row == RowOp::rmsnorm) {
      b += "    s1 += x * x\n";
    } else {
      b += "    s1 += x\n    s2 += x * x\n";
    }
    if (k.row == RowOp::softmax) {
      b += fmt::format("mx = tl.max(m_part, {})\nden = tl.sum(l_part * tl.exp(m_part - {}), {})\n", ax, st("mx"), ax);
    } else if (k.row == RowOp::rmsnorm) {
      b += fmt::format("rstd = tl.rsqrt(tl.sum(s1, {}) / C + EPS)\n", ax);
    } else {
      b += fmt::format("mean = tl.sum(s1, {}) / C\nrstd = tl.rsqrt(tl.sum(s2, {}) / C - mean * mean + EPS)\n", ax, ax);
    }
    b += "# pass 2: the output\n";
    b += "for c0 in range(0, C, BLOCK_C):\n    c = c0 + cols\n";
    b += fmt::format("    x = {}\n", load("c", "0.0", true));
    b += "    " + store("c", out_expr("c"));
  }
  std::string body = "cols = tl.arange(0, BLOCK_C)\n";
  if (persistent) {
    body += "# persistent: NUM_PROGRAMS programs (as many as are resident at once) loop over the row groups\n";
    body += "for rb in range(tl.program_id(0), R // ROWS, NUM_PROGRAMS):\n" + indent(b, 4);
  } else {
    body += b;
  }
  std::string src = R"PY(
@triton.jit
def row_kernel(x_ptr, gamma_ptr, beta_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr,
               BLOCK_C: tl.constexpr, ROWS: tl.constexpr, EPS: tl.constexpr${PARAMS}):
    # ${WHAT} over the last dimension, ROWS rows per program
${BODY})PY";
  src = subst(src, {{"WHAT", std::string(to_string(k.row))},
                    {"PARAMS", persistent ? ", NUM_PROGRAMS: tl.constexpr" : ""},
                    {"BODY", indent(body, 4)}});
  const auto* X = k.role("X");
  const auto* Y = k.role("Y");
  const std::string g = has_gamma ? k.role("gamma")->name : X->name;
  const std::string be = has_beta ? k.role("beta")->name : X->name;
  std::string args;
  for (const auto& r : k.tensors) args += (args.empty() ? "" : ", ") + r.name;
  const std::int64_t progs = persistent ? std::min(k.R / rows, persistent_row_programs(t, warps)) : k.R / rows;
  std::string launch = fmt::format("\n\ndef launch({}):\n", args);
  launch += fmt::format("    row_kernel[({},)]({}, {}, {}, {}, R={}, C={}, BLOCK_C={}, ROWS={}, EPS={:.9g}{}, num_warps={}, num_stages={})\n",
                        progs, X->name, g, be, Y->name, k.R, k.C, bc, rows, k.eps > 0 ? k.eps : 0.0,
                        persistent ? fmt::format(", NUM_PROGRAMS={}", progs) : std::string(), warps, s.get("stages", 1));
  return header(k, sched, t) + "\n" + src + launch;
}

// ---------------------------------------------------------------------------------------------
// attention: flash attention forward (online softmax in base 2); causal rows split into the
// blocks left of the diagonal (no mask) and the diagonal blocks (masked).
constexpr std::string_view kAttention = R"PY(
@triton.jit
def _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n,
                QK_SCALE: tl.constexpr, D: tl.constexpr, MASKED: tl.constexpr):
    k = tl.load(k_ptrs + start_n * D)
    qk = tl.dot(q, k)
    if MASKED:
        qk = qk * QK_SCALE + tl.where(offs_m[:, None] >= start_n + offs_n[None, :], 0.0, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        qk = qk - m_ij[:, None]
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * QK_SCALE)
        qk = qk * QK_SCALE - m_ij[:, None]
    p = tl.math.exp2(qk)
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = tl.load(v_ptrs + start_n * D)
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_ij


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S: tl.constexpr, D: tl.constexpr, QK_SCALE: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, HEAVY_FIRST: tl.constexpr):
    # one program per BLOCK_M query rows of one (batch, head)
    if HEAVY_FIRST:  # causal rows further down have more blocks: start them first
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * S * D
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + base + offs_m[:, None] * D + offs_d[None, :])
    k_ptrs = k_ptr + base + offs_n[None, :] * D + offs_d[:, None]  # K^T tile [D, BLOCK_N]
    v_ptrs = v_ptr + base + offs_n[:, None] * D + offs_d[None, :]  # V tile [BLOCK_N, D]
    m_i = tl.zeros([BLOCK_M], tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    if CAUSAL:
        hi = start_m * BLOCK_M
    else:
        hi = S
    for start_n in range(0, hi, BLOCK_N):
        acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, QK_SCALE, D, False)
    if CAUSAL:
        for start_n in range(start_m * BLOCK_M, (start_m + 1) * BLOCK_M, BLOCK_N):
            acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, QK_SCALE, D, True)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * D + offs_d[None, :], acc.to(${DT}))
)PY";

std::string emit_attention(const GpuKernel& k, const TritonSchedule& s, const GpuTarget& t, const std::string& sched) {
  const std::int64_t bm = s.get("block_m"), bn = s.get("block_n");
  const bool heavy = k.causal && s.label("order", "heavy_first") == "heavy_first";
  std::string src = subst(kAttention, {{"DT", tl_dtype(k.dtype)}});
  std::string args;
  for (const auto& r : k.tensors) args += (args.empty() ? "" : ", ") + r.name;
  std::string launch = fmt::format("\n\ndef launch({}):\n", args);
  launch += fmt::format(
      "    attention_kernel[({}, {})]({}, {}, {}, {}, S={}, D={}, QK_SCALE={:.17g},  # scale * log2(e)\n"
      "                            BLOCK_M={}, BLOCK_N={}, CAUSAL={}, HEAVY_FIRST={}, num_warps={}, num_stages={})\n",
      k.S / bm, k.B * k.H, k.role("Q")->name, k.role("K")->name, k.role("V")->name, k.role("O")->name, k.S, k.D,
      k.scale * 1.4426950408889634, bm, bn, k.causal ? "True" : "False", heavy ? "True" : "False", s.get("warps"), s.get("stages"));
  return header(k, sched, t) + "\n" + src + launch;
}

}  // namespace

std::string emit_triton(const GpuKernel& k, const TritonSchedule& s, const GpuTarget& t) {
  std::string sched;
  for (const auto& [n, l] : s.labels) sched += (sched.empty() ? "" : " ") + n + "=" + l;
  switch (k.family) {
    case Family::matmul: return emit_matmul(k, s, t, sched);
    case Family::row: return emit_row(k, s, t, sched);
    case Family::attention: return emit_attention(k, s, t, sched);
  }
  return {};
}

}  // namespace kevo::gpu
