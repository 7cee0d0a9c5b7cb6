// What every subcommand of dtlaunch parses its command line with: CLI11 options bound straight
// to what lib/ takes, each declared, checked and converted once, through lib's parsers, so that
// an error quotes what the user typed; the usage error's one line; the program's argv.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/names.hpp"
#include "core/parse.hpp"

namespace dtlaunch {

// One of a few words: the names of an enum's values, from the enum's one table of names. A word
// outside it is refused as numbers are, quoting what the user typed through core's excerpt
// ("--mode='bogus': expected one of auto, slurm, local"), never with CLI11's own check, whose
// message shows its mapping ("Check bogus value in {chrome->2,json->1,text->0} ... FAILED").
// Every choice option goes through here.
template <class Enum, std::size_t N, class OnValue>
CLI::Option* add_choice_function(CLI::App& app, const std::string& flag,
                                 const core::Named<Enum> (&choices)[N], OnValue on_value,
                                 const std::string& help) {
  std::string expected = "expected one of";
  for (const core::Named<Enum>& choice : choices)
    expected.append(&choice == choices ? " " : ", ").append(choice.name);
  return app
      .add_option_function<std::string>(
          flag,
          [&choices, on_value, flag, expected](const std::string& word) {
            const std::optional<Enum> value = core::value_of(word, choices);
            if (!value) throw core::Error::bad_env(flag, word, expected);
            on_value(*value);
          },
          help)
      ->type_name("WORD");
}

template <class Target, class Enum, std::size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Target& target,
                        const core::Named<Enum> (&choices)[N], const std::string& help) {
  return add_choice_function(
      app, flag, choices, [&target](Enum value) { target = value; }, help);
}

// The --format of doctor's report and of job's summary: a table, or json when true.
inline constexpr core::Named<bool> kTableOrJson[] = {{false, "table"}, {true, "json"}};

// Numbers are taken as text and converted by lib's parser, so that an error quotes what the
// user typed ("--master-port='99999999999999999999': expected an integer in 1..65535").
template <class T>
struct Number {
  using type = T;
};
template <class T>
struct Number<std::optional<T>> {
  using type = T;
};

template <class T>
CLI::Option* add_count(CLI::App& app, const std::string& flag, T& target, std::uint64_t min,
                       std::uint64_t max, const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag,
          [&target, flag, min, max](const std::string& text) {
            target = static_cast<typename Number<T>::type>(core::parse_count(flag, text, min, max));
          },
          help)
      ->type_name("N");
}

template <class T>
CLI::Option* add_seconds(CLI::App& app, const std::string& flag, T& target,
                         const std::string& help) {
  return app
      .add_option_function<std::string>(
          flag,
          [&target, flag](const std::string& text) {
            target = core::parse_seconds(flag, text, 86400);
          },
          help)
      ->type_name("SECONDS");
}

// CLI11 reports bad usage with its own exit codes (100+); ours is 2, with one line on stderr.
int usage_error(std::string what);

// The program and its arguments after a parse: what follows "--", or the first positional on.
// Throws Error (usage) for an unknown option that CLI11 would hand over as the program name.
std::vector<std::string> program_argv(const CLI::App& app);

// A subcommand that takes its arguments verbatim, as scontrol does (hostnames, hostlist): run
// before CLI11 parses, which would take a first "--" as its own and leave no argument, read
// "[1-3]" as a vector or "-n1" as an option (Slurm's hostlists begin with '[' and may begin
// with '-').
struct VerbatimCommand {
  const char* name;
  const char* summary;     // its line in dtlaunch --help
  const char* help;        // dtlaunch NAME --help
  const char* none_given;  // the usage error when no argument is given
  int (*run)(const std::vector<std::string>& args, std::ostream& out);
};

// `command`'s status when argv names it (argv[1]), nullopt for any other command line.
std::optional<int> run_verbatim(const VerbatimCommand& command, int argc, char** argv);

// A subcommand whose arguments CLI11 leaves unparsed (prefix_command()), for its line in --help
// (a verbatim command) or to check them itself (env-table).
CLI::App* add_verbatim(CLI::App& app, const std::string& name, const std::string& help);

}  // namespace dtlaunch
