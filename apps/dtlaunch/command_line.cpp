#include "command_line.hpp"

#include <iostream>
#include <string_view>

#include "core/text.hpp"

namespace dtlaunch {

int usage_error(std::string what) {
  for (char& c : what)
    if (c == '\n') c = ' ';
  while (!what.empty() && what.back() == ' ') what.pop_back();
  std::cerr << "dtlaunch: " << what << "\n";
  return static_cast<int>(core::ExitCode::kBadInput);
}

std::vector<std::string> program_argv(const CLI::App& app) {
  std::vector<std::string> argv = app.remaining();
  if (!argv.empty() && argv.front() == "--") {
    argv.erase(argv.begin());
  } else if (!argv.empty() && argv.front().size() > 1 && argv.front().front() == '-') {
    // prefix_command() hands an unknown option over as the program name; a typo in an option
    // must not become "command not found" (a program named "-x" goes after "--").
    throw core::Error::usage("unknown option " + core::excerpt(argv.front()) +
                             " (see dtlaunch --help)");
  }
  return argv;
}

std::optional<int> run_verbatim(const VerbatimCommand& command, int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) != command.name) return std::nullopt;
  std::vector<std::string> args(argv + 2, argv + argc);
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << command.help;
    return 0;
  }
  // A first "--" is dropped, as scontrol does.
  if (!args.empty() && args.front() == "--") args.erase(args.begin());
  if (args.empty()) return usage_error(command.none_given);
  return command.run(args, std::cout);
}

CLI::App* add_verbatim(CLI::App& app, const std::string& name, const std::string& help) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->prefix_command();
  return sub;
}

}  // namespace dtlaunch
