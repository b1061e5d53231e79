// Shell completion and the man page, generated from the one CLI definition (the CLI::App that
// main() builds), so they cannot drift from the flags kevo accepts.
#pragma once
#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace kevo::cli {

// A bash completion script (`source <(kevo completion bash)`): subcommands, then each one's flags.
std::string bash_completion(const CLI::App& app);
// The same for zsh, through bashcompinit (`source <(kevo completion zsh)`).
std::string zsh_completion(const CLI::App& app);
// kevo(1) in roff (`kevo man > kevo.1; man -l kevo.1`).
std::string man_page(const CLI::App& app, std::string_view version);

}  // namespace kevo::cli
