// `dtlaunch env-table`: the tables of the variables exported, removed and read.
#include <iostream>

#include "cli/commands.hpp"
#include "core/text.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

CLI::App* add_env_table_command(CLI::App& app) {
  return add_verbatim(
      app, "env-table",
      "print the Markdown tables of the variables dtlaunch exports, removes and reads");
}

int run_env_table_command(const CLI::App& env_table_app) {
  if (!env_table_app.remaining().empty())
    return usage_error("env-table takes no arguments, got '" +
                       core::excerpt(env_table_app.remaining().front()) + "'");
  return cli::run_env_table(std::cout);
}

}  // namespace dtlaunch
