// Runs the real `scontrol show hostnames|hostlist` (Debian's Slurm 22.05) without a cluster:
// SLURM_CONF points at a two-line slurm.conf in a private temporary directory. Arguments go
// through argv exactly (posix_spawnp, no shell, after "--" so that a leading '-' is not an
// option), so any byte but NUL can be tested.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtlaunch::hostlist::test {

struct ProcessResult {
  std::string out;
  std::string err;
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;  // killed after 5 s
};

// Runs argv[0] (looked up in PATH) with the given extra environment entries ("NAME=value").
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env = {});

// What Slurm 22.05 made of an expression.
struct SlurmAnswer {
  bool valid = false;              // printed no "Invalid hostlist:" and did not crash
  bool crashed = false;            // killed by a signal (22.05 segfaults on some ranges)
  std::vector<std::string> hosts;  // show hostnames: one per line
  std::string out;                 // stdout as printed (names may contain newlines in 22.05)
  std::string ranged;              // show hostlist: the line it printed
  std::string err;
};

class Scontrol {
 public:
  Scontrol();  // writes the slurm.conf
  ~Scontrol();
  Scontrol(const Scontrol&) = delete;
  Scontrol& operator=(const Scontrol&) = delete;

  SlurmAnswer hostnames(std::string_view expr) const;
  SlurmAnswer hostlist(std::string_view expr) const;
  bool available() const;  // scontrol is on PATH and runs

 private:
  // `scontrol show WHAT EXPR`: its validity, stdout in `out` when valid, stderr.
  SlurmAnswer show(const char* what, std::string_view expr) const;

  std::string dir_;
  std::string conf_env_;
};

// "a\tb" -> "\"a\\tb\"": for readable test failure messages.
std::string printable(std::string_view text);

}  // namespace dtlaunch::hostlist::test
