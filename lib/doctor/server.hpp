// Rank 0's side of the doctor's TCP exchange at the very MASTER_ADDR:MASTER_PORT the program will
// use: the check-in of every task's reports, the network test, the verdict sent back.
#pragma once

#include <cstdint>
#include <vector>

#include "doctor/checks.hpp"
#include "doctor/network_test.hpp"
#include "doctor/report.hpp"
#include "doctor/wire.hpp"

namespace dtlaunch::doctor {

class NetworkAgent;

// Rank 0 (or node 0 in local mode): listens on `port`, takes `own` reports and those of every
// task that connects until `expected.world_size` ranks have reported or the deadline passes,
// judges them, tells every task the verdict and closes the listener before returning.
// With network.enabled, the nodes' agents (those whose report has a network_port; rank 0's own
// is `own_agent`) then run the network test (network_test.hpp) before the verdict.
// `relay`: what the check-in relays (wire.hpp); rank 0's own share goes to relay.received.
Diagnosis serve(const Expectation& expected, std::vector<TaskReport> own, std::uint16_t port,
                Clock::time_point deadline, const NetworkOptions& network = {},
                const NetworkAgent* own_agent = nullptr, const Relay& relay = {});

}  // namespace dtlaunch::doctor
