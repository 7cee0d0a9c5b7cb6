// `dtlaunch hostlist [--] NAME...`: host names compressed into one Slurm hostlist expression.
#include "cli/commands.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

namespace {

constexpr const char* kHostlistHelp =
    R"(Compress host names into one Slurm hostlist expression (as 'scontrol show hostlist').

  dtlaunch hostlist [--] NAME...

Every argument is taken verbatim (an argument may itself be a hostlist, or a comma-separated
list); a first '--' is dropped, as scontrol does; --help alone prints this.

Examples:
  dtlaunch hostlist gpu001 gpu002 gpu003 gpu007    # gpu[001-003,007]
  dtlaunch hostlist 'n[1-2]' n3                    # n[1-3]
  dtlaunch hostlist -- n1 n2                       # n[1-2]

Exit status: 0 success; 2 bad name or expression (docs/hostlist.md).
)";

}  // namespace

const VerbatimCommand kHostlistCommand = {
    "hostlist",
    "compress host names into one Slurm hostlist expression (as 'scontrol show hostlist')",
    kHostlistHelp, "hostlist: no host name given (dtlaunch hostlist gpu001 gpu002)",
    cli::run_hostlist};

}  // namespace dtlaunch
