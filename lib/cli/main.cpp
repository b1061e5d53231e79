// kevo — the command line: search, eval, space, show, calibrate. Every failure the user can cause (flags,
// files, kernels, schedules, configs, checkpoints) is one line on stderr and exit code 2.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "options.hpp"
#include "kevo/verify/interpreter.hpp"
#include "kevo/core/error.hpp"

namespace {

std::string first_line(std::string_view s) {
  const auto nl = s.find('\n');
  return std::string(s.substr(0, nl));
}

// Names of the options the user gave on the command line (for config-file precedence).
std::vector<std::string> given(const CLI::App* app) {
  std::vector<std::string> out;
  for (const auto* opt : app->get_options())
    if (opt->count() > 0) {
      std::string n = opt->get_name(false, true);
      while (!n.empty() && n.front() == '-') n.erase(n.begin());
      out.push_back(n);
    }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  kevo::verify::configure_process_blas();  // an application: one-thread OpenBLAS for the interpreter
  using namespace kevo::cli;
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"kevo: evolutionary search for fast compute kernels", "kevo"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("kevo 0.1.0"));
  Options o;

  auto kernel_opts = [&](CLI::App* sc, bool with_runner) {
    sc->add_option("KERNEL", o.kernel_file, "a .kir kernel file");
    sc->add_option("--workload,-w", o.workload, "a workload NAME:ARGS, e.g. matmul:M=2048,N=2048,K=2048,dtype=bf16");
    sc->add_option("--target,-t", o.target, "trn1|trn2|trn3|host|FILE.json (default trn2; host with --runner cpu)");
    if (with_runner) sc->add_option("--runner,-r", o.runner, "sim|cpu|cmd:COMMAND (default sim)");
    sc->add_flag("--json", o.json, "machine-readable output on stdout");
  };

  auto* search = app.add_subcommand("search", "search schedules for a kernel (the default job with no arguments)");
  kernel_opts(search, true);
  search->add_option("--budget,-n", o.budget, "evaluations (default 2000)");
  search->add_option("--time", o.time_limit, "wall-time limit in seconds");
  search->add_option("--seed,-s", o.seed, "random seed (default 1)");
  search->add_option("--threads,-j", o.threads, "evaluation threads (default: all cores)");
  search->add_option("--algorithm,-a", o.algorithm, "ga|islands|map-elites|async|random|exhaustive (default ga)");
  search->add_option("--population", o.population, "population size per island");
  search->add_option("--patience", o.patience, "stop after this many evaluations without a new best");
  search->add_option("--llm", o.llm_config, "TOML file configuring the LLM operator");
  search->add_option("--out,-o", o.out, "results directory (default runs/<timestamp>)");
  search->add_option("--resume", o.resume, "continue the run in this results directory");
  search->add_option("--cache", o.cache_file, "append-only measurement cache shared across runs");
  search->add_option("--config,-c", o.config_file, "TOML configuration (flags override it)");
  search->add_flag("--quiet,-q", o.quiet, "no progress output");

  auto* eval = app.add_subcommand("eval", "lower and measure one schedule");
  kernel_opts(eval, true);
  eval->add_option("--schedule,-S", o.schedule_file, "schedule text file (default: the space's default schedule)");

  auto* space = app.add_subcommand("space", "show the schedule space of a kernel");
  kernel_opts(space, false);
  space->add_option("--samples", o.samples, "random genomes lowered to estimate validity (default 1000)");

  auto* show = app.add_subcommand("show", "summarise a finished or interrupted run");
  show->add_option("DIR", o.out, "results directory")->required();
  show->add_flag("--json", o.json, "print result.json");

  auto* calibrate = app.add_subcommand("calibrate", "fit the simulator's parameters to measured kernels; write a target file");
  calibrate->add_option("MEASUREMENTS", o.measurements_file, "TOML file of measured kernels (docs/CALIBRATE.md)")->required();
  calibrate->add_option("--target,-t", o.target, "base target: trn1|trn2|trn3|FILE.json (default: the rows' target)");
  calibrate->add_option("--out,-o", o.out, "fitted target file to write (default <target>.fitted.json)");
  calibrate->add_option("--report", o.report_file, "also write the fit report as markdown");
  calibrate->add_option("--toolchain", o.toolchain, "use only the rows of this toolchain, e.g. current");
  calibrate->add_option("--params", o.fit_params, "parameters to fit, comma-separated (replaces [fit] params)")->delimiter(',');
  calibrate->add_flag("--json", o.json, "machine-readable result on stdout");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "kevo: error: {} (see kevo --help)\n", first_line(e.what()));
    return 2;
  }

  try {
    if (*eval) return cmd_eval(o);
    if (*space) return cmd_space(o);
    if (*show) return cmd_show(o);
    if (*calibrate) return cmd_calibrate(o);
    if (!o.config_file.empty()) apply_config(o, o.config_file, given(search));
    return cmd_search(o);
  } catch (const UsageError& e) {
    fmt::print(stderr, "kevo: error: {}\n", first_line(e.message));
    return 2;
  } catch (const kevo::Error& e) {
    fmt::print(stderr, "kevo: error: {}\n", first_line(e.what()));
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: internal error: {}\n", first_line(e.what()));
    return 1;
  }
}
