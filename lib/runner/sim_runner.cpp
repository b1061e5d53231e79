// SimRunner and the figures built on a simulated run: roofline, fraction of peak, the operator
// profile text, and the Chrome-trace / Perfetto timeline.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "kevo/core/error.hpp"
#include "kevo/core/hash.hpp"
#include "kevo/core/io.hpp"
#include "kevo/ir/analysis.hpp"
#include "kevo/runner/sim.hpp"
#include "sim_internal.hpp"

namespace kevo::runner {

using lower::Memory;
using lower::Opcode;
using lower::TileProgram;
using target::Target;

namespace {

const char* kClassNames[] = {"tensor", "vector", "scalar", "gpsimd", "dma"};

std::string human_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  if (b >= 1e3) return fmt::format("{:.1f} KB", b / 1e3);
  return fmt::format("{:.0f} B", b);
}

std::string human_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.3f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

// The dtype whose Tensor peak a product of operands `x` and `y` runs at, as the simulator runs
// it: fp32 when either is 32-bit, fp8 when both are fp8, else bf16.
ir::DType product_dtype(ir::DType x, ir::DType y) {
  if (ir::dtype_bytes(x) >= 4 || ir::dtype_bytes(y) >= 4) return ir::DType::fp32;
  return ir::is_fp8(x) && ir::is_fp8(y) ? ir::DType::fp8_e4m3 : ir::DType::bf16;
}

}  // namespace

const char* Roofline::limit() const noexcept {
  if (ns == tensor_ns) return "tensor";
  if (ns == memory_ns) return "memory";
  return ns == activation_ns ? "activation" : "engines";
}

Roofline roofline(const ir::Kernel* kernel, const TileProgram& p, const Target& t) {
  Roofline r;
  ir::DType cdt = ir::DType::bf16;
  bool have_dtype = false;
  double tensor_ns = 0;  // each contraction (or, without the kernel, each matmul) at the peak of its dtype
  const auto add_product = [&](ir::DType x, ir::DType y, double flops) {
    const ir::DType dt = product_dtype(x, y);
    if (!have_dtype) cdt = dt;
    have_dtype = true;
    if (const double pk = t.peak_tensor_flops(dt); pk > 0) tensor_ns += flops / pk * 1e9;
  };
  if (kernel != nullptr) {
    const ir::Analysis a = ir::analyze(*kernel);
    r.contraction_flops = a.contraction_flops;
    r.other_flops = a.flops - a.contraction_flops;
    r.min_hbm_bytes = a.min_hbm_bytes;
    r.elementwise_ops = a.elementwise_ops;
    r.activation_evals = a.activation_evals;
    for (std::size_t i = 0; i < kernel->ops.size(); ++i) {
      const ir::Op& op = kernel->ops[i];
      if (!ir::pe_product(op) || op.expr.args.size() != 2) continue;
      // the PE array runs a product at the fp32 rate when either operand is 32-bit (as the
      // simulator does), at the fp8 rate only when both are fp8; one peak for every contraction
      // made a small fp32 product ahead of a large bf16 one bound the bf16 one at a quarter of its
      // peak (313% of "peak")
      const ir::Tensor* x = kernel->tensor(op.expr.args[0].tensor);
      const ir::Tensor* y = kernel->tensor(op.expr.args[1].tensor);
      if (x != nullptr && y != nullptr) add_product(x->dtype, y->dtype, static_cast<double>(a.op_flops[i]));
    }
  } else {
    r.contraction_flops = p.stats.matmul_flops;
    r.other_flops = std::max<std::int64_t>(0, p.stats.flops - p.stats.matmul_flops);
    r.min_hbm_bytes = p.stats.hbm_bytes_read + p.stats.hbm_bytes_written;
    r.elementwise_ops = r.other_flops;
    for (const lower::Instr& in : p.instrs)
      if (in.op == Opcode::activation && ir::activation_only(in.fn)) r.activation_evals += in.dst.elems();
  }
  if (!have_dtype) {  // no kernel: each matmul of the program at its operands' rate
    const auto dtype_of = [&](const lower::AccessPattern& ap) {
      return ap.buffer >= 0 && static_cast<std::size_t>(ap.buffer) < p.buffers.size() ? p.buffers[static_cast<std::size_t>(ap.buffer)].dtype
                                                                                        : ir::DType::bf16;
    };
    for (const lower::Instr& in : p.instrs)
      if (in.op == Opcode::nc_matmul) add_product(dtype_of(in.src[0]), dtype_of(in.src[1]), static_cast<double>(in.flops));
  }
  r.peak_tensor_flops = t.peak_tensor_flops(cdt);
  if (tensor_ns > 0) {
    r.tensor_ns = tensor_ns;
    r.peak_tensor_flops = static_cast<double>(r.contraction_flops) / tensor_ns * 1e9;  // the contractions' combined rate
  } else if (r.peak_tensor_flops > 0) {
    r.tensor_ns = static_cast<double>(r.contraction_flops) / r.peak_tensor_flops * 1e9;
  }
  // element rates per ns, each engine at its faster width (a schedule may keep its temporaries in
  // either)
  const auto rate = [&](target::Engine e) {
    const target::EngineSpec& s = t.engine(e);
    return static_cast<double>(t.pmax) * std::max(s.elems_per_cycle_16bit, s.elems_per_cycle_32bit) * s.clock_ghz;
  };
  if (const double sr = rate(target::Engine::scalar); sr > 0)
    r.activation_ns = static_cast<double>(r.activation_evals) / sr;
  double ops_per_ns = 0;
  for (int e = 0; e < target::kNumEngines; ++e) {
    const double x = rate(static_cast<target::Engine>(e)) * kMaxOpsPerElement[e];
    ops_per_ns = t.host ? std::max(ops_per_ns, x) : ops_per_ns + x;
  }
  if (ops_per_ns > 0) r.engines_ns = static_cast<double>(r.elementwise_ops) / ops_per_ns;
  r.vector_ns = std::max(r.activation_ns, r.engines_ns);
  if (t.hbm_bytes_per_ns > 0) r.memory_ns = static_cast<double>(r.min_hbm_bytes) / t.hbm_bytes_per_ns;
  r.ns = std::max({r.tensor_ns, r.vector_ns, r.memory_ns});
  return r;
}

Measurement to_measurement(const SimResult& r, const TileProgram& p, const Target& t, const ir::Kernel* kernel) {
  Measurement m;
  m.status = Status::ok;
  m.samples_ns = {r.latency_ns};
  m.latency = summarize(m.samples_ns);
  const double lat = r.latency_ns > 0 ? r.latency_ns : 1.0;
  for (int e = 0; e < target::kNumEngines; ++e) {
    const double busy = r.engine_busy_ns[static_cast<std::size_t>(e)];
    m.engines.push_back({kClassNames[e], busy, busy / lat});
  }
  m.engines.push_back({"dma", r.dma_active_ns, r.dma_active_ns / lat});
  m.bytes_moved = r.hbm_bytes;
  const Roofline rf = roofline(kernel, p, t);
  m.roofline_ns = rf.ns;
  const bool contraction = rf.contraction_flops > 0 && rf.peak_tensor_flops > 0;
  if (r.latency_ns > 0) m.fraction_of_peak = contraction ? rf.tensor_ns / r.latency_ns : rf.ns / r.latency_ns;
  m.bottleneck = r.bottleneck;

  std::string prof;
  const char* bound = rf.limit();
  // a contraction not bound by the Tensor engine (a matrix-vector or dot product) has a low MFU
  // whatever its schedule: say how close it is to the bound that holds
  const std::string of_roofline = contraction && rf.ns > rf.tensor_ns && r.latency_ns > 0
                                      ? fmt::format("; {:.1f}% of the roofline", 100.0 * rf.ns / r.latency_ns)
                                      : std::string();
  prof += fmt::format("latency {} (simulated {}); roofline {} ({}-bound); {:.1f}% of peak{}\n", human_ns(r.latency_ns),
                      t.name, human_ns(rf.ns), bound, 100.0 * m.fraction_of_peak,
                      contraction ? " (Tensor-engine MFU" + of_roofline + ")" : std::string(" (fraction of roofline)"));
  double crit_total = 0;
  for (double c : r.critical_ns) crit_total += c;
  prof += fmt::format("bottleneck: {}; critical path:", r.bottleneck);
  for (std::size_t k = 0; k < r.critical_ns.size(); ++k)
    if (r.critical_ns[k] > 0) prof += fmt::format(" {} {:.0f}%", kClassNames[k], 100.0 * r.critical_ns[k] / std::max(crit_total, 1e-9));
  prof += "\nbusy:";
  for (const EngineUse& e : m.engines) prof += fmt::format(" {} {:.0f}%", e.engine, 100.0 * e.utilisation);
  std::size_t ndma = 0;
  for (std::uint8_t q : r.queue) ndma += q >= kFirstDmaQueue;
  prof += fmt::format("\nDMA: {} in {} instructions, {} descriptors (avg {:.0f} B), {:.0f}% bandwidth lost to small runs, {:.1f} GB/s achieved\n",
                      human_bytes(r.dma_bytes), ndma, r.dma_descriptors,
                      r.dma_descriptors > 0 ? r.dma_bytes / static_cast<double>(r.dma_descriptors) : 0.0,
                      r.dma_effective_bytes > 0 ? 100.0 * (1.0 - r.dma_bytes / r.dma_effective_bytes) : 0.0,
                      r.hbm_bytes / lat);
  if (!r.dma_tensors.empty()) {
    // which tensor's transfers cost the bandwidth: the largest bandwidth-equivalent bytes first
    std::vector<const SimResult::DmaTensor*> by(r.dma_tensors.size());
    for (std::size_t k = 0; k < by.size(); ++k) by[k] = &r.dma_tensors[k];
    std::stable_sort(by.begin(), by.end(), [](const auto* a, const auto* b) { return a->effective_bytes > b->effective_bytes; });
    prof += "DMA by tensor:";
    for (std::size_t k = 0; k < by.size(); ++k) {
      const SimResult::DmaTensor& d = *by[k];
      const std::int64_t copies = d.transfers - d.transposes;
      std::string what;
      if (d.transposes > 0) what = fmt::format("{} transpose{}", d.transposes, d.transposes == 1 ? "" : "s");
      if (copies > 0) what += fmt::format("{}{} cop{}", what.empty() ? "" : " + ", copies, copies == 1 ? "y" : "ies");
      prof += fmt::format("{} {} {} ({}, runs avg {:.0f} B, {:.0f}% of bandwidth)", k == 0 ? "" : ";", d.name, human_bytes(d.bytes), what,
                          d.descriptors > 0 ? d.bytes / static_cast<double>(d.descriptors) : 0.0,
                          d.effective_bytes > 0 ? 100.0 * d.bytes / d.effective_bytes : 100.0);
    }
    prof += "\n";
  }
  prof += fmt::format("SBUF peak {} KiB of {} KiB per partition; PSUM peak {} KiB of {} KiB\n",
                      r.peak_sbuf_bytes_per_partition / 1024, t.sbuf_bytes_per_partition / 1024,
                      r.peak_psum_bytes_per_partition / 1024, t.psum_bytes_per_partition / 1024);
  m.profile = std::move(prof);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Chrome trace

namespace {

void json_escape(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        else out += c;
    }
  }
}

}  // namespace

std::string trace_json(const TileProgram& p, const SimResult& r) {
  const std::size_t n = std::min(p.instrs.size(), r.start_ns.size());
  std::string out;
  out.reserve(256 + n * 140);
  out += "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"";
  json_escape(out, fmt::format("NeuronCore (simulated): {}", p.kernel_name));
  out += "\"}}";
  std::vector<std::uint8_t> used(r.queue_busy_ns.size(), 0);
  for (std::size_t i = 0; i < n; ++i)
    if (r.queue[i] < used.size()) used[r.queue[i]] = 1;
  for (std::size_t q = 0; q < used.size(); ++q) {
    if (!used[q]) continue;
    const std::string name = q < kFirstDmaQueue ? kClassNames[q] : fmt::format("dma.q{}", q - kFirstDmaQueue);
    out += fmt::format(",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}", q + 1, name);
    out += fmt::format(",\n{{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"sort_index\":{}}}}}", q + 1, q);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const lower::Instr& in = p.instrs[i];
    const std::size_t q = r.queue[i];
    std::string name(lower::to_string(in.op));
    if (in.group >= 0 && static_cast<std::size_t>(in.group) < p.group_names.size()) {
      name += ' ';
      name += p.group_names[static_cast<std::size_t>(in.group)];
    }
    out += ",\n{\"name\":\"";
    json_escape(out, name);
    out += fmt::format("\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.6f},\"dur\":{:.6f},\"args\":{{\"i\":{},\"done_us\":{:.6f}}}}}",
                       q < kFirstDmaQueue ? kClassNames[q] : "dma", q + 1, r.start_ns[i] / 1e3,
                       (r.issue_end_ns[i] - r.start_ns[i]) / 1e3, i, r.done_ns[i] / 1e3);
  }
  for (const detail::Occupancy& o : detail::occupancy(p, r)) {
    const char* cname = o.mem == Memory::sbuf ? "SBUF bytes/partition" : "PSUM bytes/partition";
    for (const auto& [tt, bytes] : o.points)
      out += fmt::format(",\n{{\"name\":\"{}\",\"ph\":\"C\",\"pid\":1,\"ts\":{:.6f},\"args\":{{\"bytes\":{}}}}}", cname, tt / 1e3, bytes);
  }
  out += "\n]}\n";
  return out;
}

void write_trace(const std::filesystem::path& path, const TileProgram& p, const SimResult& r) {
  write_file_atomic(path, trace_json(p, r));
}

// ---------------------------------------------------------------------------------------------
// SimRunner

Measurement SimRunner::measure_one(const Candidate& c) const {
  Measurement m;
  if (c.program == nullptr || c.target == nullptr) {
    m.status = Status::error;
    m.message = "sim: candidate without a program or target";
    return m;
  }
  try {
    const SimParams params = params_ ? *params_ : default_sim_params(*c.target);
    const SimResult r = simulate(*c.program, *c.target, params);
    return to_measurement(r, *c.program, *c.target, c.kernel);
  } catch (const std::exception& e) {
    m.status = Status::error;
    m.message = e.what();
    return m;
  }
}

std::vector<Measurement> SimRunner::measure(std::span<const Candidate> candidates) {
  std::vector<Measurement> out;
  out.reserve(candidates.size());
  for (const Candidate& c : candidates) out.push_back(measure_one(c));
  return out;
}

RunnerTraits SimRunner::traits() const {
  RunnerTraits t;
  t.identity = params_ ? fmt::format("sim:v{}:{}", detail::kModelVersion, hex64(params_->hash())) : fmt::format("sim:v{}:target", detail::kModelVersion);
  t.deterministic = true;
  t.thread_safety = ThreadSafety::constant;
  t.cost_seconds = 1e-3;
  t.checks_outputs = false;
  return t;
}

}  // namespace kevo::runner
