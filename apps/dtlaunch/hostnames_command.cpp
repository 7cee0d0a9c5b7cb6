// `dtlaunch hostnames [--] EXPR...`: Slurm hostlists expanded, one host per line.
#include "cli/commands.hpp"
#include "subcommands.hpp"

namespace dtlaunch {

namespace {

constexpr const char* kHostnamesHelp =
    R"(Expand Slurm hostlist expressions, one host per line (as 'scontrol show hostnames').

  dtlaunch hostnames [--] EXPR...

Every argument is an expression, taken verbatim ('[1-3]' and '-n1' too); a first '--' is
dropped, as scontrol does; --help alone prints this.

Examples:
  dtlaunch hostnames 'gpu[001-003,007]'        # gpu001 gpu002 gpu003 gpu007
  dtlaunch hostnames "$SLURM_JOB_NODELIST"     # the hosts of this job
  dtlaunch hostnames -- '[1-3]'                # 1 2 3

Exit status: 0 success; 2 bad expression (docs/hostlist.md).
)";

}  // namespace

const VerbatimCommand kHostnamesCommand = {
    "hostnames",
    "expand Slurm hostlist expressions, one host per line (as 'scontrol show hostnames')",
    kHostnamesHelp, "hostnames: no hostlist expression given (dtlaunch hostnames 'gpu[001-003]')",
    cli::run_hostnames};

}  // namespace dtlaunch
