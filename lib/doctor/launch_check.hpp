// The doctor of one launcher (`dtlaunch doctor`, --preflight, --watch's check-in), from its launch
// plan: each worker's report (the contract worker_contract() computed for it, plus the node's
// facts), the exchange with rank 0 and, on rank 0, the verdict. lib/cli only maps its options
// here; nothing about a report is decided outside lib/doctor.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "core/env_map.hpp"
#include "doctor/network_test.hpp"
#include "doctor/report.hpp"
#include "doctor/wire.hpp"
#include "launch/plan.hpp"

namespace dtlaunch::doctor {

// The start of the preflight's sealed exclude line, which `dtlaunch job` reads (lib/job/outcome.cpp
// spells it too: the two modules are side by side).
inline constexpr std::string_view kSealedExclude = "dtlaunch --preflight: exclude: ";

struct LaunchCheckOptions {
  // false (`dtlaunch doctor`): rank 0 prints the report on `out` always. true (--preflight):
  // on stderr, and only when something was found or with `verbose`, since stdout belongs to
  // the program that a passing preflight starts.
  bool preflight = false;
  bool verbose = false;
  bool json = false;  // --format json
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  NetworkOptions network;
  // What else the check-in carries between the launchers (--watch's heartbeat endpoints).
  Relay relay;
};

// The reports of this launcher's workers, as the plan tells them and as their node is: probed
// once per launcher (the node, its software by local rank 0, the program's execve), and the
// CPUs of each rank against its GPU's.
std::vector<TaskReport> plan_reports(const launch::LaunchPlan& launch_plan);

// Where rank 0 expects each rank, from the launch's layout (Slurm's step, or local mode's).
Expectation expectation_of(const launch::LaunchPlan& launch_plan);

// Runs the checks: rank 0's launcher judges and prints, the others report and get the same
// status back. Returns 0 or 3 (ExitCode::kProblem); a task that cannot reach rank 0 says why
// on stderr and returns 3.
int check_launch(const launch::LaunchPlan& launch_plan, const LaunchCheckOptions& options,
                 std::ostream& out);

}  // namespace dtlaunch::doctor
