// `dtlaunch --watch`'s parent and heartbeat (watch/watch.hpp) without Slurm, for the proc tests:
//   watch_driver RANK WORLD DIR GRACE_MS TIMEOUT_MS PROGRAM [ARGS...]
// writes this task's heartbeat endpoint to DIR/endpoint.RANK, waits for every other task's
// (the check-in's part, through files here), then runs PROGRAM as --watch does and exits with
// its status (76 after a lost peer).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/env_map.hpp"
#include "core/error.hpp"
#include "watch/watch.hpp"

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: watch_driver RANK WORLD DIR GRACE_MS TIMEOUT_MS PROGRAM [ARGS...]\n";
    return 2;
  }
  const auto rank = static_cast<std::uint32_t>(std::atoi(argv[1]));
  const auto world = static_cast<std::uint32_t>(std::atoi(argv[2]));
  const std::string dir = argv[3];
  const std::chrono::milliseconds grace(std::atol(argv[4])), timeout(std::atol(argv[5]));
  try {
    dtlaunch::watch::WatchJoin join("127.0.0.1", rank, world);
    {
      const std::string tmp = dir + "/.endpoint." + std::to_string(rank);
      std::ofstream(tmp) << join.endpoint();
      std::filesystem::rename(tmp, dir + "/endpoint." + std::to_string(rank));
    }
    for (std::uint32_t i = 1; i < world; ++i) {
      const std::uint32_t r = (rank + i) % world;
      const std::string path = dir + "/endpoint." + std::to_string(r);
      while (!std::filesystem::exists(path))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::stringstream text;
      text << std::ifstream(path).rdbuf();
      join.ring()[r] = text.str();
    }
    dtlaunch::proc::WorkerProcess program;
    program.rank = rank;
    program.program_path = argv[6];
    program.argv.assign(argv + 6, argv + argc);
    program.env = dtlaunch::core::EnvMap::from_environ(environ);
    program.env.set("RANK", std::to_string(rank));
    return join.run(program, timeout, grace, 42, std::nullopt);
  } catch (const dtlaunch::core::Error& e) {
    std::cerr << "watch_driver: " << e.what() << "\n";
    return e.exit_status();
  }
}
