// Differential testing of the lowering against the reference evaluator, and shrinking of
// disagreeing cases (include/kevo/verify/differential.hpp).
#include "kevo/verify/differential.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "kevo/core/error.hpp"
#include "kevo/core/rng.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/schedule/detail/structure.hpp"
#include "kevo/verify/interpreter.hpp"

namespace kevo::verify {

std::string_view to_string(DiffVerdict v) noexcept {
  switch (v) {
    case DiffVerdict::agree: return "agree";
    case DiffVerdict::rejected: return "rejected";
    case DiffVerdict::disagree: return "disagree";
    case DiffVerdict::underivable: return "underivable";
  }
  return "?";
}

DiffResult differential(const schedule::ScheduleSpace& space, const Genome& g, std::uint64_t seed, int trials) {
  DiffResult r;
  std::optional<Expected<lower::TileProgram, Invalid>> prog;
  try {
    prog.emplace(lower::lower(space, g));
  } catch (const std::exception& e) {
    r.verdict = DiffVerdict::disagree;
    r.reason = fmt::format("lowering threw: {}", e.what());
    r.failure = "lowering_threw";
    return r;
  }
  if (!*prog) {
    r.verdict = DiffVerdict::rejected;
    r.reason = (*prog).error().str();
    return r;
  }
  r.instructions = (**prog).instrs.size();
  try {
    const auto c = check_program(space.kernel(), **prog, seed, trials);
    if (!c.ok) {
      r.verdict = DiffVerdict::disagree;
      r.reason = c.message;
      r.failure = c.order < 0 ? std::string(to_string(c.failure))
                              : fmt::format("{}@{}", to_string(c.failure), c.order == 0 ? "program" : "adversarial");
    }
  } catch (const std::exception& e) {
    r.verdict = DiffVerdict::disagree;
    r.reason = fmt::format("interpreting the program threw: {}", e.what());
    r.failure = "oracle_threw";
  }
  return r;
}

Genome transfer_genome(const schedule::ScheduleSpace& a, const Genome& from, const schedule::ScheduleSpace& b) {
  const Space& sa = a.genes();
  const Space& sb = b.genes();
  Genome g = b.default_genome();
  for (std::size_t i = 0; i < sb.size(); ++i) {
    const Gene& gb = sb.gene(i);
    const auto ia = sa.find(gb.name);
    if (!ia) continue;
    const Gene& ga = sa.gene(*ia);
    if (ga.kind != gb.kind) continue;
    const auto src = sa.slots(from, *ia);
    auto dst = sb.slots(g, i);
    if (gb.kind == GeneKind::permutation) {
      if (ga.labels.size() != gb.labels.size()) continue;
      std::vector<std::int32_t> perm;
      for (auto s : src) {
        const auto it = std::find(gb.labels.begin(), gb.labels.end(), ga.labels[static_cast<std::size_t>(s)]);
        if (it == gb.labels.end()) break;
        perm.push_back(static_cast<std::int32_t>(it - gb.labels.begin()));
      }
      if (perm.size() == dst.size()) std::copy(perm.begin(), perm.end(), dst.begin());
      continue;
    }
    const auto& lab = ga.labels[static_cast<std::size_t>(src[0])];
    const auto it = std::find(gb.labels.begin(), gb.labels.end(), lab);
    if (it != gb.labels.end()) dst[0] = static_cast<std::int32_t>(it - gb.labels.begin());
  }
  return g;
}

namespace {

void reads_of(const ir::Expr& e, std::set<std::string>& out) {
  if (e.kind == ir::Expr::Kind::access) out.insert(e.tensor);
  for (const auto& a : e.args) reads_of(a, out);
}

// The kernel through its text: canonical and checked, or nullopt when the edit broke it.
std::optional<ir::Kernel> recheck(const ir::Kernel& k) {
  auto p = ir::parse_kernel(ir::print_kernel(k), "<shrink>");
  if (!p) return std::nullopt;
  return *p;
}

// Drops tensors nothing reads or writes any more, and temps nothing reads (with their ops).
void prune(ir::Kernel& k) {
  bool changed = true;
  while (changed) {
    changed = false;
    std::set<std::string> read;
    for (const auto& op : k.ops) reads_of(op.expr, read);
    for (std::size_t i = k.ops.size(); i-- > 0;) {
      const auto* t = k.tensor(k.ops[i].out);
      if (t && t->role == ir::Role::temp && !read.count(k.ops[i].out)) {
        k.ops.erase(k.ops.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
      }
    }
    std::set<std::string> written;
    for (const auto& op : k.ops) written.insert(op.out);
    for (std::size_t i = k.tensors.size(); i-- > 0;) {
      const auto& t = k.tensors[i];
      const bool used = t.role == ir::Role::input ? read.count(t.name) > 0 : written.count(t.name) > 0;
      if (!used) {
        k.tensors.erase(k.tensors.begin() + static_cast<std::ptrdiff_t>(i));
        changed = true;
      }
    }
  }
  std::set<std::string> used_dims;
  for (const auto& t : k.tensors) used_dims.insert(t.dims.begin(), t.dims.end());
  std::erase_if(k.dims, [&](const ir::Dim& d) { return !used_dims.count(d.name); });
}

// Smaller kernels: each op removed (an output: when another output remains; a temp: its tensor
// becomes an input the later ops read), each dimension made smaller.
std::vector<ir::Kernel> smaller_kernels(const ir::Kernel& k) {
  std::vector<ir::Kernel> out;
  const auto outputs = std::count_if(k.tensors.begin(), k.tensors.end(), [](const ir::Tensor& t) { return t.role == ir::Role::output; });
  for (std::size_t i = 0; i < k.ops.size(); ++i) {
    if (k.ops.size() < 2) break;
    ir::Kernel c = k;
    const auto ti = std::find_if(c.tensors.begin(), c.tensors.end(), [&](const ir::Tensor& x) { return x.name == c.ops[i].out; });
    if (ti == c.tensors.end()) continue;
    ir::Tensor* t = &*ti;
    if (t->role == ir::Role::output) {
      if (outputs < 2) continue;
      const std::string name = t->name;
      c.ops.erase(c.ops.begin() + static_cast<std::ptrdiff_t>(i));
      std::set<std::string> read;
      for (const auto& op : c.ops) reads_of(op.expr, read);
      if (read.count(name)) {  // later ops read it: it becomes an input
        for (auto& tt : c.tensors)
          if (tt.name == name) tt.role = ir::Role::input;
      }
    } else {
      t->role = ir::Role::input;
      c.ops.erase(c.ops.begin() + static_cast<std::ptrdiff_t>(i));
    }
    // inputs first, in the order the kernel declares tensors (inputs, outputs, temps)
    std::stable_partition(c.tensors.begin(), c.tensors.end(), [](const ir::Tensor& x) { return x.role == ir::Role::input; });
    prune(c);
    if (c.ops.empty()) continue;
    if (auto r = recheck(c)) out.push_back(std::move(*r));
  }
  for (std::size_t d = 0; d < k.dims.size(); ++d) {
    const std::int64_t n = k.dims[d].size;
    std::vector<std::int64_t> sizes;
    for (std::int64_t s : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, std::int64_t{5}, std::int64_t{8},
                           std::int64_t{16}, std::int64_t{17}, std::int64_t{32}, std::int64_t{33}, n / 2, n - 1})
      if (s >= 1 && s < n && std::find(sizes.begin(), sizes.end(), s) == sizes.end()) sizes.push_back(s);
    std::sort(sizes.begin(), sizes.end());
    for (auto s : sizes) {
      ir::Kernel c = k;
      c.dims[d].size = s;
      if (auto r = recheck(c)) out.push_back(std::move(*r));
    }
  }
  return out;
}

std::size_t kernel_size(const ir::Kernel& k) {
  std::size_t elems = 0;
  for (const auto& t : k.tensors) elems += static_cast<std::size_t>(k.elements(t));
  return k.ops.size() * 1'000'000'000ULL + elems;
}

}  // namespace

namespace {
std::optional<DiffResult> differential_of(const DiffCase& c, const target::Target& target, std::uint64_t seed) {
  const auto space = schedule::ScheduleSpace::try_derive(c.kernel, target);
  if (!space) return std::nullopt;
  auto g = space->parse(c.schedule, "<case>");
  if (!g) return std::nullopt;
  return differential(*space, *g, seed);
}
}  // namespace

bool disagrees(const DiffCase& c, const target::Target& target, std::uint64_t seed) {
  const auto r = differential_of(c, target, seed);
  return r && r->verdict == DiffVerdict::disagree;
}

bool disagrees_as(const DiffCase& c, const target::Target& target, std::uint64_t seed, std::string_view failure) {
  const auto r = differential_of(c, target, seed);
  return r && r->verdict == DiffVerdict::disagree && r->failure == failure;
}

DiffCase shrink(DiffCase c, const target::Target& target, const std::function<bool(const DiffCase&)>& fails,
                int max_attempts, ShrinkStats* stats) {
  ShrinkStats st;
  const auto attempt = [&](const DiffCase& cand) {
    if (st.attempts >= max_attempts) return false;
    ++st.attempts;
    if (!fails(cand)) return false;
    ++st.accepted;
    return true;
  };
  bool progress = true;
  while (progress && st.attempts < max_attempts) {
    progress = false;
    // 1. genes back to the default schedule's values, one at a time
    if (const auto space = schedule::ScheduleSpace::try_derive(c.kernel, target)) {
      auto g = space->parse(c.schedule, "<case>");
      if (g) {
        const Genome def = space->default_genome();
        const Space& sp = space->genes();
        for (std::size_t i = 0; i < sp.size() && st.attempts < max_attempts; ++i) {
          const auto cur = sp.slots(*g, i);
          const auto want = sp.slots(def, i);
          if (std::equal(cur.begin(), cur.end(), want.begin())) continue;
          Genome h = *g;
          auto dst = sp.slots(h, i);
          std::copy(want.begin(), want.end(), dst.begin());
          DiffCase cand{c.kernel, c.target, space->print(h)};
          if (attempt(cand)) {
            c = std::move(cand);
            *g = h;
            progress = true;
          }
        }
        c.schedule = space->print(*g);
      }
    }
    // 2. smaller kernels, the schedule carried over gene by gene
    const auto space = schedule::ScheduleSpace::try_derive(c.kernel, target);
    if (!space) break;
    auto pg = space->parse(c.schedule, "<case>");
    if (!pg) break;
    const Genome g = *pg;
    auto cands = smaller_kernels(c.kernel);
    std::stable_sort(cands.begin(), cands.end(),
                     [](const ir::Kernel& x, const ir::Kernel& y) { return kernel_size(x) < kernel_size(y); });
    for (const auto& k : cands) {
      if (st.attempts >= max_attempts) break;
      const auto s2 = schedule::ScheduleSpace::try_derive(k, target);
      if (!s2) continue;  // a smaller kernel kevo cannot schedule is no candidate
      DiffCase cand{k, c.target, s2->print(transfer_genome(*space, g, *s2))};
      if (attempt(cand)) {
        c = std::move(cand);
        progress = true;
        break;  // the space changed: start over from the genes
      }
    }
  }
  if (stats) *stats = st;
  return c;
}

void CampaignStats::merge(const CampaignStats& o) {
  cases += o.cases;
  pairs += o.pairs;
  agree += o.agree;
  rejected += o.rejected;
  disagree += o.disagree;
  underivable += o.underivable;
  instructions += o.instructions;
  large += o.large;
  for (const auto& [k, v] : o.reject_codes) reject_codes[k] += v;
  for (const auto& [k, v] : o.underivable_why) underivable_why[k] += v;
  failures.insert(failures.end(), o.failures.begin(), o.failures.end());
}

std::string CampaignStats::summary() const {
  return fmt::format("{} cases, {} pairs: {} agree, {} rejected, {} disagree; {} kernels underivable{}", cases, pairs, agree,
                     rejected, disagree, underivable, large > 0 ? fmt::format("; {} genomes skipped as too large", large) : "");
}

CampaignStats run_campaign(const CampaignOptions& opt) {
  std::vector<target::Target> targets = opt.targets;
  if (targets.empty())
    for (const char* n : {"trn1", "trn2", "trn3"}) {
      auto t = target::load_target(n);
      if (!t) throw Error(t.error().headline());
      targets.push_back(*t);
    }
  CampaignStats st;
  for (std::uint64_t i = opt.first; i < opt.first + opt.count; ++i) {
    Rng rng(opt.seed, i);
    ++st.cases;
    const ir::Kernel k = ir::random_kernel(rng, opt.kernel);
    const target::Target& t = targets[rng.below(targets.size())];
    auto space = schedule::ScheduleSpace::try_derive(k, t);
    if (!space) {
      ++st.underivable;
      // the reason without the op's name: "no_layout: has no loop index to lay out"
      std::string why = fmt::format("{}: {}", space.error().code(), space.error().message);
      if (why.size() > 72) why.resize(72);
      ++st.underivable_why[why];
      continue;
    }
    for (int gi = 0; gi < opt.genomes_per_kernel + opt.raw_genomes; ++gi) {
      Genome g = space->genes().random(rng);
      if (gi < opt.genomes_per_kernel) space->repair(g, rng);
      const std::uint64_t seed = rng();
      if (opt.max_instructions > 0) {
        const auto n = lower::count_instructions(*space, g);
        if (n && *n > opt.max_instructions) {
          ++st.large;
          continue;
        }
      }
      const auto r = differential(*space, g, seed);
      ++st.pairs;
      st.instructions += r.instructions;
      if (r.verdict == DiffVerdict::agree) {
        ++st.agree;
      } else if (r.verdict == DiffVerdict::rejected) {
        ++st.rejected;
        ++st.reject_codes[r.reason.substr(0, r.reason.find(':'))];
      } else {
        ++st.disagree;
        CampaignFailure f;
        f.index = i;
        f.original = DiffCase{k, t.name, space->print(g)};
        f.reason = r.reason;
        f.failure = r.failure;
        f.input_seed = seed;
        f.shrunk = opt.shrink_attempts > 0
                       ? shrink(f.original, t, [&](const DiffCase& c) { return disagrees_as(c, t, seed, r.failure); },
                                opt.shrink_attempts)
                       : f.original;
        st.failures.push_back(std::move(f));
        if (opt.stop_at_first) return st;
      }
    }
  }
  return st;
}

std::string regression_text(const DiffCase& c, const std::string& note) {
  std::string s = "# kevo lowering regression: a (kernel, schedule) the differential test once found wrong.\n";
  s += fmt::format("# target: {}\n", c.target);
  std::size_t b = 0;
  while (b < note.size()) {
    const auto e = note.find('\n', b);
    s += "# " + note.substr(b, e == std::string::npos ? std::string::npos : e - b) + "\n";
    if (e == std::string::npos) break;
    b = e + 1;
  }
  s += ir::print_kernel(c.kernel);
  if (!s.empty() && s.back() != '\n') s += '\n';
  s += "---\n" + c.schedule + "\n";
  return s;
}

DiffCase parse_regression(const std::string& text, const std::string& file) {
  const auto sep = text.find("\n---\n");
  if (sep == std::string::npos) throw Error(file + ": no '---' line between the kernel and the schedule");
  DiffCase c;
  const std::string head = text.substr(0, sep + 1);
  const auto tp = head.find("# target: ");
  if (tp == std::string::npos) throw Error(file + ": no '# target: NAME' line");
  const auto te = head.find('\n', tp);
  c.target = head.substr(tp + 10, te - tp - 10);
  auto k = ir::parse_kernel(head, file);
  if (!k) throw Error(k.error().headline());
  c.kernel = *k;
  c.schedule = text.substr(sep + 5);
  return c;
}

}  // namespace kevo::verify
