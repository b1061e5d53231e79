// kevo's Python module (`import kevo`; this is its compiled part, kevo._kevo). The GIL is
// released while C++ works and taken only around Python callbacks (progress, Python runners).
// Bad input raises a kevo.Error subclass with the located one-line message; no C++ exception
// reaches the interpreter unconverted. docs/PYTHON.md describes the API.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kevo/core/error.hpp"
#include "kevo/emit/nki.hpp"
#include "kevo/evo/engine.hpp"
#include "kevo/ir/eval.hpp"
#include "kevo/ir/text.hpp"
#include "kevo/ir/workloads.hpp"
#include "kevo/lower/lower.hpp"
#include "kevo/runner/runner.hpp"
#include "kevo/schedule/space.hpp"
#include "kevo/search/kernel_problem.hpp"
#include "kevo/search/session.hpp"
#include "kevo/session/resolve.hpp"
#include "kevo/session/results.hpp"
#include "kevo/target/target.hpp"
#ifdef KEVO_WITH_MODEL
#include "kevo/model.hpp"
#endif

#ifndef KEVO_VERSION_STRING
#error "KEVO_VERSION_STRING must be defined by the build"
#endif

namespace py = pybind11;
using namespace kevo;

namespace {
struct PyKernel;
struct PyTarget;
struct PyCandidate;
struct PyAskContext;

// An instance made by Kernel.__new__(Kernel) (or Target's, Space's, ...) without __init__ holds
// no C++ value: pybind11 would hand out uninitialised memory for it. False for such an instance
// of T; true for anything else (the usual conversion then decides).
template <typename T>
bool constructed(py::handle src) {
  const auto* ti = py::detail::get_type_info(typeid(T));
  if (ti == nullptr || !src || !PyObject_TypeCheck(src.ptr(), ti->type)) return true;
  py::detail::values_and_holders vhs(reinterpret_cast<py::detail::instance*>(src.ptr()));
  auto it = vhs.find(ti);
  return it == vhs.end() || it->holder_constructed();
}
}  // namespace

// kevo's classes convert from Python only once constructed: every method, property and argument
// taking one refuses an uninitialised instance with a TypeError instead of reading garbage.
#define KEVO_CONSTRUCTED_CASTER(T, hint)                                                                  \
  template <>                                                                                            \
  class pybind11::detail::type_caster<T> : public pybind11::detail::type_caster_base<T> {                \
   public:                                                                                               \
    bool load(pybind11::handle src, bool convert) {                                                      \
      if (!constructed<T>(src)) throw pybind11::type_error(hint); \
      return pybind11::detail::type_caster_base<T>::load(src, convert);                                  \
    }                                                                                                    \
  };
#define KEVO_UNINITIALISED(T) "kevo." T ": an object made by __new__ without __init__ holds nothing; "
KEVO_CONSTRUCTED_CASTER(PyKernel, KEVO_UNINITIALISED("Kernel") "make kernels with kevo.workload() or kevo.parse_kernel()")
KEVO_CONSTRUCTED_CASTER(PyTarget, KEVO_UNINITIALISED("Target") "make targets with kevo.load_target()")
KEVO_CONSTRUCTED_CASTER(PyCandidate, KEVO_UNINITIALISED("Candidate") "runners are given candidates by kevo")
KEVO_CONSTRUCTED_CASTER(PyAskContext, KEVO_UNINITIALISED("AskContext") "ask() is given its context by kevo")
KEVO_CONSTRUCTED_CASTER(kevo::schedule::ScheduleSpace, KEVO_UNINITIALISED("Space") "make spaces with kevo.Space(kernel, target)")
#undef KEVO_UNINITIALISED
#undef KEVO_CONSTRUCTED_CASTER

namespace {

// Python exception types (kevo.Error and its subclasses), created at import.
struct Exceptions {
  py::object error, parse, not_found, schedule, runner, no_result;
};
Exceptions& exc() {
  static Exceptions* e = new Exceptions;  // lives as long as the interpreter; never destroyed
  return *e;
}

// A message for PyErr_SetString, which reads a C string: each NUL byte written as \x00 (the
// message would end at the first one).
std::string nul_escaped(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    if (c == '\0') out += "\\x00";
    else out += c;
  }
  return out;
}

[[noreturn]] void raise(const py::object& type, const std::string& message) {
  PyErr_SetString(type.ptr(), nul_escaped(message).c_str());
  throw py::error_already_set();
}

// Text that goes on as a C string or a file path (a workload spec, a target or kernel file, a
// runner command, a checkpoint directory) must hold no NUL byte: it would be cut there (a
// checkpoint_dir "a\0b" made directory "a"). ValueError naming the argument, before anything is done.
void check_no_nul(std::string_view text, const char* arg) {
  if (const auto at = text.find('\0'); at != std::string_view::npos)
    raise(py::module_::import("builtins").attr("ValueError"), fmt::format("{}: holds a NUL byte at offset {}", arg, at));
}

// A Python exception as one line: its type and message ("ValueError: boom"), without the
// traceback pybind11's what() appends.
std::string one_line(py::error_already_set& e) {
  std::string msg;
  try {
    msg = py::str(e.value()).cast<std::string>();
  } catch (...) {
    msg = "(unprintable)";
  }
  const std::string type = e.type() ? py::str(e.type().attr("__name__")).cast<std::string>() : std::string("exception");
  return msg.empty() ? printable(type) : printable(type + ": " + msg);
}

// The name of a Python object's type, for messages ("str", "numpy.float32").
std::string type_name(const py::handle& h) { return Py_TYPE(h.ptr())->tp_name; }

ir::Kernel kernel_from(const py::object& o);
target::Target target_from(const py::object& o);

// A kernel as Python sees it: immutable, with its canonical text.
struct PyKernel {
  ir::Kernel kernel;
  std::string text;
  explicit PyKernel(ir::Kernel k) : kernel(std::move(k)), text(ir::print_kernel(kernel)) {}
};

struct PyTarget {
  target::Target target;
};

PyKernel parse_kernel(const std::string& text, const std::string& file) {
  check_no_nul(file, "file");
  auto k = ir::parse_kernel(text, file);
  if (!k) raise(exc().parse, k.error().headline());
  return PyKernel(std::move(*k));
}

PyKernel workload(const std::string& spec, const char* arg = "spec") {
  check_no_nul(spec, arg);
  auto k = ir::workload(spec);
  if (!k) raise(exc().not_found, fmt::format("workload '{}': {}", spec, k.error()));
  return PyKernel(std::move(*k));
}

PyTarget load_target(const std::string& name, const char* arg = "name") {
  check_no_nul(name, arg);
  auto t = target::load_target(name);
  if (!t) {
    const auto why = session::target_failure(name);
    raise(why == session::TargetFailure::parse        ? exc().parse
          : why == session::TargetFailure::not_found ? exc().not_found
                                                      : exc().error,
          t.error().headline());
  }
  return PyTarget{std::move(*t)};
}

// Kernel arguments accept a Kernel or .kir text / a workload name; targets a Target or a name.
ir::Kernel kernel_from(const py::object& o) {
  if (py::isinstance<PyKernel>(o)) return o.cast<const PyKernel&>().kernel;
  if (py::isinstance<py::str>(o)) {
    const auto s = o.cast<std::string>();
    if (s.find('{') != std::string::npos) return parse_kernel(s, "<kir>").kernel;
    return workload(s, "kernel").kernel;
  }
  raise(py::module_::import("builtins").attr("TypeError"), "kernel must be a kevo.Kernel, .kir text or a workload name");
}
target::Target target_from(const py::object& o) {
  if (py::isinstance<PyTarget>(o)) return o.cast<const PyTarget&>().target;
  if (py::isinstance<py::str>(o)) return load_target(o.cast<std::string>(), "target").target;
  raise(py::module_::import("builtins").attr("TypeError"), "target must be a kevo.Target or a target name");
}

// A kernel lowering cannot handle is ScheduleError ("cannot be scheduled: kernel 'k', op 'C': ...").
schedule::ScheduleSpace derive(const ir::Kernel& k, const target::Target& t, bool full = false) {
  auto s = schedule::ScheduleSpace::try_derive(k, t, full ? schedule::DeriveOptions::full() : schedule::DeriveOptions{});
  if (!s) raise(exc().schedule, fmt::format("cannot be scheduled: {} [{}]", s.error().str(), s.error().code()));
  return std::move(s).value();
}

// A genome from Python: a sequence of integers (int, NumPy integers; not str or bytes), each a
// 32-bit value. nullopt with `why` (what is wrong, to follow the argument's name) otherwise.
std::optional<Genome> genome_values(const py::handle& h, std::string& why) {
  PyObject* o = h.ptr();
  // A dict or set iterates, but over keys or in no order: never a genome.
  if (PyUnicode_Check(o) || PyBytes_Check(o) || PyByteArray_Check(o) || PyDict_Check(o) || PyAnySet_Check(o) ||
      !py::isinstance<py::iterable>(h)) {
    why = fmt::format("expected a genome (a list of ints), not {}", h.is_none() ? std::string("None") : type_name(h));
    return std::nullopt;
  }
  Genome g;
  for (const auto& x : h) {
    const std::size_t i = g.size();
    if (!PyIndex_Check(x.ptr())) {
      why = fmt::format("[{}] is a {}: a genome's values are ints", i, type_name(x));
      return std::nullopt;
    }
    py::object v = py::reinterpret_steal<py::object>(PyNumber_Index(x.ptr()));
    if (!v) throw py::error_already_set();
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (n == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (overflow != 0 || n < std::numeric_limits<std::int32_t>::min() || n > std::numeric_limits<std::int32_t>::max()) {
      why = fmt::format("[{}] = {}: out of a genome value's range", i, excerpt(py::str(v).cast<std::string>(), 24));
      return std::nullopt;
    }
    g.push_back(static_cast<std::int32_t>(n));
  }
  return g;
}

// A schedule argument named `arg`: text, a genome, or None for the default schedule.
Genome genome_of(const schedule::ScheduleSpace& space, const py::object& schedule, const char* arg = "schedule") {
  if (schedule.is_none()) return space.default_genome();
  if (py::isinstance<py::str>(schedule)) {
    auto g = space.parse(schedule.cast<std::string>());
    if (!g) raise(exc().parse, g.error().headline());
    return std::move(*g);
  }
  std::string why;
  auto g = genome_values(schedule, why);
  if (!g && (!py::isinstance<py::iterable>(schedule) || PyBytes_Check(schedule.ptr()) || PyByteArray_Check(schedule.ptr()) ||
             PyDict_Check(schedule.ptr()) || PyAnySet_Check(schedule.ptr())))
    why = fmt::format("expected schedule text, a genome (a list of ints) or None, not {}", type_name(schedule));
  if (!g) raise(py::module_::import("builtins").attr("TypeError"), fmt::format("{}: {}", arg, why));
  if (!space.genes().contains(*g)) raise(exc().schedule, "genome is not in the schedule space (wrong width or a value out of range)");
  return std::move(*g);
}

// ---------------------------------------------------------------- runners written in Python

// What a Python runner is given per candidate. The program and kernel are kevo's own, valid
// only during the runner call (no copy of a large program per evaluation); a candidate kept past
// its call still has its texts and figures, and nki() then raises kevo.Error.
struct PyCandidate {
  std::string kernel_text, schedule_text, kernel_name, target_name;
  lower::ProgramStats stats;
  std::size_t buffers = 0;
  const lower::TileProgram* program = nullptr;
  const ir::Kernel* kernel = nullptr;
  std::string nki() const {
    if (!program || !kernel) raise(exc().error, "Candidate.nki(): the candidate's program is gone (call it inside the runner)");
    return emit::emit_nki(*program, *kernel);
  }
};

// A real number from Python: int, float, or a scalar with __index__ or __float__ (NumPy's
// np.float32, np.int64). Not bool (Python's or NumPy's), str, bytes or bytearray, and not a sequence. nullopt when it
// is none of these, with `why` saying what it is instead. Raises only a KeyboardInterrupt.
std::optional<double> real_from_python(const py::handle& h, std::string& why) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) {
    why = fmt::format("{}, a bool", o == Py_True ? "True" : "False");
    return std::nullopt;
  }
  // NumPy's bool scalar converts by __float__ but is no more a number than True is.
  if (const std::string_view tn = Py_TYPE(o)->tp_name; tn == "numpy.bool_" || tn == "numpy.bool") {
    why = fmt::format("{}, a NumPy bool", PyObject_IsTrue(o) == 1 ? "True" : "False");
    return std::nullopt;
  }
  if (PyFloat_Check(o)) return PyFloat_AS_DOUBLE(o);
  const PyNumberMethods* nb = Py_TYPE(o)->tp_as_number;
  const bool scalar = PyLong_Check(o) || (!PyUnicode_Check(o) && !PyBytes_Check(o) && !PyByteArray_Check(o) &&
                                          !PySequence_Check(o) && nb != nullptr && (nb->nb_index || nb->nb_float));
  if (!scalar) {
    why = h.is_none() ? std::string("None") : fmt::format("a {}", type_name(h));
    return std::nullopt;
  }
  const double d = (PyLong_Check(o) || nb->nb_index) ? [&] {
    py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(o));
    return i ? PyLong_AsDouble(i.ptr()) : -1.0;
  }() : PyFloat_AsDouble(o);
  if (d == -1.0 && PyErr_Occurred()) {
    py::error_already_set e;
    if (e.matches(PyExc_KeyboardInterrupt)) throw std::move(e);
    why = e.matches(PyExc_OverflowError) ? fmt::format("a {} too large for a double", type_name(h))
                                         : fmt::format("a {} that is not a real number", type_name(h));
    return std::nullopt;
  }
  return d;
}

runner::Measurement measurement_from_python(const py::handle& r) {
  runner::Measurement m;
  auto fail = [&](Status s, std::string why) {
    m.status = s;
    m.message = std::move(why);
    return m;
  };
  constexpr const char* kMust = "the Python runner must return latency in ns (a number, a list of samples or a dict)";
  std::vector<double> samples;
  std::string why;
  // The samples of an iterable (not str or bytes, whose items are characters and byte values).
  auto read_samples = [&](const py::handle& list, const std::string& what) -> bool {
    if (PyUnicode_Check(list.ptr()) || PyBytes_Check(list.ptr()) || PyByteArray_Check(list.ptr())) {
      why = fmt::format("{}: it returned {} {}", kMust, what, type_name(list));
      return false;
    }
    std::size_t i = 0;
    for (const auto& x : list) {
      const auto v = real_from_python(x, why);
      if (!v) {
        why = fmt::format("the Python runner returned {}[{}] = {}: not a number of ns", what, i, why);
        return false;
      }
      samples.push_back(*v);
      ++i;
    }
    return true;
  };
  try {
    if (r.is_none()) return fail(Status::error, "the Python runner returned None");
    if (py::isinstance<py::dict>(r)) {
      const auto d = r.cast<py::dict>();
      if (d.contains("status")) {
        const std::string st_text = py::str(d["status"]).cast<std::string>();
        const auto st = status_from_string(st_text);
        if (!st) return fail(Status::error, fmt::format("the Python runner returned an unknown status '{}'", printable(st_text)));
        if (*st != Status::ok) return fail(*st, d.contains("message") ? py::str(d["message"]).cast<std::string>() : std::string());
      }
      if (d.contains("samples_ns")) {
        if (!read_samples(d["samples_ns"], "'samples_ns'")) return fail(Status::error, why);
      } else if (d.contains("latency_ns")) {
        const auto v = real_from_python(d["latency_ns"], why);
        if (!v) return fail(Status::error, fmt::format("the Python runner returned 'latency_ns' = {}: not a number of ns", why));
        samples.push_back(*v);
      } else {
        return fail(Status::error, "the Python runner's dict has neither 'latency_ns' nor 'samples_ns'");
      }
    } else if (const auto v = real_from_python(r, why)) {
      samples.push_back(*v);
    } else if (PyUnicode_Check(r.ptr()) || PyBytes_Check(r.ptr()) || PyByteArray_Check(r.ptr()) || !py::isinstance<py::iterable>(r)) {
      return fail(Status::error, fmt::format("{}; it returned {}", kMust, why));
    } else if (!read_samples(r, "samples")) {
      return fail(Status::error, why);
    }
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_KeyboardInterrupt)) throw;
    return fail(Status::error, fmt::format("{}; reading its result raised {}", kMust, one_line(e)));
  } catch (const py::cast_error&) {
    return fail(Status::error, kMust);
  }
  if (samples.empty()) return fail(Status::error, "the Python runner returned no latency sample");
  for (double s : samples)
    if (!std::isfinite(s) || s <= 0) return fail(Status::error, fmt::format("the Python runner returned latency {} ns: not a finite positive number", s));
  m.samples_ns = samples;
  m.latency = runner::summarize(samples);
  return m;
}

// State shared by a Python runner's copies: the callable and the interruption flag.
struct PyRunnerState {
  py::object fn;
  std::string identity;
  bool deterministic = false;
  std::atomic<bool> interrupted{false};
  std::atomic<std::int64_t> calls{0}, ns{0};  // candidates measured, wall time inside measure() (GIL wait included)
  ~PyRunnerState() {
    py::gil_scoped_acquire g;
    fn = py::object();
  }
};

class PyRunner {
 public:
  explicit PyRunner(std::shared_ptr<PyRunnerState> s) : s_(std::move(s)) {}
  std::vector<runner::Measurement> measure(std::span<const runner::Candidate> cs) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<runner::Measurement> out;
    out.reserve(cs.size());
    py::gil_scoped_acquire g;
    struct Clock {  // counts this call's wall time however it ends
      PyRunnerState& s;
      std::chrono::steady_clock::time_point t0;
      std::size_t n;
      ~Clock() {
        s.calls += static_cast<std::int64_t>(n);
        s.ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      }
    } clock{*s_, t0, cs.size()};
    for (const auto& c : cs) {
      if (s_->interrupted.load()) {
        runner::Measurement m;
        m.status = Status::error;
        m.message = "interrupted";
        out.push_back(std::move(m));
        continue;
      }
      auto holder = py::cast(PyCandidate{});
      auto& pc = holder.cast<PyCandidate&>();
      pc.kernel_text = c.kernel_text;
      pc.schedule_text = c.schedule_text;
      pc.kernel_name = c.kernel ? c.kernel->name : "";
      pc.target_name = c.target ? c.target->name : "";
      if (c.program) {
        pc.stats = c.program->stats;
        pc.buffers = c.program->buffers.size();
      }
      pc.program = c.program;
      pc.kernel = c.kernel;
      struct Expire {  // the pointers die with this call, whatever the callable kept
        PyCandidate& pc;
        ~Expire() { pc.program = nullptr, pc.kernel = nullptr; }
      } expire{pc};
      try {
        out.push_back(measurement_from_python(s_->fn(holder)));
      } catch (py::error_already_set& e) {
        runner::Measurement m;
        m.status = Status::error;
        if (e.matches(PyExc_KeyboardInterrupt)) {
          s_->interrupted.store(true);
          m.message = "interrupted";
        } else {
          m.message = fmt::format("the Python runner raised {}", one_line(e));
        }
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  [[nodiscard]] runner::RunnerTraits traits() const {
    runner::RunnerTraits t;
    t.identity = s_->identity;
    t.deterministic = s_->deterministic;
    t.thread_safety = runner::ThreadSafety::none;
    t.cost_seconds = 1;
    return t;
  }

 private:
  std::shared_ptr<PyRunnerState> s_;
};

// The `timeout` argument (seconds per candidate of a cmd: runner): 0 for the adaptive timeout,
// else in the range `kevo search --eval-timeout` accepts.
void check_timeout(double timeout_s) {
  const auto range = session::run_option_range("eval-timeout");
  if (timeout_s != 0 && !(timeout_s >= range->lo && timeout_s <= range->hi))
    raise(exc().error, fmt::format("timeout must be 0 (adaptive) or seconds in {}, not {}", range->str(), timeout_s));
}

// A runner argument: a name ("sim", "cpu", "cmd:...") or a Python callable.
runner::Runner runner_from(const py::object& o, const target::Target& t, std::shared_ptr<PyRunnerState>* py_state,
                           double timeout_s, const std::atomic<bool>* cancel = nullptr) {
  check_timeout(timeout_s);
  if (py::isinstance<py::str>(o)) {
    const auto name = o.cast<std::string>();
    check_no_nul(name, "runner");
    session::RunnerOptions ro;
    ro.eval_timeout_s = timeout_s;
    ro.cancel = cancel;
    auto r = session::runner_by_name(name, t, ro);
    if (!r) raise(exc().not_found, r.error());
    return std::move(*r);
  }
  if (PyCallable_Check(o.ptr())) {
    auto s = std::make_shared<PyRunnerState>();
    s->fn = o;
    std::string name = py::hasattr(o, "__qualname__") ? py::str(o.attr("__qualname__")).cast<std::string>() : "callable";
    s->identity = py::hasattr(o, "kevo_identity") ? py::str(o.attr("kevo_identity")).cast<std::string>() : "python:" + name;
    s->deterministic = py::hasattr(o, "kevo_deterministic") && o.attr("kevo_deterministic").cast<bool>();
    if (py_state) *py_state = s;
    return runner::Runner(PyRunner(s));
  }
  raise(py::module_::import("builtins").attr("TypeError"), "runner must be 'sim', 'cpu', 'cmd:COMMAND' or a callable");
}

// ---------------------------------------------------------------- results

py::dict individual_dict(const evo::Individual& ind, const search::KernelProblem& p) {
  py::dict d;
  d["id"] = ind.id;
  d["schedule"] = p.to_text(ind.genome);
  d["status"] = std::string(to_string(ind.eval.status));
  d["reason"] = ind.eval.reason;
  d["latency_ns"] = ind.eval.ok() ? ind.eval.fitness[0] : std::numeric_limits<double>::quiet_NaN();
  d["fraction_of_peak"] = ind.eval.metric("fraction_of_peak", std::numeric_limits<double>::quiet_NaN());
  d["operator"] = ind.op;
  d["generation"] = ind.generation;
  return d;
}

py::dict measurement_dict(const runner::Measurement& m) {
  py::dict d;
  d["status"] = std::string(to_string(m.status));
  d["message"] = m.message;
  d["latency_ns"] = m.latency_ns();
  d["samples_ns"] = m.samples_ns;
  d["p10_ns"] = m.latency.p10;
  d["p90_ns"] = m.latency.p90;
  d["fraction_of_peak"] = m.fraction_of_peak;
  d["roofline_ns"] = m.roofline_ns;
  d["bytes_moved"] = m.bytes_moved;
  d["bottleneck"] = m.bottleneck;
  d["profile"] = m.profile;
  py::dict engines;
  for (const auto& e : m.engines) engines[py::str(e.engine)] = e.utilisation;
  d["engines"] = engines;
  return d;
}

py::dict verification_dict(const search::Verification& v) {
  py::dict d;
  d["ok"] = v.ok;
  d["method"] = v.method;
  d["shape"] = v.shape;
  d["detail"] = v.detail;
  d["message"] = v.message;
  return d;
}

// ---------------------------------------------------------------- functions

py::dict stats_dict(const lower::ProgramStats& s, std::size_t buffers) {
  py::dict d;
  d["instructions"] = s.instructions;
  d["dma_instructions"] = s.dma_instructions;
  d["sbuf_bytes_per_partition"] = s.sbuf_bytes_per_partition;
  d["psum_bytes_per_partition"] = s.psum_bytes_per_partition;
  d["hbm_bytes_read"] = s.hbm_bytes_read;
  d["hbm_bytes_written"] = s.hbm_bytes_written;
  d["flops"] = s.flops;
  d["buffers"] = buffers;
  return d;
}

py::dict program_dict(const lower::TileProgram& p, const ir::Kernel& k, bool with_nki) {
  py::dict d = stats_dict(p.stats, p.buffers.size());
  d["kernel"] = p.kernel_name;
  d["target"] = p.target_name;
  d["schedule"] = p.schedule_text;
  if (with_nki) d["nki"] = emit::emit_nki(p, k);
  return d;
}

py::dict lower_py(const py::object& kernel, const py::object& schedule, const py::object& target, bool nki) {
  const auto k = kernel_from(kernel);
  const auto t = target_from(target);
  const auto space = derive(k, t);
  const Genome g = genome_of(space, schedule);
  std::optional<Expected<lower::TileProgram, Invalid>> p;
  {
    py::gil_scoped_release nogil;
    p.emplace(lower::lower(space, g));
  }
  if (!*p) raise(exc().schedule, (*p).error().str());
  return program_dict(**p, k, nki);
}

// Kernel + target + runner argument as a KernelProblem (a kernel lowering cannot handle is ScheduleError).
search::KernelProblem make_problem(const ir::Kernel& k, const target::Target& t, const py::object& runner,
                                   std::shared_ptr<PyRunnerState>* pys, double timeout_s,
                                   const std::atomic<bool>* cancel = nullptr) {
  runner::Runner r = runner_from(runner, t, pys, timeout_s, cancel);
  auto p = search::KernelProblem::make(k, t, std::move(r));
  if (!p) raise(exc().schedule, fmt::format("cannot be scheduled: {} [{}]", p.error().str(), p.error().code()));
  return std::move(p).value();
}

// The options every engine run checks the same way; returns the algorithm.
evo::Algorithm checked_run_options(std::uint64_t budget, int population, const std::string& algorithm, double time_limit) {
  if (budget < 1) raise(exc().error, fmt::format("budget must be >= 1 evaluation, not {}", budget));
  if (population < 2) raise(exc().error, fmt::format("population must be >= 2, not {}", population));
  if (!(time_limit >= 0) || !std::isfinite(time_limit))
    raise(exc().error, fmt::format("time_limit must be a finite number of seconds >= 0, not {}", time_limit));
  const auto alg = evo::algorithm_from_string(algorithm);
  if (!alg) raise(exc().error, fmt::format("algorithm '{}' is not one of ga, islands, map-elites, async, random, exhaustive, surrogate", algorithm));
  return *alg;
}

// Ctrl-C and the user's progress callback during an engine run. poll() runs on the searching
// thread after each evaluation (it takes the GIL); a KeyboardInterrupt or a callback returning a
// true value stops the run with a result, any other exception (one raised by the returned value's
// __bool__ too) stops it and is rethrown after run().
struct Interruption {
  bool interrupted = false;
  std::optional<py::error_already_set> error;

  // Returns true when the run should stop. `call` invokes the progress callback (when there is one).
  template <typename Call>
  bool poll(const py::object& progress, Call&& call) {
    py::gil_scoped_acquire g;
    if (PyErr_CheckSignals() != 0) {
      take(py::error_already_set());
    } else if (!progress.is_none() && !stop()) {  // no callback after a Ctrl-C, a true return or an error
      try {
        const py::object r = call();
        const int truth = PyObject_IsTrue(r.ptr());  // Python's truthiness; a raising __bool__ is the callback's error
        if (truth < 0) throw py::error_already_set();
        if (truth != 0) interrupted = true;
      } catch (py::error_already_set& e) {
        take(std::move(e));
      }
    }
    return stop();
  }
  // Takes a Ctrl-C (or another signal handler's exception) that came after the last poll.
  void check_signals() {
    py::gil_scoped_acquire g;
    if (PyErr_CheckSignals() != 0) take(py::error_already_set());
  }
  [[nodiscard]] bool stop() const { return interrupted || error.has_value(); }
  void rethrow() {
    if (error) throw std::move(*error);
  }

 private:
  void take(py::error_already_set e) {
    if (e.matches(PyExc_KeyboardInterrupt)) interrupted = true;
    else if (!error) error.emplace(std::move(e));
  }
};

// ---------------------------------------------------------------- strategies written in Python

// A strategy written in Python (docs/PYTHON.md): an object with ask(n, ctx) and tell(results),
// optionally name, save() -> bytes and load(bytes). ask() proposes through ctx.offer(genome) or
// returns an iterable of genomes; tell() receives the evaluations in proposal order as dicts. The
// engine calls both on the searching thread with the GIL released; the adapter takes it. A Python
// exception inside them stops the run and is raised again, as itself, by evolve() or search();
// a KeyboardInterrupt (Ctrl-C) stops it with a result, as a Ctrl-C anywhere else does.
struct PyStrategyState {
  py::object obj;
  std::string name;
  bool stateful = false;
  bool interrupted = false;  // Ctrl-C landed inside ask() or tell(): the run stops with a result
  std::optional<py::error_already_set> error;
  ~PyStrategyState() {
    py::gil_scoped_acquire g;
    obj = py::object();
    error.reset();
  }
  // Called with the GIL held, inside a catch of py::error_already_set: keeps the first error and
  // aborts the run (the engine propagates kevo::Error out of run()).
  [[noreturn]] void fail(py::error_already_set& e, const char* where) {
    std::string what = e.what();
    if (!error) error.emplace(std::move(e));
    throw Error(fmt::format("strategy '{}': {}() raised {}", name, where, what));
  }
  // Raises the Python error a run stopped on, if any (GIL held).
  void rethrow() {
    if (error) {
      auto e = std::move(*error);
      error.reset();
      throw std::move(e);
    }
  }
};

// What ask(n, ctx) sees: the engine's AskContext while the call lasts.
struct PyAskContext {
  evo::AskContext* ctx = nullptr;
  std::size_t n = 0;
  evo::AskContext& get() const {
    if (ctx == nullptr) raise(exc().error, "an AskContext is only usable inside the ask() call it was given to");
    return *ctx;
  }
};

Genome genome_from_python(const Space& space, const py::handle& h, const char* where) {
  std::string why;
  auto got = genome_values(h, why);
  if (!got) raise(exc().error, fmt::format("{}: {}", where, why));
  Genome g = std::move(*got);
  if (g.size() != space.width())
    raise(exc().error, fmt::format("{}: the genome has {} values, the space's genomes have {}", where, g.size(), space.width()));
  return g;
}

// Why a genome of the space's width lies outside it: its first gene with a value out of range
// ("gene 'x' (genome[3]) = 1000000: outside 0..9"); empty when it lies inside.
std::string outside_space(const Space& space, const Genome& g) {
  if (space.contains(g)) return {};
  for (std::size_t i = 0; i < space.size(); ++i) {
    const Gene& gene = space.gene(i);
    const std::size_t off = space.offset(i);
    const auto n = static_cast<std::int64_t>(gene.choices());
    if (gene.kind == GeneKind::permutation) {
      Genome part(g.begin() + static_cast<std::ptrdiff_t>(off), g.begin() + static_cast<std::ptrdiff_t>(off + gene.width()));
      std::sort(part.begin(), part.end());
      for (std::size_t k = 0; k < part.size(); ++k)
        if (part[k] != static_cast<std::int32_t>(k))
          return fmt::format("gene '{}' (genome[{}..{}]) is not a permutation of 0..{}", gene.name, off,
                             off + gene.width() - 1, gene.width() - 1);
    } else if (g[off] < 0 || g[off] >= n) {
      return fmt::format("gene '{}' (genome[{}]) = {}: outside 0..{}", gene.name, off, g[off], n - 1);
    }
  }
  return "outside the space";
}

// An individual as Python sees it in evolve() results and a strategy's tell().
py::dict genome_individual_dict(const evo::Individual& ind) {
  py::dict d;
  d["id"] = ind.id;
  d["genome"] = ind.genome;
  d["status"] = std::string(to_string(ind.eval.status));
  d["reason"] = ind.eval.reason;
  d["fitness"] = ind.eval.fitness;
  d["operator"] = ind.op;
  d["generation"] = ind.generation;
  return d;
}

py::dict evaluated_dict(const evo::Evaluated& r) {
  py::dict d = genome_individual_dict(r.individual);
  d["tag"] = r.tag;
  return d;
}

class PyStrategy {
 public:
  explicit PyStrategy(std::shared_ptr<PyStrategyState> s) : s_(std::move(s)) {}
  [[nodiscard]] std::string name() const { return s_->name; }
  [[nodiscard]] bool uses_operators() const { return false; }
  void ask(std::size_t n, evo::AskContext& ctx) {
    py::gil_scoped_acquire g;
    if (s_->interrupted) {
      ctx.request_stop();
      return;
    }
    auto holder = std::make_shared<PyAskContext>();
    holder->ctx = &ctx;
    holder->n = n;
    struct Reset {
      PyAskContext& h;
      ~Reset() { h.ctx = nullptr; }
    } reset{*holder};
    try {
      const py::object r = s_->obj.attr("ask")(n, py::cast(holder));
      if (r.is_none()) return;
      std::size_t i = 0;
      for (const auto& item : r) {
        if (ctx.size() >= n) break;
        const std::string where = fmt::format("strategy '{}': ask() item {}", s_->name, i++);
        Genome gnm = genome_from_python(ctx.space(), item, where.c_str());
        Rng rng = ctx.rng(kOfferStream).fork(ctx.generation()).fork(ctx.size());
        const std::string outside = outside_space(ctx.space(), gnm);
        // Refused and outside the space (repair could not bring it in): the strategy's bug, not a
        // duplicate. ctx.offer() answers False for such a genome instead, as documented.
        if (!ctx.offer(std::move(gnm), rng, "python", 0, true) && !outside.empty())
          raise(exc().error, fmt::format("{}: {}", where, outside));
      }
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) {
        s_->interrupted = true;
        ctx.request_stop();
        return;
      }
      s_->fail(e, "ask");
    }
  }
  void tell(std::span<evo::Evaluated> results) {
    py::gil_scoped_acquire g;
    try {
      py::list l;
      for (const auto& r : results) l.append(evaluated_dict(r));
      s_->obj.attr("tell")(l);
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_KeyboardInterrupt)) {
        s_->interrupted = true;  // the next ask() stops the run
        return;
      }
      s_->fail(e, "tell");
    }
  }
  static constexpr std::uint64_t kOfferStream = 0x9e57a11ULL;

 protected:
  std::shared_ptr<PyStrategyState> s_;
};

// The same, with save() and load(): a resumed run restores the Python state from the snapshot
// instead of replaying the journal through ask/tell.
class PyStatefulStrategy : public PyStrategy {
 public:
  using PyStrategy::PyStrategy;
  [[nodiscard]] std::string save() const {
    py::gil_scoped_acquire g;
    try {
      const py::object r = s_->obj.attr("save")();
      if (py::isinstance<py::bytes>(r)) return r.cast<std::string>();
      if (py::isinstance<py::str>(r)) return r.cast<std::string>();
      raise(py::module_::import("builtins").attr("TypeError"), "save() must return bytes or str");
    } catch (py::error_already_set& e) {
      s_->fail(e, "save");
    }
  }
  void load(std::string_view bytes) {
    py::gil_scoped_acquire g;
    try {
      s_->obj.attr("load")(py::bytes(bytes.data(), bytes.size()));
    } catch (py::error_already_set& e) {
      s_->fail(e, "load");
    }
  }
};

// A Python strategy object as an evo::Strategy; `state` receives the adapter's state so the
// caller can raise the strategy's own error after the run.
evo::Strategy strategy_from_python(const py::object& obj, std::shared_ptr<PyStrategyState>& state) {
  if (!py::hasattr(obj, "ask") || !py::hasattr(obj, "tell"))
    raise(py::module_::import("builtins").attr("TypeError"),
          "a strategy is a name ('ga', 'islands', 'map-elites', 'async', 'random', 'exhaustive') or an object with "
          "ask(n, ctx) and tell(results) methods");
  state = std::make_shared<PyStrategyState>();
  state->obj = obj;
  state->name = py::hasattr(obj, "name") ? py::str(obj.attr("name")).cast<std::string>()
                                         : py::str(py::type::of(obj).attr("__name__")).cast<std::string>();
  if (state->name.empty()) raise(exc().error, "a strategy's name must not be empty");
  state->stateful = py::hasattr(obj, "save") && py::hasattr(obj, "load");
  if (state->stateful) return evo::Strategy(PyStatefulStrategy(state));
  return evo::Strategy(PyStrategy(state));
}

// The strategy a run uses: a built-in named by a string, or a Python object (see PyStrategy).
struct RunStrategy {
  evo::Algorithm algorithm = evo::Algorithm::ga;
  std::optional<evo::Strategy> custom;
  std::shared_ptr<PyStrategyState> state;  // of a Python strategy: its error, raised after the run
  void rethrow() const {
    if (state) state->rethrow();
  }
  [[nodiscard]] bool interrupted() const { return state && state->interrupted; }
};

RunStrategy run_strategy(std::uint64_t budget, int population, const py::object& algorithm, double time_limit) {
  RunStrategy rs;
  if (py::isinstance<py::str>(algorithm)) {
    rs.algorithm = checked_run_options(budget, population, algorithm.cast<std::string>(), time_limit);
    return rs;
  }
  checked_run_options(budget, population, "ga", time_limit);
  rs.custom = strategy_from_python(algorithm, rs.state);
  return rs;
}

// Runs `work` on a helper thread, this one checking for signals every 0.1 s (Python runs signal
// handlers only on the main thread, between bytecodes): Ctrl-C sets `cancel`, waits for `work` to
// see it and end, and is raised; an exception of `work` is rethrown here.
void run_interruptibly(const std::function<void()>& work, std::atomic<bool>& cancel) {
  std::exception_ptr failed;
  std::promise<void> done;
  auto finished = done.get_future();
  std::optional<py::error_already_set> interrupt;
  {
    py::gil_scoped_release nogil;
    std::thread worker([&] {
      try {
        work();
      } catch (...) {
        failed = std::current_exception();
      }
      done.set_value();
    });
    while (finished.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) {
        interrupt.emplace();
        cancel.store(true);
        break;
      }
    }
    worker.join();
  }
  if (interrupt) throw std::move(*interrupt);
  if (failed) std::rethrow_exception(failed);
}

py::dict eval_py(const py::object& kernel, const py::object& schedule, const py::object& target, const py::object& runner,
                 double timeout_s) {
  const auto k = kernel_from(kernel);
  const auto t = target_from(target);
  std::shared_ptr<PyRunnerState> pys;
  std::atomic<bool> cancel{false};  // outlives the problem and its runner
  const search::KernelProblem problem = make_problem(k, t, runner, &pys, timeout_s, &cancel);
  const Genome g = genome_of(problem.schedule_space(), schedule);
  search::ScheduleReport rep;
  if (pys) {  // a Python runner: on this thread (Ctrl-C inside it is seen by PyRunner)
    py::gil_scoped_release nogil;
    rep = problem.measure_one(g);
  } else {
    // a cmd: runner can take minutes (its timeout): Ctrl-C cancels it (its worker's process
    // group killed) and is raised
    run_interruptibly([&] { rep = problem.measure_one(g); }, cancel);
  }
  if (pys && pys->interrupted.load()) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  if (rep.invalid) raise(exc().schedule, rep.invalid->str());
  py::dict d = rep.measurement ? measurement_dict(*rep.measurement) : py::dict();
  d["schedule"] = rep.schedule;
  return d;
}

// Ctrl-C during kevo.search with a runner that is not Python code (a cmd: worker can take minutes
// on one candidate, and the engine polls for Ctrl-C only after evaluations): while the search
// runs, SIGINT first cancels the runner's workers (killed within 0.1 s) and asks the engine to
// stop -- so the candidates that cancel cut short are not journaled -- and then runs Python's own
// handler, whose KeyboardInterrupt is taken at the next poll. Installed only on the main thread
// and only while Python's SIGINT handler is the default one (a user's handler is left alone).
class SigintStop {
 public:
  // `wanted` false: does nothing (a Python runner sees Ctrl-C itself).
  explicit SigintStop(bool wanted) {
    if (!wanted || active_.load() || PyThread_get_thread_ident() != main_thread_ident()) return;
    const py::module_ signal = py::module_::import("signal");
    if (!signal.attr("getsignal")(signal.attr("SIGINT")).is(signal.attr("default_int_handler"))) return;
    struct sigaction now {};
    if (sigaction(SIGINT, nullptr, &now) != 0) return;
    const bool plain = (now.sa_flags & SA_SIGINFO) == 0;
    if (plain && (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN)) return;  // not Python's
    prev_ = now;
    stop_.reset();
    struct sigaction ours {};
    ours.sa_sigaction = &SigintStop::on_signal;
    ours.sa_flags = SA_SIGINFO | (now.sa_flags & SA_ONSTACK);
    sigemptyset(&ours.sa_mask);
    if (sigaction(SIGINT, &ours, nullptr) != 0) return;
    active_.store(true);
    installed_ = true;
  }
  ~SigintStop() { uninstall(); }
  // Python's handler back (at once rather than at scope exit); idempotent.
  void uninstall() {
    if (!installed_) return;
    installed_ = false;
    // Python's handler back, unless the user's code (a progress callback) set another meanwhile
    struct sigaction now {};
    if (sigaction(SIGINT, nullptr, &now) == 0 && (now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == &SigintStop::on_signal)
      sigaction(SIGINT, &prev_, nullptr);
    engine(nullptr);
    active_.store(false);
  }
  SigintStop(const SigintStop&) = delete;
  SigintStop& operator=(const SigintStop&) = delete;
  [[nodiscard]] bool installed() const noexcept { return installed_; }
  // The runner's cancel flag while installed: static, so a handler still running on another
  // thread never stores into a flag that has gone.
  static const std::atomic<bool>* cancel_flag() noexcept { return stop_.runner_cancel(); }
  // Whether SIGINT arrived since the handler was installed (run_search's should_stop).
  static bool signalled() noexcept { return stop_.requested(); }
  // SearchHooks::on_engine (search::AsyncStop::engine).
  static void engine(evo::Engine* e) { stop_.engine(e); }

 private:
  static unsigned long main_thread_ident() {
    return py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  }
  static void on_signal(int sig, siginfo_t* info, void* uc) {  // async-signal-safe: atomics only
    stop_.request();
    if ((prev_.sa_flags & SA_SIGINFO) != 0) prev_.sa_sigaction(sig, info, uc);
    else if (prev_.sa_handler != SIG_DFL && prev_.sa_handler != SIG_IGN) prev_.sa_handler(sig);
  }
  static inline std::atomic<bool> active_{false};
  static inline search::AsyncStop stop_;
  static inline struct sigaction prev_ {};
  bool installed_ = false;
};

py::dict search_py(const py::object& kernel, const py::object& target, const py::object& runner, std::uint64_t budget,
                   std::uint64_t seed, int threads, int population, const py::object& algorithm, double time_limit,
                   const std::vector<std::string>& seed_schedules, const py::object& progress, double timeout_s,
                   std::int64_t verify_candidates, const std::string& checkpoint_dir, bool resume) {
  check_no_nul(checkpoint_dir, "checkpoint_dir");
  if (resume && checkpoint_dir.empty()) raise(exc().error, "resume=True needs the checkpoint_dir of the run to resume");
  // 0 would check no candidate, so no search could name a best (it gave best=None silently).
  if (verify_candidates < 1)
    raise(exc().error, fmt::format("verify_candidates must be >= 1 (the best candidates checked against the reference, "
                                   "best first; kevo search checks 32), not {}", verify_candidates));
  const RunStrategy strategy = run_strategy(budget, population, algorithm, time_limit);
  const evo::Algorithm alg = strategy.algorithm;
  if (threads < 1 || threads > 1024) raise(exc().error, fmt::format("threads must be in [1, 1024], not {}", threads));
  const auto k = kernel_from(kernel);
  const auto t = target_from(target);
  std::shared_ptr<PyRunnerState> pys;
  // A runner that is not Python code is cancelled by Ctrl-C (SigintStop); a Python runner sees
  // Ctrl-C itself, as it runs Python code.
  SigintStop sigint(PyCallable_Check(runner.ptr()) == 0);
  const bool watching = sigint.installed();
  const search::KernelProblem problem =
      make_problem(k, t, runner, &pys, timeout_s, watching ? SigintStop::cancel_flag() : nullptr);
  if (auto seeds = search::parse_seed_schedules(problem, seed_schedules); !seeds) raise(exc().parse, seeds.error().headline());

  search::SearchOptions so;
  so.config.algorithm = alg;
  so.config.seed = seed;
  so.config.threads = threads;
  so.config.population = static_cast<std::size_t>(population);
  so.config.budget.max_evaluations = budget;
  so.config.budget.max_seconds = time_limit;
  if (!checkpoint_dir.empty()) so.config.checkpoint.dir = checkpoint_dir;
  so.seed_schedules = seed_schedules;
  so.verify_candidates = static_cast<std::size_t>(verify_candidates);
  so.verify_seed = seed ^ 0x5eedULL;
  so.strategy = strategy.custom;
  so.resume = resume;

  // Callbacks run on this thread with the GIL released around them: Interruption takes it.
  Interruption intr;
  double best = std::numeric_limits<double>::infinity();
  std::uint64_t evals = 0;
  search::SearchHooks hooks;
  hooks.on_evaluation = [&](const evo::Individual& ind) {
    ++evals;
    if (ind.eval.ok()) best = std::min(best, ind.eval.fitness[0]);
    intr.poll(progress, [&] { return progress(evals, budget, best, individual_dict(ind, problem)); });
  };
  hooks.should_stop = [&] {
    return intr.stop() || (pys && pys->interrupted.load()) || (watching && SigintStop::signalled());
  };
  if (watching) hooks.on_engine = &SigintStop::engine;
  Expected<search::SearchOutcome, std::string> out = unexpected(std::string());
  {
    py::gil_scoped_release nogil;
    try {
      out = search::run_search(problem, so, hooks);
    } catch (const Error& e) {
      out = unexpected(std::string(e.what()));
    }
  }
  sigint.uninstall();
  intr.check_signals();  // a Ctrl-C after the last evaluation: a result, not a raise
  strategy.rethrow();
  intr.rethrow();
  if (!out) raise(exc().error, out.error());
  const bool interrupted = intr.interrupted || (pys && pys->interrupted.load()) || strategy.interrupted();

  py::dict d;
  d["kernel"] = k.name;
  d["target"] = t.name;
  d["runner"] = problem.runner_traits().identity;
  d["evaluations"] = out->result.evaluations;
  d["valid"] = out->result.valid;
  d["wall_seconds"] = out->result.wall_seconds;
  d["stop_reason"] = std::string(evo::to_string(out->result.stop_reason));
  d["interrupted"] = interrupted;
  d["deterministic"] = out->result.deterministic;
  d["history_hash"] = out->result.history_hash;
  py::list hist;
  for (const auto& ind : out->history) hist.append(individual_dict(ind, problem));
  d["history"] = hist;
  d["verification"] = verification_dict(out->verification);
  py::list rejected;
  for (const auto& u : out->rejected) {
    py::dict x = individual_dict(u.individual, problem);
    x["verification"] = verification_dict(u.verification);
    rejected.append(x);
  }
  d["rejected"] = rejected;
  if (out->best) {
    py::dict b = individual_dict(*out->best, problem);
    b["latency_ns"] = out->best->eval.fitness[0];
    if (out->best_measurement) b["measurement"] = measurement_dict(*out->best_measurement);
    d["best"] = b;
  } else {
    d["best"] = py::none();
  }
  py::list ops;
  for (const auto& s : out->result.operators) {
    py::dict o;
    o["name"] = s.name;
    o["proposals"] = s.proposals;
    o["evaluated"] = s.evaluated;
    o["improvements"] = s.improvements;
    o["new_bests"] = s.new_bests;
    o["weight"] = s.weight;
    ops.append(o);
  }
  d["operators"] = ops;
  if (pys) {
    py::dict pr;
    pr["calls"] = pys->calls.load();
    pr["seconds"] = static_cast<double>(pys->ns.load()) * 1e-9;
    d["python_runner"] = pr;
  }
  return d;
}

// ---------------------------------------------------------------- problems written in Python

// A Python problem for the engine: `genes` (a list of gene dicts) and evaluate(genome) returning
// a number or list of numbers to minimise (None or an exception: an invalid genome, with the
// reason). The space is built once; the object is called with the GIL, one call at a time.
struct PyProblemState {
  py::object obj;
  Space space;
  std::string name;
  bool deterministic = false;
  std::atomic<bool> interrupted{false};  // Ctrl-C landed inside evaluate(): the run stops with a result
  ~PyProblemState() {
    py::gil_scoped_acquire g;
    obj = py::object();
  }
};

Gene gene_from_python(const py::handle& h, std::size_t i) {
  if (!py::isinstance<py::dict>(h)) raise(exc().error, fmt::format("genes[{}] must be a dict (see kevo.Gene)", i));
  const auto d = h.cast<py::dict>();
  auto str = [&](const char* k) -> std::string {
    if (!d.contains(k)) raise(exc().error, fmt::format("genes[{}] has no '{}'", i, k));
    return py::str(d[k]).cast<std::string>();
  };
  const std::string name = str("name"), kind = str("kind");
  const std::string group = d.contains("group") ? py::str(d["group"]).cast<std::string>() : std::string();
  if (kind == "continuous") {
    if (!d.contains("lo") || !d.contains("hi")) raise(exc().error, fmt::format("genes[{}] ('{}'): a continuous gene needs 'lo' and 'hi'", i, name));
    double lo = 0, hi = 0;
    bool log_scale = false;
    try {
      lo = d["lo"].cast<double>();
      hi = d["hi"].cast<double>();
      log_scale = d.contains("log") && d["log"].cast<bool>();
    } catch (const py::cast_error&) {
      raise(exc().error, fmt::format("genes[{}] ('{}'): 'lo' and 'hi' must be numbers, 'log' a bool", i, name));
    }
    Space probe;  // the bounds' checks, with the gene named
    try {
      probe.add(Gene::continuous(name, lo, hi, log_scale, group));
    } catch (const kevo::Error& e) {
      raise(exc().error, fmt::format("genes[{}]: {}", i, e.what()));
    }
    return probe.gene(0);
  }
  try {
    if (kind == "categorical") return Gene::categorical(name, d["labels"].cast<std::vector<std::string>>(), group);
    if (kind == "permutation") return Gene::permutation(name, d["labels"].cast<std::vector<std::string>>(), group);
    if (kind == "ordinal") return Gene::ordinal(name, d["values"].cast<std::vector<std::int64_t>>(), group);
    if (kind == "boolean") return Gene::boolean(name, group);
  } catch (const py::cast_error&) {
    raise(exc().error, fmt::format("genes[{}] ('{}'): labels must be strings, values integers", i, name));
  } catch (const py::error_already_set&) {
    raise(exc().error, fmt::format("genes[{}] ('{}') lacks its labels or values", i, name));
  }
  raise(exc().error, fmt::format("genes[{}] ('{}'): kind '{}' is not one of categorical, ordinal, permutation, boolean, continuous", i, name, kind));
}

class PyProblem {
 public:
  explicit PyProblem(std::shared_ptr<PyProblemState> s) : s_(std::move(s)) {}
  [[nodiscard]] const Space& space() const { return s_->space; }
  [[nodiscard]] std::string name() const { return s_->name; }
  [[nodiscard]] bool deterministic() const { return s_->deterministic; }
  [[nodiscard]] evo::ThreadSafety thread_safety() const { return evo::ThreadSafety::none; }
  [[nodiscard]] std::vector<evo::Evaluation> evaluate(std::span<const Genome> gs) const {
    std::vector<evo::Evaluation> out(gs.size());
    py::gil_scoped_acquire g;
    for (std::size_t i = 0; i < gs.size(); ++i) {
      evo::Evaluation& e = out[i];
      if (s_->interrupted.load()) {
        e.status = Status::error;
        e.reason = "interrupted";
        continue;
      }
      try {
        const py::object r = s_->obj.attr("evaluate")(py::cast(gs[i]));
        if (r.is_none()) {
          e.status = Status::invalid;
          e.reason = "evaluate returned None";
          continue;
        }
        std::string why;
        if (const auto v = real_from_python(r, why)) {
          e.fitness = {*v};
        } else if (PyUnicode_Check(r.ptr()) || PyBytes_Check(r.ptr()) || PyByteArray_Check(r.ptr()) ||
                   !py::isinstance<py::iterable>(r)) {
          e.status = Status::error;
          e.reason = fmt::format("evaluate must return a number, a list of numbers or None; it returned {}", why);
          continue;
        } else {
          for (const auto& x : r) {
            const auto f = real_from_python(x, why);
            if (!f) {
              e.status = Status::error;
              e.reason = fmt::format("evaluate returned objective {} = {}: not a number", e.fitness.size(), why);
              break;
            }
            e.fitness.push_back(*f);
          }
          if (e.status != Status::ok) {
            e.fitness.clear();
            continue;
          }
        }
        for (double f : e.fitness)
          if (!std::isfinite(f)) {
            e.status = Status::error;
            e.reason = fmt::format("evaluate returned {} (not finite)", f);
            e.fitness.clear();
            break;
          }
        if (e.fitness.empty() && e.status == Status::ok) {
          e.status = Status::error;
          e.reason = "evaluate returned no objective";
        }
      } catch (py::error_already_set& x) {
        if (x.matches(PyExc_KeyboardInterrupt)) s_->interrupted.store(true);
        e.status = x.matches(PyExc_KeyboardInterrupt) ? Status::error : Status::invalid;
        e.reason = x.matches(PyExc_KeyboardInterrupt) ? std::string("interrupted") : fmt::format("evaluate raised {}", one_line(x));
        e.fitness.clear();
      } catch (const py::cast_error&) {
        e.status = Status::error;
        e.reason = "evaluate must return a number, a list of numbers or None";
        e.fitness.clear();
      }
    }
    return out;
  }

 private:
  std::shared_ptr<PyProblemState> s_;
};

py::dict evolve_py(const py::object& problem, std::uint64_t budget, std::uint64_t seed, int population,
                   const py::object& algorithm, double time_limit, const std::vector<Genome>& seeds, const py::object& progress,
                   bool keep_history) {
  const RunStrategy strategy = run_strategy(budget, population, algorithm, time_limit);
  const evo::Algorithm alg = strategy.algorithm;
  if (!py::hasattr(problem, "genes") || !py::hasattr(problem, "evaluate"))
    raise(py::module_::import("builtins").attr("TypeError"), "a problem needs a 'genes' list and an evaluate(genome) method");
  auto st = std::make_shared<PyProblemState>();
  st->obj = problem;
  st->name = py::hasattr(problem, "name") ? py::str(problem.attr("name")).cast<std::string>()
                                          : py::str(py::type::of(problem).attr("__name__")).cast<std::string>();
  st->deterministic = py::hasattr(problem, "deterministic") && problem.attr("deterministic").cast<bool>();
  std::size_t i = 0;
  for (const auto& h : problem.attr("genes")) {
    Gene gene = gene_from_python(h, i++);
    try {
      st->space.add(std::move(gene));
    } catch (const Error& e) {
      raise(exc().error, e.what());
    }
  }
  if (st->space.size() == 0) raise(exc().error, "a problem needs at least one gene");
  evo::Config cfg;
  cfg.algorithm = alg;
  cfg.seed = seed;
  cfg.population = static_cast<std::size_t>(population);
  cfg.elites = std::min(cfg.elites, cfg.population - 1);  // population 2 (the documented least) keeps one elite
  cfg.budget.max_evaluations = budget;
  cfg.budget.max_seconds = time_limit;
  for (const auto& g : seeds) {
    if (!st->space.contains(g)) raise(exc().error, "a seed genome is not in the problem's space");
    cfg.seeds.push_back(g);
  }
  std::optional<evo::Engine> engine;
  try {
    engine.emplace(evo::Problem(PyProblem(st)), cfg);
    if (strategy.custom) engine->set_strategy(*strategy.custom);
  } catch (const Error& e) {
    raise(exc().error, e.what());
  }
  std::vector<evo::Individual> history;
  Interruption intr;
  double best = std::numeric_limits<double>::infinity();
  evo::Observer obs;
  std::uint64_t evaluated = 0;
  obs.on_evaluation = [&](const evo::Individual& ind) {
    ++evaluated;
    if (keep_history) history.push_back(ind);
    if (ind.eval.ok()) best = std::min(best, ind.eval.fitness[0]);
    if (intr.poll(progress, [&] { return progress(evaluated, budget, best); }) || st->interrupted.load())
      engine->request_stop();
  };
  engine->add_observer(std::move(obs));
  evo::Result res;
  std::optional<std::string> failed;
  {
    py::gil_scoped_release nogil;
    try {
      res = engine->run();
    } catch (const Error& e) {
      failed = e.what();
    }
  }
  strategy.rethrow();
  intr.rethrow();
  if (failed) raise(exc().error, *failed);
  const auto ind_dict = genome_individual_dict;
  py::dict d;
  d["problem"] = st->name;
  d["evaluations"] = res.evaluations;
  d["valid"] = res.valid;
  d["stop_reason"] = std::string(evo::to_string(res.stop_reason));
  d["interrupted"] = intr.interrupted || st->interrupted.load() || strategy.interrupted();
  d["history_hash"] = res.history_hash;
  d["best"] = res.best ? py::object(ind_dict(*res.best)) : py::object(py::none());
  py::list hist;
  for (const auto& ind : history) hist.append(ind_dict(ind));
  d["history"] = hist;
  return d;
}

// Reference evaluation on NumPy arrays: inputs by name (missing ones random with `seed`).
py::dict reference_py(const PyKernel& pk, const py::dict& inputs, std::uint64_t seed) {
  const ir::Kernel& k = pk.kernel;
  std::vector<std::pair<std::size_t, std::vector<float>>> given;
  for (const auto& [key, value] : inputs) {
    const auto name = py::str(key).cast<std::string>();
    const auto* t = k.tensor(name);
    if (!t || t->role != ir::Role::input) raise(exc().error, fmt::format("'{}' is not an input of kernel '{}'", name, k.name));
    const auto arr = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(value);
    if (!arr) raise(exc().error, fmt::format("input '{}' is not convertible to a float32 array", name));
    std::vector<py::ssize_t> want;
    for (const auto& dim : t->dims) want.push_back(static_cast<py::ssize_t>(k.dim_size(dim)));
    std::vector<py::ssize_t> got(arr.shape(), arr.shape() + arr.ndim());
    if (got != want)
      raise(exc().error, fmt::format("input '{}' has shape ({}), the kernel declares ({})", name, fmt::join(got, ", "),
                                     fmt::join(want, ", ")));
    std::vector<float> v(arr.data(), arr.data() + arr.size());
    for (auto& x : v) x = ir::round_to(t->dtype, x);
    given.emplace_back(static_cast<std::size_t>(t - k.tensors.data()), std::move(v));
  }
  // Ctrl-C cancels the evaluation and is raised (an 8192^3 reference ran to its end, minutes,
  // whatever the user pressed); the random inputs are drawn inside it too (a second at 4096^2)
  std::vector<std::vector<float>> values;
  std::atomic<bool> cancel{false};
  ir::EvalOptions eo;
  eo.cancel = &cancel;
  run_interruptibly(
      [&] {
        auto tensors = ir::random_inputs(k, seed, &cancel);
        for (auto& [i, v] : given) tensors[i] = std::move(v);
        values = ir::evaluate(k, tensors, eo);
      },
      cancel);
  py::dict out;
  for (std::size_t i = 0; i < k.tensors.size(); ++i) {
    const auto& t = k.tensors[i];
    if (t.role != ir::Role::output) continue;
    std::vector<py::ssize_t> shape;
    for (const auto& dim : t.dims) shape.push_back(static_cast<py::ssize_t>(k.dim_size(dim)));
    py::array_t<float> a(shape);
    std::copy(values[i].begin(), values[i].end(), a.mutable_data());
    out[py::str(t.name)] = a;
  }
  return out;
}

}  // namespace

#ifdef KEVO_WITH_MODEL
// An ONNX model imported (kevo/model.hpp) as plain Python data: kernels (kevo.Kernel objects with
// their ONNX bindings), the nodes not expressed, the weights kernels read as NumPy arrays, and,
// with a target, the kernel table (default-schedule times and shares).
py::dict import_onnx_py(const std::string& path, const std::map<std::string, std::int64_t>& dims, const std::string& dtype,
                        const py::object& target, const py::object& runner) {
  check_no_nul(path, "path");
  model::ImportOptions io;
  for (const auto& [k, v] : dims) io.dims[k] = v;
  if (!dtype.empty()) {
    auto t = ir::dtype_from_string(dtype);
    if (!t) raise(exc().error, fmt::format("dtype '{}': expected one of {}", dtype, ir::dtype_names()));
    io.dtype = *t;
  }
  Expected<model::Model, std::string> m = unexpected(std::string());
  {
    py::gil_scoped_release nogil;
    m = model::import_onnx(path, io);
  }
  if (!m) raise(exc().parse, m.error());
  py::dict out;
  out["file"] = m->file;
  out["producer"] = m->producer;
  out["opset"] = m->opset;
  out["nodes"] = m->nodes;
  auto bindings = [](const std::vector<model::Binding>& bs) {
    py::list l;
    for (const auto& b : bs) {
      py::dict d;
      d["tensor"] = b.tensor;
      d["value"] = b.value;
      d["shape"] = b.shape;
      d["initializer"] = b.initializer;
      l.append(d);
    }
    return l;
  };
  py::list kernels;
  for (const auto& k : m->kernels) {
    py::dict d;
    d["kind"] = k.kind;
    d["op"] = k.op;
    d["shape"] = k.shape;
    d["hash"] = fmt::format("{:016x}", k.hash);
    d["count"] = k.count();
    d["kernel"] = PyKernel(k.kernel);
    py::list inst;
    for (const auto& i : k.instances) {
      py::dict id;
      id["nodes"] = i.nodes;
      id["inputs"] = bindings(i.inputs);
      id["outputs"] = bindings(i.outputs);
      inst.append(id);
    }
    d["instances"] = inst;
    kernels.append(d);
  }
  out["kernels"] = kernels;
  py::list unsupported;
  for (const auto& u : m->unsupported) {
    py::dict d;
    d["node"] = u.node;
    d["op"] = u.op_type;
    d["reason"] = u.reason;
    unsupported.append(d);
  }
  out["not_expressed"] = unsupported;
  py::dict weights;
  for (const auto& [name, w] : m->weights) {
    std::vector<py::ssize_t> shape(w.shape.begin(), w.shape.end());
    py::array_t<float> a(shape);
    std::copy(w.data.begin(), w.data.end(), a.mutable_data());
    weights[py::str(name)] = a;
  }
  out["weights"] = weights;
  if (!target.is_none()) {
    const target::Target t = target_from(target);
    runner::Runner r = runner_from(runner, t, nullptr, 300);
    model::Profile p;
    {
      py::gil_scoped_release nogil;
      p = model::profile(*m, t, r);
    }
    py::list rows;
    for (const auto& row : p.rows) {
      py::dict d;
      d["kernel"] = row.kernel;
      d["flops"] = row.flops;
      d["bytes"] = row.bytes;
      d["ok"] = row.ok;
      d["status"] = row.status;
      d["default_ns"] = row.default_ns;
      d["total_ns"] = row.total_ns;
      d["share"] = row.share;
      rows.append(d);
    }
    out["table"] = rows;
    out["total_ns"] = p.total_ns;
  }
  return out;
}
#endif

PYBIND11_MODULE(_kevo, m) {
  m.doc() = "kevo: evolutionary search for fast compute kernels (compiled part; use `import kevo`)";
  m.attr("__version__") = KEVO_VERSION_STRING;

  auto& e = exc();
  e.error = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.Error", PyExc_Exception, nullptr));
  e.parse = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.ParseError", e.error.ptr(), nullptr));
  e.not_found = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.NotFoundError", e.error.ptr(), nullptr));
  e.schedule = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.ScheduleError", e.error.ptr(), nullptr));
  e.runner = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.RunnerError", e.error.ptr(), nullptr));
  e.no_result = py::reinterpret_borrow<py::object>(PyErr_NewException("kevo.NoResultError", e.error.ptr(), nullptr));
  m.attr("Error") = e.error;
  m.attr("ParseError") = e.parse;
  m.attr("NotFoundError") = e.not_found;
  m.attr("ScheduleError") = e.schedule;
  m.attr("RunnerError") = e.runner;
  m.attr("NoResultError") = e.no_result;
  // Anything else kevo throws becomes kevo.Error (never an abort).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ParseError& x) {
      PyErr_SetString(exc().parse.ptr(), nul_escaped(x.diagnostic().headline()).c_str());
    } catch (const Error& x) {
      PyErr_SetString(exc().error.ptr(), nul_escaped(x.what()).c_str());
    }
  });

  py::class_<PyKernel>(m, "Kernel", "A kernel: what is computed (docs/KIR.md). Immutable.")
      .def_property_readonly("name", [](const PyKernel& k) { return k.kernel.name; })
      .def_property_readonly("text", [](const PyKernel& k) { return k.text; }, "canonical .kir text")
      .def_property_readonly("dims", [](const PyKernel& k) {
        py::dict d;
        for (const auto& dim : k.kernel.dims) d[py::str(dim.name)] = dim.size;
        return d;
      })
      .def_property_readonly("tensors", [](const PyKernel& k) {
        py::list l;
        for (const auto& t : k.kernel.tensors) {
          py::dict d;
          d["name"] = t.name;
          d["dtype"] = std::string(ir::to_string(t.dtype));
          d["dims"] = t.dims;
          d["role"] = t.role == ir::Role::input ? "input" : t.role == ir::Role::output ? "output" : "temp";
          l.append(d);
        }
        return l;
      })
      .def("reference", &reference_py, py::arg("inputs") = py::dict(), py::arg("seed") = 0,
           "Reference outputs (float32 NumPy arrays by name); inputs not given are random with `seed`.")
      .def("__repr__", [](const PyKernel& k) { return fmt::format("<kevo.Kernel {}>", k.kernel.name); });

  py::class_<PyTarget>(m, "Target", "A target machine described as data (docs/TARGETS.md).")
      .def_property_readonly("name", [](const PyTarget& t) { return t.target.name; })
      .def_property_readonly("host", [](const PyTarget& t) { return t.target.host; })
      .def("__repr__", [](const PyTarget& t) { return fmt::format("<kevo.Target {}>", t.target.name); });

  py::class_<PyAskContext, std::shared_ptr<PyAskContext>>(
      m, "AskContext", "What a Python strategy's ask(n, ctx) is given: the engine's services for one batch.")
      .def_property_readonly("n", [](const PyAskContext& c) { c.get(); return c.n; }, "candidates asked for")
      .def_property_readonly("size", [](const PyAskContext& c) { return c.get().size(); },
                             "candidates admitted to this batch so far")
      .def_property_readonly("seed", [](const PyAskContext& c) { return c.get().seed(); }, "the run's seed")
      .def_property_readonly("generation", [](const PyAskContext& c) { return c.get().generation(); },
                             "batches completed so far")
      .def_property_readonly("evaluations", [](const PyAskContext& c) { return c.get().evaluations(); },
                             "evaluations so far in the run")
      .def_property_readonly("width", [](const PyAskContext& c) { return c.get().space().width(); },
                             "values in a genome (a permutation gene takes one per item)")
      .def_property_readonly("genes", [](const PyAskContext& c) {
            py::list out;
            const auto& sp = c.get().space();
            for (std::size_t i = 0; i < sp.size(); ++i) {
              const Gene& g = sp.gene(i);
              py::dict d;
              d["name"] = g.name;
              d["kind"] = std::string(to_string(g.kind));
              d["choices"] = g.choices();
              d["width"] = g.width();
              d["offset"] = sp.offset(i);
              if (g.kind == GeneKind::continuous) {
                d["lo"] = g.lo;
                d["hi"] = g.hi;
                d["log"] = g.log_scale;
              }
              out.append(d);
            }
            return out;
          }, "the space's genes: name, kind, choices, width and offset in the genome (continuous: also lo, hi, log)")
      .def_property_readonly("best", [](const PyAskContext& c) -> py::object {
            const evo::Individual* b = c.get().best();
            if (b == nullptr) return py::none();
            py::dict d;
            d["id"] = b->id;
            d["genome"] = b->genome;
            d["fitness"] = b->eval.fitness;
            return d;
          }, "the run's best so far (id, genome, fitness) or None")
      .def("rng_seed", [](const PyAskContext& c, std::uint64_t stream) {
            Rng r = c.get().rng(stream);
            return r();
          }, py::arg("stream"), "a 64-bit seed drawn from the run's random stream `stream` (same seed, same value)")
      .def("random", [](const PyAskContext& c, std::uint64_t seed) {
            Rng r(seed);
            return c.get().space().random(r);
          }, py::arg("seed"), "a uniformly random genome, a pure function of `seed`")
      .def("offer", [](const PyAskContext& c, const py::object& genome, const std::string& label, std::uint64_t tag,
                       bool repair) {
            evo::AskContext& ctx = c.get();
            Genome g = genome_from_python(ctx.space(), genome, "AskContext.offer");
            Rng rng = ctx.rng(PyStrategy::kOfferStream).fork(ctx.generation()).fork(ctx.size());
            return ctx.offer(std::move(g), rng, label.empty() ? std::string_view("python") : std::string_view(label), tag, repair);
          }, py::arg("genome"), py::arg("label") = "python", py::arg("tag") = 0, py::arg("repair") = true,
          "offers a genome; True when admitted (False: a duplicate, outside the space, or the budget is full)");

  py::class_<PyCandidate>(m, "Candidate", "What a Python runner is given for one schedule.")
      .def_readonly("kernel_text", &PyCandidate::kernel_text)
      .def_readonly("schedule_text", &PyCandidate::schedule_text)
      .def_readonly("kernel_name", &PyCandidate::kernel_name)
      .def_readonly("target_name", &PyCandidate::target_name)
      .def_property_readonly("program", [](const PyCandidate& c) { return stats_dict(c.stats, c.buffers); },
                             "the tile program's figures (instructions, bytes, flops, SBUF/PSUM use)")
      .def("nki", &PyCandidate::nki, "the emitted NKI source of this schedule");

  py::class_<schedule::ScheduleSpace>(m, "Space", "The schedule space of a kernel on a target (docs/SCHEDULE.md).")
      .def(py::init([](const py::object& kernel, const py::object& target, bool full) {
             return derive(kernel_from(kernel), target_from(target), full);
           }),
           py::arg("kernel"), py::arg("target") = "trn2", py::kw_only(), py::arg("full") = false,
           "full=True: the full space, with the structures the search leaves out by default (dma=pair, "
           "transpose=dma_transpose_region, rows=interleave_out|interleave_all; docs/SCHEDULE.md)")
      .def_property_readonly("genes", [](const schedule::ScheduleSpace& s) {
        py::list l;
        for (const auto& g : s.genes().genes()) {
          py::dict d;
          d["name"] = g.name;
          d["kind"] = to_string(g.kind);
          d["labels"] = g.labels;
          d["group"] = g.group;
          l.append(d);
        }
        return l;
      })
      .def_property_readonly("log10_size", [](const schedule::ScheduleSpace& s) { return s.genes().log10_cardinality(); })
      .def_property_readonly("kernel", [](const schedule::ScheduleSpace& s) { return PyKernel(s.kernel()); }, "the kernel, as given")
      .def_property_readonly("scheduled_kernel", [](const schedule::ScheduleSpace& s) { return PyKernel(s.scheduled_kernel()); },
                             "the kernel schedules are written over: long indices split across partitions, contracted indices held as one; same tensors and "
                             "memory (docs/SCHEDULE.md)")
      .def_property_readonly("splits", [](const schedule::ScheduleSpace& s) { return s.splits(); },
                             "one line per step of the scheduled view (a split, or indices held as one), e.g. 'i = 8192*i_o + i_i (...)'")
      .def("default", [](const schedule::ScheduleSpace& s) { return s.default_genome(); }, "the default schedule's genome")
      .def("parse", [](const schedule::ScheduleSpace& s, const std::string& text) { return genome_of(s, py::str(text)); })
      .def("print", [](const schedule::ScheduleSpace& s, const py::object& g) { return s.print(genome_of(s, g, "genome")); },
           py::arg("genome"))
      .def("sample", [](const schedule::ScheduleSpace& s, std::uint64_t seed) {
        Rng rng(seed);
        Genome g = s.genes().random(rng);
        s.repair(g, rng);
        return g;
      }, py::arg("seed"), "a random genome, repaired toward validity")
      .def("validity", [](const schedule::ScheduleSpace& s, std::size_t samples, std::uint64_t seed) {
        // Ctrl-C checked after every 256 samples: validity(10**12) would run for days without seeing it.
        std::optional<py::error_already_set> interrupted;
        schedule::ScheduleSpace::Validity v;
        {
          py::gil_scoped_release nogil;
          v = s.sampled_validity(samples, seed, std::numeric_limits<double>::infinity(), [&] {
            py::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() == 0) return false;
            interrupted.emplace();
            return true;
          });
        }
        if (interrupted) throw std::move(*interrupted);
        return v.share;
      }, py::arg("samples") = 200, py::arg("seed") = 0, "share of random genomes that lower");

  m.def("parse_kernel", &parse_kernel, py::arg("text"), py::arg("file") = "<kir>", "Parses .kir text.");
  m.def("workload", [](const std::string& spec) { return workload(spec); }, py::arg("spec"), "A built-in workload, e.g. 'matmul:M=512,N=512,K=512,dtype=bf16'.");
  m.def("workloads", [] {
    py::list l;
    for (const auto& w : ir::workloads()) l.append(w.name);
    return l;
  });
  m.def("load_target", [](const std::string& name) { return load_target(name); }, py::arg("name"), "A built-in target (trn1, trn2, trn3, host) or a .json file.");
  m.def("targets", [] { return target::builtin_targets(); });
  m.def("_lower", &lower_py, py::arg("kernel"), py::arg("schedule"), py::arg("target"), py::arg("nki"));
  m.def("_eval", &eval_py, py::arg("kernel"), py::arg("schedule"), py::arg("target"), py::arg("runner"), py::arg("timeout"));
  m.def("_search", &search_py, py::arg("kernel"), py::arg("target"), py::arg("runner"), py::arg("budget"), py::arg("seed"),
        py::arg("threads"), py::arg("population"), py::arg("algorithm"), py::arg("time_limit"), py::arg("seed_schedules"),
        py::arg("progress"), py::arg("timeout"), py::arg("verify_candidates"), py::arg("checkpoint_dir"),
        py::arg("resume"));
#ifdef KEVO_WITH_MODEL
  m.def("_import_onnx", &import_onnx_py, py::arg("path"), py::arg("dims"), py::arg("dtype"), py::arg("target"), py::arg("runner"));
#endif
  m.def("_evolve", &evolve_py, py::arg("problem"), py::arg("budget"), py::arg("seed"), py::arg("population"),
        py::arg("algorithm"), py::arg("time_limit"), py::arg("seeds"), py::arg("progress"), py::arg("keep_history"));
}
