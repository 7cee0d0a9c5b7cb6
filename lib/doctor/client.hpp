// A task's side of the doctor's TCP exchange: its reports to rank 0, the verdict back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "doctor/report.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {

class NetworkAgent;

// Reports to rank 0 at addr:port, retrying with jittered back-off up to the deadline, and
// returns the exit status rank 0 decided (0 or 3). When rank 0 cannot be reached, throws
// Error(kProblem) whose one line says why, with the address it tried.
// `agent`: this node's network test agent, which runs the plan rank 0 may send; the verdict is
// then awaited `network_budget` longer.
// `relay`: what the check-in relays (wire.hpp); what rank 0 hands back goes to relay.received.
int report_to_rank0(const std::string& addr, std::uint16_t port, std::vector<TaskReport> mine,
                    Clock::time_point deadline, const NetworkAgent* agent = nullptr,
                    Clock::duration network_budget = {}, const Relay& relay = {});

}  // namespace dtlaunch::doctor
