// The doctor's protocol between the tasks and rank 0 at MASTER_ADDR:MASTER_PORT: length-prefixed
// frames, each opened by a magic line that names its kind, and sends bounded by a deadline. The
// server (server.hpp), the client (client.hpp) and the network test (network_test.hpp) speak it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/report.hpp"

namespace dtlaunch::doctor {

using Clock = std::chrono::steady_clock;

inline constexpr std::string_view kReportMagic = "DTLAUNCH-DOCTOR 1 report\n";
inline constexpr std::string_view kVerdictMagic = "DTLAUNCH-DOCTOR 1 verdict\n";
inline constexpr std::string_view kPlanMagic = "DTLAUNCH-DOCTOR 1 network plan\n";
inline constexpr std::string_view kResultMagic = "DTLAUNCH-DOCTOR 1 network result\n";
inline constexpr std::size_t kMaxFrame = 64 * 1024;

// The milliseconds left until `deadline`, between 0 and `cap_ms`: a poll()'s timeout.
int millis_until(Clock::time_point deadline, int cap_ms);

// Text that another module sends through the check-in, opaque to the doctor: --watch's heartbeat
// endpoints (lib/watch), which need a rendezvous before the program's and have this one. Each
// launcher's text goes to rank 0 with its first report; rank 0 hands every connection back, with
// the verdict, the texts of the ranks that `wanted` names for its ranks.
struct Relay {
  std::string text;  // this launcher's; "" relays nothing
  // Rank 0's: whose texts `rank` of a job of `world` ranks gets back.
  std::function<std::vector<std::uint32_t>(std::uint32_t rank, std::uint32_t world)> wanted;
  std::map<std::uint32_t, std::string>* received = nullptr;  // what came back, by rank
};
// On the wire: a line of the first report's frame, and lines after the verdict's status
// ("ring.RANK=TEXT"). Their names are those of the wire format's first use, --watch's.
inline constexpr std::string_view kRelayKey = "heartbeat";
inline constexpr std::string_view kRelayedLine = "ring.";

// A frame: 4 bytes of big-endian length, then the magic and the body.
std::string frame(std::string_view magic, std::string_view body);

// Takes one complete frame off the front of `buffer`, if there is one. Throws on a frame that
// is too large or does not begin with `magic`: the peer does not speak this protocol.
std::optional<std::string> take_frame(std::string& buffer, std::string_view magic);

// Sends all of `data` on a non-blocking socket by `deadline`; false when it could not.
bool send_all(int fd, std::string_view data, Clock::time_point deadline);

// The wire form, for load generators (bench/doctor): the bytes a task sends rank 0, and the
// verdict taken off the front of what rank 0 answered (nullopt: incomplete; throws on a frame
// that is not a verdict).
std::string report_frames(const std::vector<TaskReport>& reports);
std::optional<int> take_verdict(std::string& buffer);

}  // namespace dtlaunch::doctor
