// kevo — the command line: search, eval, space, show, calibrate. Every failure the user can cause (flags,
// files, kernels, schedules, configs, checkpoints) is one line on stderr and exit code 2.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "completion.hpp"
#include "options.hpp"
#include "kevo/verify/interpreter.hpp"
#include "kevo/core/error.hpp"

namespace {

constexpr const char* kVersion = "kevo " KEVO_VERSION_STRING;

// The first line of a message, safe for a terminal (kevo::printable).
std::string first_line(std::string_view s) {
  const auto nl = s.find('\n');
  return kevo::printable(s.substr(0, nl));
}

// Names of the options the user gave on the command line (for config-file precedence).
std::vector<std::string> given(const CLI::App* app) {
  std::vector<std::string> out;
  // by long name, as --config's keys are (get_name(false, true) gave "r,--runner" for an option
  // with a short alias, so the config's value overrode a flag given as -r or --runner)
  for (const auto* opt : app->get_options())
    if (opt->count() > 0)
      for (const auto& n : opt->get_lnames()) out.push_back(n);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  kevo::verify::configure_process_blas();  // an application: one-thread OpenBLAS for the interpreter
  using namespace kevo::cli;
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"kevo: evolutionary search for fast compute kernels", "kevo"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version,-V", std::string(kVersion));
  Options o;

  auto kernel_opts = [&](CLI::App* sc, bool with_runner, bool gpu) {
    sc->add_option("KERNEL", o.kernel_file, "a .kir kernel file");
    sc->add_option("--workload,-w", o.workload, "a workload NAME:ARGS, e.g. matmul:M=2048,N=2048,K=2048,dtype=bf16");
    sc->add_option("--target,-t", o.target,
                   gpu ? "trn1|trn2|trn3|host|FILE.json, or a GPU: h200 (default trn2; host with --runner cpu; docs/GPU.md)"
                       : "trn1|trn2|trn3|host|FILE.json (default trn2; host with --runner cpu)");
    if (with_runner) sc->add_option("--runner,-r", o.runner, "sim|cpu|cmd:COMMAND (default sim)");
    sc->add_option("--space", o.space, "searched|full: the full space adds structures no search needs by default "
                                       "(dma=pair, transpose=dma_transpose_region, rows=interleave_out|interleave_all, rest=tiles; docs/SCHEDULE.md)")
        ->check(CLI::IsMember({"searched", "full"}));
    sc->add_flag("--json", o.json, "machine-readable output on stdout");
  };

  auto* search = app.add_subcommand("search", "search schedules for a kernel (with no arguments: the default job)");
  kernel_opts(search, true, true);
  bounded(search->add_option("--budget,-n", o.budget, "evaluations (default 2000; with --resume: the total)"), "budget");
  bounded(search->add_option("--time", o.time_limit, "wall-time limit in seconds (0: none)"), "time");
  bounded(search->add_option("--seed,-s", o.seed, "random seed (default 1)"), "seed");
  bounded(search->add_option("--threads,-j", o.threads, "evaluation threads (default 0: all cores)"), "threads");
  search->add_option("--algorithm,-a", o.algorithm, "ga|islands|map-elites|async|random|exhaustive|surrogate (default ga)");
  bounded(search->add_option("--population", o.population, "population size per island (default 16 for ga, 32 otherwise)"), "population");
  bounded(search->add_option("--patience", o.patience, "stop after this many evaluations without a new best"), "patience");
  bounded(search->add_option("--eval-timeout", o.eval_timeout,
                             "seconds one candidate may take with --runner cmd: (default: adaptive, docs/CLI.md)"),
          "eval-timeout");
  search->add_option("--mpi-mode", o.mpi_mode, "under mpirun/srun: farm (rank 0 runs the search, every rank evaluates; default) | "
                     "islands (each rank evolves its own, migrants on a ring) | off (docs/SCALING.md)");
  bounded(search->add_option("--mpi-timeout", o.mpi_timeout, "seconds a rank waits for another before the job ends (default 1800)"),
          "mpi-timeout");
  search->add_option("--seed-schedule", o.seed_schedules,
                     "a schedule to evaluate first (file, - or text; repeatable): start from known schedules");
  search->add_option("--llm", o.llm_config, "TOML file configuring the LLM operator");
  search->add_flag("--llm-optional", o.llm_optional, "an LLM that fails its start check is a warning, not an error");
  search->add_option("--out,-o", o.out, "results directory (default runs/<timestamp>)");
  search->add_option("--resume", o.resume, "continue the run in this results directory");
  search->add_option("--cache", o.cache_file, "append-only measurement cache shared across runs");
  search->add_option("--db", o.db_file, "tuning-records database (default $KEVO_DB, else $XDG_DATA_HOME/kevo/records.db, else ~/.local/share/kevo/records.db)");
  search->add_flag("--no-db", o.no_db, "record nothing and take nothing from records");
  search->add_flag("--no-warm-start", o.no_warm_start, "record, but do not seed the search from records");
  search->add_option("--config,-c", o.config_file, "TOML configuration (flags override it)");
  search->add_flag("--quiet,-q", o.quiet, "no progress; only the summary line and the results path");

  auto* eval = app.add_subcommand("eval", "lower and measure one schedule");
  kernel_opts(eval, true, false);
  eval->add_option("--schedule,-S", o.schedule_file,
                   "schedule file, - for stdin, or the schedule text itself (default: the space's default schedule)");
  bounded(eval->add_option("--eval-timeout", o.eval_timeout, "seconds the candidate may take with --runner cmd:"), "eval-timeout");
  eval->add_flag("--quiet,-q", o.quiet, "no progress line while a cpu or cmd: measurement runs");

  auto* space = app.add_subcommand("space", "show the schedule space of a kernel");
  kernel_opts(space, false, false);
  bounded(space->add_option("--samples", o.samples, "random genomes lowered to estimate validity (default 1000)"), "samples");

  auto* show = app.add_subcommand("show", "summarise a finished or interrupted run");
  show->add_option("DIR", o.out, "results directory")->required();
  show->add_flag("--json", o.json, "print result.json");

  auto* calibrate = app.add_subcommand("calibrate", "fit the simulator's parameters to measured kernels; write a target file");
  calibrate->add_option("MEASUREMENTS", o.measurements_file, "TOML file of measured kernels (docs/CALIBRATE.md)")->required();
  calibrate->add_option("--target,-t", o.target, "base target: trn1|trn2|trn3|FILE.json (default: the rows' target)");
  calibrate->add_option("--out,-o", o.out, "fitted target file to write (default <target>.fitted.json)");
  calibrate->add_option("--report", o.report_file, "also write the fit report as markdown");
  calibrate->add_option("--toolchain", o.toolchain, "use only the rows of this toolchain, e.g. current");
  // one argument split here, empty names kept (CLI11's delimiter dropped them, and `--params ,,,`
  // then took the next flag as a parameter's name)
  calibrate->add_option_function<std::string>(
      "--params",
      [&o](const std::string& text) {
        o.fit_params.clear();
        for (std::size_t at = 0;;) {
          const std::size_t comma = text.find(',', at);
          o.fit_params.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
          if (comma == std::string::npos) break;
          at = comma + 1;
        }
      },
      "parameters to fit, comma-separated (replaces [fit] params)");
  calibrate->add_flag("--json", o.json, "machine-readable result on stdout");

  auto* db = app.add_subcommand("db", "the tuning-records database: list, show, best, export, import, gc");
  db->add_option("ACTION", o.db_action, "list|show|best|export|import|gc")->required()->check(
      CLI::IsMember({"list", "show", "best", "export", "import", "gc"}));
  db->add_option("ARG", o.db_arg, "show/best: a workload NAME:ARGS or a .kir file; export/import: a JSON lines file (export: - or none for stdout)");
  db->add_option("--db", o.db_file, "records database (default $KEVO_DB, else $XDG_DATA_HOME/kevo/records.db, else ~/.local/share/kevo/records.db)");
  db->add_option("--target,-t", o.target, "only this target (list, show, best)");
  bounded(db->add_option("--keep", o.keep_best, "gc: fastest records kept per kernel, target and runner (default 16)"), "keep");
  db->add_flag("--json", o.json, "machine-readable output on stdout");

  auto* check = app.add_subcommand("check", "re-measure recorded best schedules; non-zero exit on a regression");
  check->add_option("KERNELS", o.check_file, "TOML list of [[kernel]] workload/kernel + target (default: every recorded kernel)");
  check->add_option("--db", o.db_file, "records database (default $KEVO_DB, else $XDG_DATA_HOME/kevo/records.db, else ~/.local/share/kevo/records.db)");
  check->add_option("--runner,-r", o.runner, "sim|cpu|cmd:COMMAND (default sim)");
  check->add_option("--target,-t", o.target, "only kernels recorded on this target");
  bounded(check->add_option("--tolerance", o.check_tolerance, "relative slow-down allowed beyond the recorded noise (default 0.02)"),
          "tolerance");
  check->add_option("--junit", o.junit_file, "write a JUnit XML report here");
  check->add_flag("--json", o.json, "machine-readable output on stdout");

  const auto [model, run_model] = add_model_command(app);
  auto* version = app.add_subcommand("version", "print kevo's version");
  auto* workloads = app.add_subcommand("workloads", "list the workload library (--workload NAME:ARGS)");
  workloads->add_flag("--json", o.json, "machine-readable output on stdout");
  auto* targets = app.add_subcommand("targets", "list the built-in targets; `targets show NAME` prints one as JSON");
  targets->add_flag("--json", o.json, "machine-readable output on stdout");
  targets->require_subcommand(0, 1);
  std::string target_to_show;
  auto* targets_show = targets->add_subcommand("show", "print a built-in target's JSON");
  targets_show->add_option("NAME", target_to_show, "trn1|trn2|trn3|host")->required();

  auto* completion = app.add_subcommand("completion", "print a shell completion script: source <(kevo completion bash)");
  std::string shell;
  completion->add_option("SHELL", shell, "bash|zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  auto* man = app.add_subcommand("man", "print the kevo(1) man page (roff): kevo man > kevo.1; man -l kevo.1");

  if (argc <= 1) {  // bare `kevo`: usage, not a 2,000-evaluation search
    fmt::print("{}", app.help());
    return 0;
  }
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
  // An option given an empty value (a script's unset variable: --resume "$DIR") is an error, not
  // the option left out: `--resume ""` must not start a new search, nor `-c ""` run without the config.
  for (const CLI::App* sc = &app; sc != nullptr;) {
    for (const CLI::Option* opt : sc->get_options())
      if (opt->count() > 0 && opt->get_expected_min() > 0)
        for (const std::string& r : opt->results())
          if (r.find_first_not_of(" \t\r\n") == std::string::npos) {
            const std::string n = opt->get_name();
            fmt::print(stderr, "kevo: error: {}: an empty value (see kevo --help)\n", n.empty() ? opt->get_name(true) : n);
            return 2;
          }
    const auto subs = sc->get_subcommands();
    sc = subs.empty() ? nullptr : subs.front();
  }

  try {
    if (*version) {
      fmt::print("{}\n", kVersion);
      return 0;
    }
    if (*completion) {
      fmt::print("{}", shell == "zsh" ? zsh_completion(app) : bash_completion(app));
      return 0;
    }
    if (*man) {
      fmt::print("{}", man_page(app, kVersion));
      return 0;
    }
    if (*workloads) return cmd_workloads(o);
    if (*targets_show) return cmd_target_show(target_to_show);
    if (*targets) return cmd_targets(o);
    if (*eval) return cmd_eval(o);
    if (*space) return cmd_space(o);
    if (*show) return cmd_show(o);
    if (*calibrate) return cmd_calibrate(o);
    if (*db) return cmd_db(o);
    if (*check) return cmd_check(o);
    if (*model) return run_model();
    o.given_flags = given(search);
    if (!o.config_file.empty()) {
      apply_config(o, o.config_file, o.given_flags);
      try {
        return cmd_search(o);
      } catch (const UsageError& e) {
        throw UsageError{as_configured(o, e.message)};
      }
    }
    return cmd_search(o);
  } catch (const UsageError& e) {
    fmt::print(stderr, "kevo: error: {}\n", first_line(e.message));
    return 2;
  } catch (const kevo::Error& e) {
    fmt::print(stderr, "kevo: error: {}\n", first_line(e.what()));
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // a path the system refuses (too long, not a directory, no permission): the user's input
    fmt::print(stderr, "kevo: error: {}: {}\n", first_line(e.path1().string()), e.code().message());
    return 2;
  } catch (const std::system_error& e) {
    // stdout closed by its reader (`kevo targets show trn2 | head -5`): the reader has what it
    // wanted; end as a SIGPIPE would (SIGPIPE is ignored above, for the workers' pipes), quietly
    if (e.code().value() == EPIPE) return 128 + SIGPIPE;
    fmt::print(stderr, "kevo: internal error: {}\n", first_line(e.what()));
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kevo: internal error: {}\n", first_line(e.what()));
    return 1;
  }
}
