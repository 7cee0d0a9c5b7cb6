// dtlaunch's options, bound with CLI11 straight to what lib/ takes (launch/options.hpp,
// cli/commands.hpp). Each option is declared, checked and converted once, here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "core/names.hpp"

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

struct LaunchCommand {
  launch::LaunchOptions options;
  cli::RunFlags flags;
};

// The options of a launch (`dtlaunch ...`) or of `dtlaunch doctor ...`, which share all but
// --dry-run, --preflight and the meaning of --format and the timeout. The app must have
// prefix_command() set: everything from the program on is left for program_argv.
void add_launch_options(CLI::App& app, LaunchCommand& command, bool doctor);

// `dtlaunch trace DIR [--format text|json|chrome] [--html FILE] [--run ID]`.
using TraceCommand = trace::TraceOptions;
CLI::App* add_trace_options(CLI::App& app, TraceCommand& command);

// The program and its arguments after a parse: what follows "--", or the first positional on.
// Throws Error (usage) for an unknown option that CLI11 would hand over as the program name.
std::vector<std::string> program_argv(const CLI::App& app);

}  // namespace dtlaunch
