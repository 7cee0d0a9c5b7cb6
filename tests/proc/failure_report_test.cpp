#include "proc/failure_report.hpp"

#include <signal.h>

#include "dtlaunch_catch.hpp"

using dtlaunch::proc::WorkerFailure;

TEST_CASE("describe_end and exit_status_of", "[unit]") {
  struct Case {
    int exit_code, signal;
    bool core;
    const char* text;
    int status;
  };
  for (const Case& c : {Case{0, 0, false, "exit 0", 0}, Case{3, 0, false, "exit 3", 3},
                        Case{255, 0, false, "exit 255", 255},
                        Case{-1, SIGSEGV, true, "killed by SIGSEGV (core dumped)", 139},
                        Case{-1, SIGKILL, false, "killed by SIGKILL", 137},
                        Case{-1, SIGTERM, false, "killed by SIGTERM", 143},
                        Case{-1, SIGRTMIN + 2, false, "", 128 + SIGRTMIN + 2}}) {
    WorkerFailure f;
    f.exit_code = c.exit_code;
    f.signal = c.signal;
    f.core_dumped = c.core;
    const std::string text = dtlaunch::proc::describe_end(c.exit_code, c.signal, c.core);
    if (*c.text) {
      CHECK(text == c.text);
    } else {
      CHECK(text == "killed by signal " + std::to_string(c.signal));  // no name for RT signals
    }
    CHECK(dtlaunch::proc::exit_status_of(f) == c.status);
  }
}

TEST_CASE("format_failure_report names rank, host, how, and the last lines", "[unit]") {
  struct Case {
    WorkerFailure failure;
    const char* host;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {{3, 1, 1, 0, false, {"loading shard 12", "RuntimeError: shard 12 is missing"}},
       "node7",
       "dtlaunch: rank 3 (local 1) on node7 failed: exit 1; its last 2 lines:\n"
       "  [rank 3] loading shard 12\n"
       "  [rank 3] RuntimeError: shard 12 is missing\n"},
      {{0, 0, -1, SIGSEGV, false, {"x"}},
       "",
       "dtlaunch: rank 0 (local 0) failed: killed by SIGSEGV; its last line:\n  [rank 0] x\n"},
      {{12, 4, 2, 0, false, {}},
       "h",
       "dtlaunch: rank 12 (local 4) on h failed: exit 2; it wrote nothing\n"},
      {{1, 1, 75, 0, false, {"stop: Terminated received; checkpoint c.pt saved"}},
       "h",
       "dtlaunch: rank 1 (local 1) on h stopped to be resumed: exit 75 (EX_TEMPFAIL); its last "
       "line:\n  [rank 1] stop: Terminated received; checkpoint c.pt saved\n"},
      {{4, 0, 76, 0, false, {}},
       "h",
       "dtlaunch: rank 4 (local 0) on h lost a peer: exit 76 (another rank was lost; this one was "
       "healthy); it wrote nothing\n"},
      {{2, 2, -1, SIGKILL, false, {}, SIGTERM, std::chrono::milliseconds(30000)},
       "h",
       "dtlaunch: rank 2 (local 2) on h failed: killed by SIGKILL (from dtlaunch: still running "
       "30 s after SIGTERM); it wrote nothing\n"},
  };
  for (const Case& c : cases)
    CHECK(dtlaunch::proc::format_failure_report(c.failure, c.host) == c.expected);
}

TEST_CASE("describe_outcome tells a stop to be resumed from a failure", "[unit]") {
  CHECK(dtlaunch::proc::describe_outcome(3, 0) == "failed (exit 3)");
  CHECK(dtlaunch::proc::describe_outcome(-1, SIGSEGV) == "failed (killed by SIGSEGV)");
  CHECK(dtlaunch::proc::describe_outcome(75, 0) == "stopped to be resumed (exit 75)");
  // 76: the heartbeat's "a peer was lost; I am healthy" (docs/ddp.md): a victim, not a culprit.
  CHECK(dtlaunch::proc::describe_outcome(76, 0) == "lost a peer (exit 76)");
  CHECK(dtlaunch::proc::describe_outcome(77, 0) == "failed (exit 77)");
}
