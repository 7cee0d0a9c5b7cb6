// The one error type of dtlaunch. Every failure that reaches the user is an Error carrying the
// exit status it must produce; apps/ catch it exactly once and turn it into that status.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace dtlaunch::core {

// The documented exit statuses of dtlaunch itself (docs/cli.md, "Exit status"). In local mode a
// worker's own status is passed through instead (128+N for a worker killed by signal N), so these
// values are chosen to match what a shell would report for the same situation.
enum class ExitCode : int {
  kOk = 0,
  kFailure = 1,          // the OS refused something (fork, pipe, socket): not the user's input
  kBadInput = 2,         // command line, environment or hostlist is wrong; nothing was started
  kProblem = 3,          // `dtlaunch doctor` / --preflight found the job could not start cleanly
  kPeerLost = 76,        // a peer (another task or node) was lost; this task was healthy
  kNotExecutable = 126,  // the program exists but cannot be executed
  kNotFound = 127,       // the program is not on PATH / does not exist
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}

  ExitCode code() const noexcept { return code_; }
  int exit_status() const noexcept { return static_cast<int>(code_); }

  // Named factories, so that each kind of message is worded once.
  static Error usage(std::string_view what);
  // A variable (or option) is present but wrong: names it and quotes an escaped excerpt of the
  // value, so that a megabyte of binary in a variable still gives one short line.
  static Error bad_env(std::string_view name, std::string_view value, std::string_view why);
  static Error missing_env(std::string_view name, std::string_view why = {});
  static Error inconsistent(std::string_view what);
  static Error system(std::string_view what, int errno_value);

 private:
  ExitCode code_;
};

}  // namespace dtlaunch::core
