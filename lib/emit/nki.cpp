// TileProgram -> NKI Python. Buffers become nl.ndarray declarations (one per rotation slot of an
// on-chip buffer, so every access is an ordinary 2-D tile); access patterns become slices where a
// slice can say them (a partition range and one strided free run) and .ap(pattern=..., offset=...)
// otherwise; instructions become one nisa call each, in program order.
#include "kevo/emit/nki.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kevo/core/error.hpp"

namespace kevo::emit {

using lower::AccessPattern;
using lower::Instr;
using lower::Opcode;

std::string_view nki_dtype(ir::DType t) noexcept {
  switch (t) {
    case ir::DType::bf16: return "nl.bfloat16";
    case ir::DType::fp16: return "nl.float16";
    case ir::DType::fp32: return "nl.float32";
    case ir::DType::fp8_e4m3: return "nl.float8_e4m3";
    case ir::DType::fp8_e4m3fn: return "nl.float8_e4m3fn";
  }
  return "nl.float32";
}

std::string_view nki_op(ir::Fn f) noexcept {
  using ir::Fn;
  switch (f) {
    case Fn::add: return "nl.add";
    case Fn::sub: return "nl.subtract";
    case Fn::mul: return "nl.multiply";
    case Fn::div: return "nl.divide";
    case Fn::max: return "nl.maximum";
    case Fn::min: return "nl.minimum";
    case Fn::lt: return "nl.less";
    case Fn::le: return "nl.less_equal";
    case Fn::gt: return "nl.greater";
    case Fn::ge: return "nl.greater_equal";
    case Fn::eq: return "nl.equal";
    case Fn::ne: return "nl.not_equal";
    case Fn::exp: return "nl.exp";
    case Fn::log: return "nl.log";
    case Fn::tanh: return "nl.tanh";
    case Fn::gelu_tanh: return "nl.gelu_apprx_tanh";
    case Fn::gelu_erf: return "nl.gelu";
    case Fn::silu: return "nl.silu";
    case Fn::relu: return "nl.relu";
    case Fn::sigmoid: return "nl.sigmoid";
    case Fn::rsqrt: return "nl.rsqrt";
    case Fn::sqrt: return "nl.sqrt";
    case Fn::square: return "nl.square";
    case Fn::abs: return "nl.abs";
    case Fn::neg: return "nl.negative";
    case Fn::reciprocal: return "nl.reciprocal";
    case Fn::cast: return "nl.copy";
    case Fn::select: return "nl.where";
  }
  return "nl.copy";
}

std::string_view nisa_name(Opcode op) noexcept {
  return lower::to_string(op);  // the nki.isa names are the opcode names
}

namespace {

const std::set<std::string>& reserved() {
  static const std::set<std::string> r = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
      "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
      "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "nki", "nl", "nisa", "print", "range"};
  return r;
}

std::string identifier(std::string_view s) {
  std::string r;
  for (char c : s) r += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (r.empty() || std::isdigit(static_cast<unsigned char>(r[0]))) r = "t_" + r;
  if (reserved().count(r)) r += "_";
  return r;
}

std::string py_float(double v) {
  if (std::isnan(v)) return "float('nan')";
  if (std::isinf(v)) return v > 0 ? "float('inf')" : "float('-inf')";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

// iota's and affine_select's offset: an int32 in NKI (nki.isa.iota); kevo's index offsets are whole
std::string iota_offset(double v) {
  if (v == std::floor(v) && std::abs(v) < 2147483648.0) return fmt::format("{}", static_cast<long long>(v));
  return py_float(v);
}

std::string_view engine_name(target::Engine e) {
  switch (e) {
    case target::Engine::tensor: return "nisa.engine.tensor";
    case target::Engine::vector: return "nisa.engine.vector";
    case target::Engine::scalar: return "nisa.engine.scalar";
    case target::Engine::gpsimd: return "nisa.engine.gpsimd";
  }
  return "nisa.engine.vector";
}

std::string_view reduce_op(ir::ReduceOp r) {
  switch (r) {
    case ir::ReduceOp::max: return "nl.maximum";
    case ir::ReduceOp::min: return "nl.minimum";
    default: return "nl.add";
  }
}

class Printer {
 public:
  Printer(const lower::TileProgram& p, const ir::Kernel& k, const EmitOptions& opt) : p_(p), k_(k), opt_(opt) {}

  std::string run() {
    name_buffers();
    header();
    signature();
    declarations();
    body();
    footer();
    return std::move(out_);
  }

 private:
  const lower::TileProgram& p_;
  const ir::Kernel& k_;
  const EmitOptions& opt_;
  std::string out_;
  std::vector<std::string> names_;        // per buffer (on-chip: base name; slots add _s<i>)
  std::vector<std::uint8_t> written_;
  // on-chip buffers read as predicates: nki.isa.tensor_copy_predicated takes uint8/16/32 ones (the
  // lowering writes them 0 or 1 only, exact in any dtype)
  std::set<int> predicate_;
  std::vector<std::string> params_, outputs_;
  std::set<std::string> used_;

  std::string unique(std::string base) {
    std::string n = base;
    for (int i = 2; used_.count(n); ++i) n = fmt::format("{}_{}", base, i);
    used_.insert(n);
    return n;
  }

  void name_buffers() {
    written_.assign(p_.buffers.size(), 0);
    for (const auto& in : p_.instrs) {
      if (in.dst.buffer < 0 || static_cast<std::size_t>(in.dst.buffer) >= p_.buffers.size())
        throw Error(fmt::format("emit_nki: instruction writes buffer {} of {}", in.dst.buffer, p_.buffers.size()));
      written_[in.dst.buffer] = 1;
      if (in.writes_reduce_res()) {
        if (in.reduce_res().buffer < 0 || static_cast<std::size_t>(in.reduce_res().buffer) >= p_.buffers.size())
          throw Error(fmt::format("emit_nki: instruction writes buffer {} of {}", in.reduce_res().buffer, p_.buffers.size()));
        written_[in.reduce_res().buffer] = 1;
      }
      if (in.op == Opcode::tensor_copy_predicated && in.nsrc >= 1 && in.src[0].buffer >= 0 &&
          static_cast<std::size_t>(in.src[0].buffer) < p_.buffers.size())
        predicate_.insert(in.src[0].buffer);
      for (int s = 0; s < in.nsrc; ++s)
        if (in.src[s].buffer < 0 || static_cast<std::size_t>(in.src[s].buffer) >= p_.buffers.size())
          throw Error(fmt::format("emit_nki: instruction reads buffer {} of {}", in.src[s].buffer, p_.buffers.size()));
    }
    used_ = reserved();
    used_.insert("_kevo_tmp");
    names_.resize(p_.buffers.size());
    // kernel tensors keep their own names
    for (std::size_t b = 0; b < p_.buffers.size(); ++b) {
      const auto& buf = p_.buffers[b];
      if (buf.mem != lower::Memory::hbm || buf.tensor < 0) continue;
      if (static_cast<std::size_t>(buf.tensor) >= k_.tensors.size())
        throw Error(fmt::format("emit_nki: buffer '{}' refers to tensor {} of {}", buf.name, buf.tensor, k_.tensors.size()));
      names_[b] = unique(identifier(k_.tensors[buf.tensor].name));
    }
    for (std::size_t b = 0; b < p_.buffers.size(); ++b)
      if (names_[b].empty()) names_[b] = unique(identifier(p_.buffers[b].name.empty() ? fmt::format("buf{}", b) : p_.buffers[b].name));
  }

  void line(int indent, std::string_view s) {
    out_.append(static_cast<std::size_t>(indent) * 4, ' ');
    out_ += s;
    out_ += '\n';
  }

  void header() {
    line(0, "# Generated by kevo: a lowered tile program as an NKI kernel (straight-line; NKI unrolls loops anyway).");
    line(0, fmt::format("# kernel: {}", p_.kernel_name.empty() ? k_.name : p_.kernel_name));
    line(0, fmt::format("# target: {}", p_.target_name));
    if (p_.schedule_text.empty()) {
      line(0, "# schedule: (none)");
    } else {
      std::size_t pos = 0;
      bool first = true;
      while (pos <= p_.schedule_text.size()) {
        const auto nl = p_.schedule_text.find('\n', pos);
        const auto part = p_.schedule_text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        if (!part.empty() || first) line(0, fmt::format("# {}{}", first ? "schedule: " : "  ", part));
        first = false;
        if (nl == std::string::npos) break;
        pos = nl + 1;
      }
    }
    std::array<std::size_t, lower::kOpcodeCount> counts{};
    for (const auto& in : p_.instrs) ++counts[static_cast<std::size_t>(in.op)];
    std::string c;
    for (std::size_t o = 0; o < counts.size(); ++o)
      if (counts[o]) c += fmt::format("{}{} {}", c.empty() ? "" : ", ", nisa_name(static_cast<Opcode>(o)), counts[o]);
    line(0, fmt::format("# instructions: {} ({})", p_.instrs.size(), c));
    const auto& st = p_.stats;
    line(0, fmt::format("# sbuf {} B/partition, psum {} B/partition, hbm read {} B, written {} B, {} flops",
                        st.sbuf_bytes_per_partition, st.psum_bytes_per_partition, st.hbm_bytes_read, st.hbm_bytes_written,
                        st.flops));
    line(0, "# buffers: explicit, one nl.ndarray per rotation slot declared below; kevo simulated exactly these"
            " (no compiler rotation assumed)");
    line(0, "import nki");
    line(0, "import nki.language as nl");
    line(0, "import nki.isa as nisa");
    line(0, "");
    line(0, "");
  }

  int buffer_of_tensor(std::size_t t, bool want_written) const {
    for (std::size_t b = 0; b < p_.buffers.size(); ++b) {
      const auto& buf = p_.buffers[b];
      if (buf.mem == lower::Memory::hbm && buf.tensor == static_cast<int>(t) && (written_[b] != 0) == want_written)
        return static_cast<int>(b);
    }
    return -1;
  }

  void signature() {
    for (std::size_t t = 0; t < k_.tensors.size(); ++t) {
      if (k_.tensors[t].role != ir::Role::input) continue;
      const int b = buffer_of_tensor(t, false);
      params_.push_back(b >= 0 ? names_[b] : unique(identifier(k_.tensors[t].name)));
    }
    line(0, "@nki.jit");
    line(0, fmt::format("def {}({}):", opt_.function_name.empty() ? identifier(k_.name.empty() ? p_.kernel_name : k_.name)
                                                                    : identifier(opt_.function_name),
                        fmt::join(params_, ", ")));
  }

  static std::string shape_tuple(const std::vector<std::int64_t>& s) {
    if (s.size() == 1) return fmt::format("({},)", s[0]);
    return fmt::format("({})", fmt::join(s, ", "));
  }

  std::string slot_name(std::size_t b, std::int64_t slot) const {
    return p_.buffers[b].nbufs > 1 ? fmt::format("{}_s{}", names_[b], slot) : names_[b];
  }

  void declarations() {
    for (std::size_t t = 0; t < k_.tensors.size(); ++t) {
      if (k_.tensors[t].role != ir::Role::output) continue;
      const int b = buffer_of_tensor(t, true);
      const std::string name = b >= 0 ? names_[b] : unique(identifier(k_.tensors[t].name));
      outputs_.push_back(name);
      line(1, fmt::format("{} = nl.ndarray({}, dtype={}, buffer=nl.shared_hbm)", name, shape_tuple(k_.shape(k_.tensors[t])),
                          nki_dtype(k_.tensors[t].dtype)));
    }
    // a tensor the schedule sees in another shape (a long index split across partitions,
    // docs/SCHEDULE.md): the same memory, reshaped once (nki.tensor.reshape copies nothing)
    for (std::size_t b = 0; b < p_.buffers.size(); ++b) {
      const auto& buf = p_.buffers[b];
      if (buf.mem != lower::Memory::hbm || buf.tensor < 0 || static_cast<std::size_t>(buf.tensor) >= k_.tensors.size()) continue;
      const auto& kt = k_.tensors[static_cast<std::size_t>(buf.tensor)];
      if (kt.role == ir::Role::temp || k_.shape(kt) == buf.shape) continue;
      const std::string v = unique(names_[b] + "_view");
      line(1, fmt::format("{} = {}.reshape({})  # the schedule's view of {}", v, names_[b], shape_tuple(buf.shape), names_[b]));
      names_[b] = v;
    }
    for (std::size_t b = 0; b < p_.buffers.size(); ++b) {
      const auto& buf = p_.buffers[b];
      if (buf.mem == lower::Memory::hbm) {
        if (buf.tensor >= 0 && (k_.tensors[buf.tensor].role == ir::Role::input ||
                                k_.tensors[buf.tensor].role == ir::Role::output))
          continue;  // parameters and outputs are declared above
        line(1, fmt::format("{} = nl.ndarray({}, dtype={}, buffer=nl.private_hbm)  # scratch", names_[b],
                            shape_tuple(buf.shape), nki_dtype(buf.dtype)));
        continue;
      }
      const char* mem = buf.mem == lower::Memory::psum ? "nl.psum" : "nl.sbuf";
      for (int s = 0; s < buf.nbufs; ++s)
        line(1, fmt::format("{} = nl.ndarray(({}, {}), dtype={}, buffer={})", slot_name(b, s), buf.partitions,
                            buf.free_elems, predicate_.count(static_cast<int>(b)) ? std::string_view("nl.uint8") : nki_dtype(buf.dtype),
                            mem));
    }
  }

  // A view of an access pattern: a slice where one fits, else .ap().
  std::string view(const AccessPattern& a) const {
    const auto b = static_cast<std::size_t>(a.buffer);
    const auto& buf = p_.buffers[b];
    // free dims with size > 1, collapsed into one run if they are a single arithmetic progression
    std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, count), outermost first
    for (int d = 0; d < 3; ++d)
      if (a.free_size[d] > 1) dims.emplace_back(a.free_stride[d], a.free_size[d]);
    for (std::size_t i = dims.size(); i-- > 1;) {
      if (dims[i - 1].first == dims[i].first * dims[i].second && dims[i].first != 0) {
        dims[i].second *= dims[i - 1].second;
        dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(i - 1));
      }
    }
    std::int64_t run_n = 1, run_s = 1;
    bool run = dims.size() <= 1;
    if (dims.size() == 1) {
      run_s = dims[0].first;
      run_n = dims[0].second;
      run = run_s > 0;
    }
    if (buf.mem != lower::Memory::hbm) {
      const auto [base, off] = base_of(a);
      const std::int64_t p0 = buf.free_elems > 0 ? off / buf.free_elems : 0, f0 = buf.free_elems > 0 ? off % buf.free_elems : 0;
      const bool rows_ok = a.part_count == 1 || a.part_stride == buf.free_elems;
      const std::int64_t f_end = f0 + (run_n - 1) * run_s + 1;
      if (run && rows_ok && p0 + a.part_count <= buf.partitions && f_end <= buf.free_elems) {
        if (run_s == 1) return fmt::format("{}[{}:{}, {}:{}]", base, p0, p0 + a.part_count, f0, f0 + run_n);
        return fmt::format("{}[{}:{}, {}:{}:{}]", base, p0, p0 + a.part_count, f0, f_end, run_s);
      }
      return ap_call(base, a, off);
    }
    // HBM: a 2-D tensor read as rows on partitions and a column run
    if (buf.shape.size() == 2 && run && (a.part_count == 1 || a.part_stride == buf.shape[1]) && buf.shape[1] > 0) {
      const std::int64_t r0 = a.offset / buf.shape[1], c0 = a.offset % buf.shape[1];
      const std::int64_t c_end = c0 + (run_n - 1) * run_s + 1;
      if (c_end <= buf.shape[1] && r0 + a.part_count <= buf.shape[0]) {
        if (run_s == 1) return fmt::format("{}[{}:{}, {}:{}]", names_[b], r0, r0 + a.part_count, c0, c0 + run_n);
        return fmt::format("{}[{}:{}, {}:{}:{}]", names_[b], r0, r0 + a.part_count, c0, c_end, run_s);
      }
    }
    return ap_call(names_[b], a, a.offset);
  }

  // An access pattern with every free dim kept (no slice, no collapsing): the 3-D operands of
  // a 3-D dma_transpose.
  std::string pattern_view(const AccessPattern& a) const {
    const auto [base, off] = base_of(a);
    return ap_call(base, a, off);
  }

  // The Python name an access pattern is written against (an HBM tensor, or the rotation slot
  // of an on-chip buffer it falls in) and its offset there.
  std::pair<std::string, std::int64_t> base_of(const AccessPattern& a) const {
    const auto b = static_cast<std::size_t>(a.buffer);
    const auto& buf = p_.buffers[b];
    if (buf.mem == lower::Memory::hbm) return {names_[b], a.offset};
    const std::int64_t slot_elems = std::int64_t{buf.partitions} * buf.free_elems;
    const std::int64_t slot = slot_elems > 0 ? a.offset / slot_elems : 0;
    return {slot_name(b, std::min<std::int64_t>(slot, buf.nbufs - 1)), a.offset - slot * slot_elems};
  }

  // nki.isa.dma_transpose: 2-D, 3-D with permutation (2, 1, 0): src [a, b, c] -> dst [c, b, a], or
  // 4-D with (3, 1, 2, 0): src [a, b, c, d] -> dst [d, b, c, a]
  // (docs/TILE_PROGRAM.md); the lowering writes dst's (b, a) free dims as one run, split here.
  std::string dma_transpose(const Instr& in) const {
    const AccessPattern& s = in.src[0];
    const std::int64_t c = in.dst.part_count;
    if (c <= 0 || s.free_elems() == c) return fmt::format("nisa.dma_transpose(dst={}, src={})", view(in.dst), view(s));
    const std::int64_t bdim = s.free_elems() / c, adim = s.part_count;
    AccessPattern d = in.dst;
    if (d.free_size[0] == 1 && d.free_size[1] == 1 && d.free_size[2] == bdim * adim) {
      const std::int32_t st = d.free_stride[2];
      d.free_size = {1, static_cast<std::int32_t>(bdim), static_cast<std::int32_t>(adim)};
      d.free_stride = {0, static_cast<std::int32_t>(adim * st), st};
    }
    // a source with three free dims (the interleave_all block transpose: [a, b, c, d] -> [d, b, c, a])
    int src_free = 0;
    for (const auto n : s.free_size) src_free += n > 1 ? 1 : 0;
    const char* axes = src_free == 3 && s.part_count > 1 ? "(3, 1, 2, 0)" : "(2, 1, 0)";
    return fmt::format("nisa.dma_transpose(dst={}, src={}, axes={})", pattern_view(d), pattern_view(s), axes);
  }

  static std::string ap_call(const std::string& base, const AccessPattern& a, std::int64_t offset) {
    std::string pat = fmt::format("[[{}, {}]", a.part_stride, a.part_count);
    for (int d = 0; d < 3; ++d)
      if (a.free_size[d] > 1 || (d == 2 && a.free_elems() == 1)) pat += fmt::format(", [{}, {}]", a.free_stride[d], a.free_size[d]);
    pat += "]";
    return fmt::format("{}.ap(pattern={}, offset={})", base, pat, offset);
  }

  std::string engine_arg(const Instr& in) const {
    if (!opt_.engine_args) return "";
    return fmt::format(", engine={}", engine_name(in.at.engine));
  }

  void body() {
    int group = -2;
    for (std::size_t i = 0; i < p_.instrs.size(); ++i) {
      const Instr& in = p_.instrs[i];
      if (opt_.group_comments && in.group != group) {
        group = in.group;
        if (group >= 0 && static_cast<std::size_t>(group) < p_.group_names.size())
          line(1, fmt::format("# nest {}: {}", group, p_.group_names[group]));
        else if (group >= 0)
          line(1, fmt::format("# nest {}", group));
      }
      instruction(in);
    }
  }

  void instruction(const Instr& in) {
    const std::string dst = view(in.dst);
    auto src = [&](int s) { return view(in.src[s]); };
    switch (in.op) {
      case Opcode::dma_copy: line(1, fmt::format("nisa.dma_copy(dst={}, src={})", dst, src(0))); break;
      case Opcode::dma_transpose: line(1, dma_transpose(in)); break;
      case Opcode::nc_matmul:
        // a tile of the PE array (Instr::pe_rows, pe_cols): nki.isa.nc_matmul's tiling mode
        line(1, fmt::format("nisa.nc_matmul(dst={}, stationary={}, moving={}, accumulate={}{})", dst, src(0), src(1),
                            in.accumulate ? "True" : "False",
                            in.pe_rows == 0 && in.pe_cols == 0
                                ? std::string()
                                : fmt::format(", tile_position=({}, {}), tile_size=({}, {})", static_cast<int>(in.pe_row0),
                                              static_cast<int>(in.pe_col0), in.pe_rows == 0 ? 128 : static_cast<int>(in.pe_rows),
                                              in.pe_cols == 0 ? 128 : static_cast<int>(in.pe_cols))));
        break;
      case Opcode::nc_transpose:
        line(1, fmt::format("nisa.nc_transpose(dst={}, data={}{})", dst, src(0), engine_arg(in)));
        break;
      case Opcode::activation: {
        std::string args = fmt::format("dst={}, op={}, data={}", dst, nki_op(in.fn), src(0));
        if (in.nsrc >= 2) args += fmt::format(", bias={}", src(1));
        else if (in.imm0 != 0.0) args += fmt::format(", bias={}", py_float(in.imm0));
        if (in.scale != 1.0) args += fmt::format(", scale={}", py_float(in.scale));
        if (in.writes_reduce_res())
          args += fmt::format(", reduce_op=nl.add, reduce_res={}, reduce_cmd=nisa.reduce_cmd.reset_reduce", view(in.reduce_res()));
        line(1, fmt::format("nisa.activation({})", args));
        break;
      }
      case Opcode::tensor_tensor:
        line(1, fmt::format("nisa.tensor_tensor(dst={}, data1={}, data2={}, op={}{})", dst, src(0), src(1), nki_op(in.fn),
                            engine_arg(in)));
        break;
      case Opcode::tensor_scalar: {
        std::string args = fmt::format("dst={}, data={}, op0={}, operand0={}", dst, src(0), nki_op(in.fn),
                                       in.nsrc >= 2 ? src(1) : py_float(in.imm0));
        if (in.reverse0) args += ", reverse0=True";
        if (in.has_op1)
          args += fmt::format(", op1={}, operand1={}", nki_op(in.fn1), in.nsrc >= 3 ? src(2) : py_float(in.imm1));
        line(1, fmt::format("nisa.tensor_scalar({}{})", args, engine_arg(in)));
        break;
      }
      case Opcode::scalar_tensor_tensor: {
        std::string args = fmt::format("dst={}, data={}, op0={}, operand0={}", dst, src(0), nki_op(in.fn),
                                       in.nsrc >= 3 ? src(2) : py_float(in.imm0));
        if (in.reverse0) args += ", reverse0=True";
        args += fmt::format(", op1={}, operand1={}", nki_op(in.fn1), src(1));
        line(1, fmt::format("nisa.scalar_tensor_tensor({})", args));
        break;
      }
      case Opcode::tensor_reduce: {
        // reduce the innermost reduce_free_dims free axes of a rank-4 .ap() view, or axis 1 of a
        // 2-D slice when every free element is reduced
        const AccessPattern& s = in.src[0];
        const int r = in.reduce_free_dims;
        std::int64_t outer = 1;
        for (int d = 0; d < 3 - r; ++d) outer *= s.free_size[d];
        std::string data, axis;
        if (outer == 1) {
          data = src(0);
          axis = data.find(".ap(") == std::string::npos ? "1" : reduce_axes(s, r);
        } else {
          data = full_ap(s);
          axis = "(" + std::string(r == 1 ? "3," : r == 2 ? "2, 3" : "1, 2, 3") + ")";
        }
        const std::string mean = in.reduce == ir::ReduceOp::mean ? "  # mean: sum, then scale by 1/n" : "";
        if (in.accumulate) {
          // NKI's tensor_reduce overwrites: reduce into a temporary, then combine with dst
          line(1, fmt::format("_kevo_tmp = nl.ndarray({}, dtype=nl.float32, buffer=nl.sbuf)", fmt::format("({}, {})", in.dst.part_count, in.dst.free_elems())));
          line(1, fmt::format("nisa.tensor_reduce(dst=_kevo_tmp, op={}, data={}, axis={}, keepdims=False){}", reduce_op(in.reduce), data,
                              axis, mean));
          line(1, fmt::format("nisa.tensor_tensor(dst={}, data1={}, data2=_kevo_tmp, op={})  # accumulate", dst, dst,
                              reduce_op(in.reduce)));
        } else {
          line(1, fmt::format("nisa.tensor_reduce(dst={}, op={}, data={}, axis={}, keepdims=False){}", dst, reduce_op(in.reduce),
                              data, axis, mean));
        }
        break;
      }
      case Opcode::tensor_copy: line(1, fmt::format("nisa.tensor_copy(dst={}, src={}{})", dst, src(0), engine_arg(in))); break;
      case Opcode::memset: line(1, fmt::format("nisa.memset(dst={}, value={})", dst, py_float(in.imm0))); break;
      case Opcode::iota:
        line(1, fmt::format("nisa.iota(dst={}, pattern={}, offset={}, channel_multiplier={})", dst, iota_pattern(in), iota_offset(in.imm0),
                            in.iota_part_coef));
        break;
      case Opcode::affine_select:
        line(1, fmt::format("nisa.affine_select(dst={}, pattern={}, offset={}, channel_multiplier={}, on_true_tile={}, "
                            "on_false_value={}, cmp_op={})",
                            dst, iota_pattern(in), iota_offset(in.imm0), in.iota_part_coef, src(0), py_float(in.imm1), nki_op(in.fn)));
        break;
      case Opcode::bn_stats: line(1, fmt::format("nisa.bn_stats(dst={}, data={})", dst, src(0))); break;
      case Opcode::bn_aggr: line(1, fmt::format("nisa.bn_aggr(dst={}, data={})", dst, src(0))); break;
      case Opcode::tensor_copy_predicated: {
        std::string from = in.nsrc >= 2 ? src(1) : py_float(in.imm0);
        // NKI's source and destination share a dtype: a source of another is converted first
        if (in.nsrc >= 2 && p_.buffers[static_cast<std::size_t>(in.src[1].buffer)].dtype !=
                                p_.buffers[static_cast<std::size_t>(in.dst.buffer)].dtype) {
          line(1, fmt::format("_kevo_tmp = nl.ndarray(({}, {}), dtype={}, buffer=nl.sbuf)", in.dst.part_count, in.dst.free_elems(),
                              nki_dtype(p_.buffers[static_cast<std::size_t>(in.dst.buffer)].dtype)));
          line(1, fmt::format("nisa.tensor_copy(dst=_kevo_tmp, src={})", from));
          from = "_kevo_tmp";
        }
        line(1, fmt::format("nisa.tensor_copy_predicated(dst={}, src={}, predicate={})", dst, from, src(0)));
        break;
      }
    }
  }

  // nki.isa.iota's (and affine_select's) pattern: [[step, num], ...] over dst's free dims
  static std::string iota_pattern(const Instr& in) {
    std::string pat = "[";
    bool first = true;
    for (int d = 0; d < 3; ++d) {
      if (in.dst.free_size[d] == 1 && !(d == 2 && first)) continue;
      pat += fmt::format("{}[{}, {}]", first ? "" : ", ", in.iota_free_coef[d], in.dst.free_size[d]);
      first = false;
    }
    return pat + "]";
  }

  std::string full_ap(const AccessPattern& a) const {
    const auto [base, off] = base_of(a);
    return full_ap_on(base, a, off);
  }
  static std::string full_ap_on(const std::string& base, const AccessPattern& a, std::int64_t off) {
    return fmt::format("{}.ap(pattern=[[{}, {}], [{}, {}], [{}, {}], [{}, {}]], offset={})", base, a.part_stride, a.part_count,
                       a.free_stride[0], a.free_size[0], a.free_stride[1], a.free_size[1], a.free_stride[2], a.free_size[2],
                       off);
  }
  static std::string reduce_axes(const AccessPattern& a, int r) {
    // axes of the compact .ap() view (partition + free dims of size > 1) that are reduced
    int rank = 1;
    std::vector<int> red;
    for (int d = 0; d < 3; ++d) {
      const bool kept = a.free_size[d] > 1 || (d == 2 && a.free_elems() == 1);
      if (!kept) continue;
      if (d >= 3 - r) red.push_back(rank);
      ++rank;
    }
    if (red.size() == 1) return fmt::format("{}", red[0]);
    return fmt::format("({})", fmt::join(red, ", "));
  }

  void footer() {
    if (outputs_.empty()) line(1, "return None");
    else if (outputs_.size() == 1) line(1, fmt::format("return {}", outputs_[0]));
    else line(1, fmt::format("return ({})", fmt::join(outputs_, ", ")));
  }
};

}  // namespace

std::string emit_nki(const lower::TileProgram& p, const ir::Kernel& k, const EmitOptions& opt) {
  return Printer(p, k, opt).run();
}

}  // namespace kevo::emit
