// The check-in's relay (doctor/wire.hpp), which carries --watch's heartbeat endpoints: each
// task's text reaches rank 0 with its report, and each task gets back those of the ranks it wants.
#include <map>
#include <thread>

#include "doctor/client.hpp"
#include "doctor/server.hpp"
#include "dtlaunch_catch.hpp"
#include "launch/system.hpp"

using namespace dtlaunch::doctor;

TEST_CASE("doctor: the check-in relays each task the texts of the ranks it wants, and no others") {
  constexpr std::uint32_t kWorld = 12, kWanted = 3;
  std::vector<std::string> hosts;
  for (std::uint32_t n = 0; n < kWorld; ++n) hosts.push_back("node" + std::to_string(n + 1));
  const Expectation expected =
      slurm_expectation(hosts, std::vector<std::uint32_t>(kWorld, 1), "block");
  const std::uint16_t port = dtlaunch::launch::find_free_port();
  auto report = [&](std::uint32_t rank) {
    TaskReport r;
    r.contract.rank = rank;
    r.contract.node_rank = rank;
    r.contract.world_size = kWorld;
    r.contract.nnodes = kWorld;
    r.contract.master_addr = "127.0.0.1";
    r.contract.master_port = port;
    r.network.host = hosts[rank];
    return r;
  };
  auto text_of = [](std::uint32_t rank) { return "10.0.0." + std::to_string(rank) + " 4000 h"; };
  auto successors = [](std::uint32_t rank, std::uint32_t world) {
    std::vector<std::uint32_t> wanted;
    for (std::uint32_t i = 1; i <= kWanted; ++i) wanted.push_back((rank + i) % world);
    return wanted;
  };
  std::vector<std::map<std::uint32_t, std::string>> received(kWorld);
  std::vector<Relay> relays;
  for (std::uint32_t r = 0; r < kWorld; ++r)
    relays.push_back({text_of(r), successors, &received[r]});
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::thread server([&] { serve(expected, {report(0)}, port, deadline, {}, nullptr, relays[0]); });
  std::vector<std::thread> tasks;
  for (std::uint32_t r = 1; r < kWorld; ++r)
    tasks.emplace_back([&, r] {
      report_to_rank0("127.0.0.1", port, {report(r)}, deadline, nullptr, {}, relays[r]);
    });
  for (std::thread& t : tasks) t.join();
  server.join();
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    std::map<std::uint32_t, std::string> expected_texts;
    for (std::uint32_t w : successors(r, kWorld)) expected_texts[w] = text_of(w);
    CHECK(received[r] == expected_texts);
  }
}
