#include "outcome.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>

#include "core/hmac.hpp"
#include "core/names.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"

namespace dtlaunch::job {

namespace {

constexpr int kPeerLostStatus = 76;
constexpr int kPreemptedStatus = 75;
constexpr int kPreflightStatus = 3;

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// srun's words for a task's end, as a shell status (128+N for signal N; -1 when unknown).
int status_of(std::string_view how) {
  constexpr std::string_view kExited = "Exited with exit code ";
  if (how.rfind(kExited, 0) == 0) {
    const std::string_view code = how.substr(kExited.size());
    if (is_digits(code) && code.size() < 4) return std::stoi(std::string(code));
    return -1;
  }
  static const std::map<std::string_view, int> kSignals = {
      {"Killed", 128 + 9},    {"Terminated", 128 + 15},
      {"Aborted", 128 + 6},   {"Segmentation fault", 128 + 11},
      {"Bus error", 128 + 7}, {"Interrupt", 128 + 2},
      {"Hangup", 128 + 1},    {"Floating point exception", 128 + 8}};
  const auto it = kSignals.find(how.substr(0, how.find(" (core dumped)")));
  return it == kSignals.end() ? -1 : it->second;
}

// "srun: error: NODE: tasks 0-1: HOW"
bool read_srun_failure(std::string_view line, TaskFailure& out) {
  constexpr std::string_view kPrefix = "srun: error: ";
  const auto at = line.find(kPrefix);
  if (at == std::string_view::npos) return false;
  std::string_view rest = line.substr(at + kPrefix.size());
  const auto colon = rest.find(": task");
  if (colon == std::string_view::npos || colon == 0 ||
      rest.substr(0, colon).find(' ') != std::string_view::npos)
    return false;
  std::string_view after = rest.substr(colon + 2);  // "task 2: Killed" / "tasks 0-1: ..."
  after.remove_prefix(after.rfind("tasks ", 0) == 0 ? 6 : 5);
  const auto end = after.find(": ");
  if (end == std::string_view::npos) return false;
  const std::string_view tasks = after.substr(0, end);
  if (tasks.empty() || tasks.find_first_not_of("0123456789,-") != std::string_view::npos)
    return false;
  out.node = std::string(rest.substr(0, colon));
  out.tasks = std::string(tasks);
  out.how = std::string(after.substr(end + 2));
  out.status = status_of(out.how);
  return true;
}

// The hosts of every "rank N (HOST" in `text`, in order ("host unknown here" left out).
std::vector<std::string> rank_hosts(std::string_view text) {
  std::vector<std::string> hosts;
  for (std::size_t pos = 0; (pos = text.find("rank ", pos)) != std::string_view::npos;) {
    pos += 5;
    std::size_t digits = pos;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
    // "seen by rank 3" has no host: only ranks followed by "(" count.
    if (digits == pos || text.substr(digits, 2) != " (") continue;
    const std::size_t host_start = digits + 2;
    const auto host_end = text.find_first_of("),", host_start);
    if (host_end == std::string_view::npos) continue;
    const std::string_view host = text.substr(host_start, host_end - host_start);
    if (host.empty() || host.find(' ') != std::string_view::npos) continue;
    hosts.emplace_back(host);
  }
  return hosts;
}

// Every "rank N (HOST" after "peer lost": the hosts of the lost ranks, or this rank's own host
// when the others declared it lost ("this rank 2 (cn2) was declared lost"). The reporter is the
// "rank N (HOST)" before it. A reporter already named lost is ignored: a frozen node that
// Slurm's SIGCONT wakes, or a cut-off node, sees everyone else as lost, and later.
// `text`: a sealed line's text, from the runtime ("dtlaunch ddp: rank 3 (cn1): peer lost: rank 4
// (cn3) exited ...") or from --watch ("dtlaunch --watch: rank 0 (cn1): a peer was lost: ...").
void read_lost_hosts(std::string_view text, Evidence& evidence) {
  std::size_t at = std::string_view::npos;
  std::string_view rest;
  for (const std::string_view marker : {"): a peer was lost: ", "): peer lost: "}) {
    at = text.find(marker);
    if (at == std::string_view::npos) continue;
    rest = text.substr(at + marker.size());
    at += 3;  // the reporter's "rank N (HOST)" ends before it
    break;
  }
  if (at == std::string_view::npos) return;
  const auto reporters = rank_hosts(text.substr(0, at));
  if (!reporters.empty() && evidence.lost_nodes.count(reporters.back())) return;
  // The reporter's first verdict only: the heartbeat seals no other, and the ones after it are
  // mostly the other survivors exiting 76 on that same verdict ("rank 4 (cn3) exited"). A lost
  // node's other ranks are on its host.
  rest = rest.substr(0, rest.find("; "));
  const auto named = rank_hosts(rest);
  for (const auto& host : named) {
    evidence.lost_nodes.insert(host);
    evidence.lost_reports.push_back(host);
  }
  if (!named.empty() && evidence.first_lost_message.empty())
    evidence.first_lost_message = std::string(text.substr(at));
}

// The preflight's sealed "dtlaunch --preflight: exclude: cn[3,7]" (lib/doctor/launch_check.hpp).
void read_exclude(std::string_view text, Evidence& evidence) {
  constexpr std::string_view kExclude = "dtlaunch --preflight: exclude: ";
  if (text.rfind(kExclude, 0) != 0) return;
  try {
    for (auto& host : hostlist::expand(text.substr(kExclude.size())))
      evidence.preflight_exclude.insert(std::move(host));
  } catch (const std::exception&) {
    // Not a hostlist: the doctor never seals one.
  }
}

std::set<std::string> among(const std::set<std::string>& names,
                            const std::vector<std::string>& nodes) {
  std::set<std::string> out;
  for (const auto& n : names)
    if (std::find(nodes.begin(), nodes.end(), n) != nodes.end()) out.insert(n);
  return out.empty() ? names : out;
}

std::string status_text(int status) {
  if (status < 0) return "an unknown status";
  if (status > 128) return "signal " + std::to_string(status - 128);
  return "exit " + std::to_string(status);
}

std::string list(const std::set<std::string>& names) {
  return hostlist::compress(std::vector<std::string>(names.begin(), names.end()));
}

}  // namespace

void observe_line(std::string_view line, LineSource source, const core::JobKey& key,
                  Evidence& evidence) {
  if (source == LineSource::kSrun) {
    TaskFailure failure;
    if (read_srun_failure(line, failure)) evidence.failures.push_back(std::move(failure));
    return;
  }
  const auto text = core::unseal_line(key, line);
  if (!text) return;
  read_lost_hosts(*text, evidence);
  read_exclude(*text, evidence);
}

namespace {

std::set<std::string> nodes_failed_with(const Evidence& e,
                                        const std::function<bool(const TaskFailure&)>& pred) {
  std::set<std::string> out;
  for (const auto& f : e.failures)
    if (pred(f)) out.insert(f.node);
  return out;
}

Outcome stop_with(Decision decision, int exit_status, std::string cause,
                  std::set<std::string> culprits = {}) {
  Outcome o;
  o.decision = decision;
  o.exit_status = exit_status;
  o.cause = std::move(cause);
  o.culprits = std::move(culprits);
  return o;
}

// Preempted when the first task to end exited 75: after a crash, srun's own SIGTERM to the
// others may make them checkpoint and exit 75 too, and that is no preemption.
std::optional<Outcome> preempted(const Evidence& e) {
  if (e.failures.empty() || e.failures.front().status != kPreemptedStatus) return std::nullopt;
  return stop_with(Decision::kPreempted, kPreemptedStatus,
                   "stopped to be resumed (exit 75): passed on, not retried");
}

std::optional<Outcome> preflight_failed(const Evidence& e, const std::vector<std::string>& nodes) {
  if (!e.preflight_exclude.empty())
    return stop_with(Decision::kRestart, kPreflightStatus,
                     "failed the preflight (doctor's exclude list)",
                     among(e.preflight_exclude, nodes));
  if (nodes_failed_with(e, [](const TaskFailure& f) {
        return f.status == kPreflightStatus;
      }).empty())
    return std::nullopt;
  return stop_with(Decision::kPermanent, kPreflightStatus,
                   "the preflight found a problem that excluding nodes cannot fix (its report is "
                   "above)");
}

std::optional<Outcome> peers_named_lost(const Evidence& e, const std::vector<std::string>& nodes,
                                        int srun_status) {
  if (e.lost_nodes.empty()) return std::nullopt;
  return stop_with(Decision::kRestart, srun_status,
                   core::excerpt(e.first_lost_message, 160, core::Quote::kNone),
                   among(e.lost_nodes, nodes));
}

// The program's own failures: an exit status other than "peer lost" (and 75 after another
// task's end, a victim checkpointing on srun's SIGTERM).
std::optional<Outcome> program_failed(const Evidence& e, const std::vector<std::string>& nodes) {
  const auto own = [](const TaskFailure& f) {
    return f.status >= 0 && f.status < 128 && f.status != kPeerLostStatus &&
           f.status != kPreemptedStatus;
  };
  std::set<int> statuses;
  for (const auto& f : e.failures)
    if (own(f)) statuses.insert(f.status);
  const auto failed = nodes_failed_with(e, own);
  if (failed.empty()) return std::nullopt;
  const int status = *statuses.begin();
  const bool bad_input = std::all_of(statuses.begin(), statuses.end(),
                                     [](int s) { return s == 2 || s == 126 || s == 127; });
  if (bad_input)
    return stop_with(
        Decision::kPermanent, status,
        "bad input (" + status_text(status) + " on " + list(failed) + "): a restart cannot fix it");
  if (statuses.size() == 1 && failed.size() == nodes.size() && nodes.size() > 1)
    return stop_with(
        Decision::kPermanent, status,
        "every node failed the same way (" + status_text(status) + "): a restart cannot fix it");
  return stop_with(Decision::kRestart, status,
                   "the program failed (" + status_text(status) + ") on " + list(failed), failed);
}

// A 76 that no "peer lost" line explains is the program's own status, not the runtime's (nor
// --watch's, which both say whom they lost). On every node: a failure they share. First to end,
// the others killed after it by srun: that node. With a node that said nothing, the silent-node
// reading below stands (a lost node's survivors whose lines did not come through).
std::optional<Outcome> unexplained_peer_lost_status(const Evidence& e,
                                                    const std::vector<std::string>& nodes) {
  if (!e.lost_nodes.empty() || e.failures.empty()) return std::nullopt;
  const auto is_76 = [](const TaskFailure& f) { return f.status == kPeerLostStatus; };
  const auto with_76 = nodes_failed_with(e, is_76);
  const auto reported = nodes_failed_with(e, [](const TaskFailure&) { return true; });
  if (with_76.empty() || reported.size() < nodes.size()) return std::nullopt;
  if (with_76.size() == nodes.size() && nodes.size() > 1)
    return stop_with(Decision::kPermanent, kPeerLostStatus,
                     "every node exited 76 and no rank said which peer it lost: the program's own "
                     "status, which every node shares; a restart cannot fix it");
  const TaskFailure& first = e.failures.front();
  if (!is_76(first)) return std::nullopt;
  Outcome o = stop_with(Decision::kRestart, kPeerLostStatus,
                        "tasks " + first.tasks + " on " + first.node +
                            " exited 76 with no peer named lost (the program's own status; first "
                            "to end)",
                        {first.node});
  o.signature = "exit 76";
  return o;
}

// Killed: the first node srun saw end that way, the others being srun's own kill.
std::optional<Outcome> first_killed(const Evidence& e, int srun_status) {
  for (const auto& f : e.failures) {
    if (f.status == kPeerLostStatus || f.status == kPreemptedStatus) continue;
    return stop_with(Decision::kRestart, f.status < 0 ? srun_status : f.status,
                     "tasks " + f.tasks + " on " + f.node + ": " + f.how + " (first to end)",
                     {f.node});
  }
  return std::nullopt;
}

// Only "peer lost" statuses: the nodes that said nothing are the lost ones.
std::optional<Outcome> silent_nodes(const Evidence& e, const std::vector<std::string>& nodes) {
  const auto reported = nodes_failed_with(e, [](const TaskFailure&) { return true; });
  if (reported.empty()) return std::nullopt;
  std::set<std::string> silent;
  for (const auto& n : nodes)
    if (!reported.count(n)) silent.insert(n);
  if (silent.empty() || silent.size() == nodes.size()) return std::nullopt;
  return stop_with(
      Decision::kRestart, kPeerLostStatus,
      "the others lost their peers (exit 76) and " + list(silent) + " reported nothing", silent);
}

// --no-retry-exit: the first task srun saw exit with one of the user's statuses.
std::optional<Outcome> not_worth_retrying(const Evidence& e, const std::set<int>& no_retry_exits) {
  for (const auto& f : e.failures) {
    if (f.status < 1 || f.status > 255 || !no_retry_exits.count(f.status)) continue;
    return stop_with(Decision::kPermanent, f.status,
                     "tasks " + f.tasks + " on " + f.node + " exited " + std::to_string(f.status) +
                         ", one of --no-retry-exit's statuses",
                     {f.node});
  }
  return std::nullopt;
}

// The culprits' own statuses (not 75 or 76, which follow another's end) and the collective the
// first lost rank was last in, as the runtime wrote it ("last in all_reduce #9").
std::string signature_of(const Evidence& e, const Outcome& o) {
  std::set<int> statuses;
  for (const auto& f : e.failures)
    if (o.culprits.count(f.node) && f.status > 0 && f.status != kPeerLostStatus &&
        f.status != kPreemptedStatus)
      statuses.insert(f.status);
  std::string signature;
  for (int status : statuses) signature += (signature.empty() ? "" : ", ") + status_text(status);
  constexpr std::string_view kLastIn = "last in ";
  const std::string_view lost = e.first_lost_message;
  if (const auto at = lost.find(kLastIn); at != std::string_view::npos) {
    const std::string_view where = lost.substr(at + kLastIn.size());
    const auto end = where.find_first_of(";,)");
    signature += (signature.empty() ? "" : ", ") + std::string(where.substr(0, end));
  }
  return signature;
}

}  // namespace

std::optional<std::string> repeated_failure(const std::vector<AttemptRecord>& attempts) {
  if (attempts.size() < 2) return std::nullopt;
  const auto& last = attempts.back().outcome;
  const auto& before = attempts[attempts.size() - 2].outcome;
  if (last.decision != Decision::kRestart || before.decision != Decision::kRestart ||
      last.signature.empty() || last.signature != before.signature)
    return std::nullopt;
  return "attempts " + std::to_string(attempts.size() - 1) + " and " +
         std::to_string(attempts.size()) + " failed the same way (" + last.signature +
         ") on different nodes: a restart is not helping; the program's output above says why";
}

namespace {

Outcome classify_without_signature(const Evidence& e, const std::vector<std::string>& nodes,
                                   int srun_status, const std::set<int>& no_retry_exits) {
  if (srun_status == 0 && !e.cancelled) return stop_with(Decision::kSucceeded, 0, "completed");
  if (auto o = not_worth_retrying(e, no_retry_exits)) return *o;
  if (auto o = preempted(e)) return *o;
  if (auto o = preflight_failed(e, nodes)) return *o;
  if (auto o = peers_named_lost(e, nodes, srun_status)) return *o;
  if (auto o = program_failed(e, nodes)) return *o;
  if (auto o = unexplained_peer_lost_status(e, nodes)) return *o;
  if (auto o = first_killed(e, srun_status)) return *o;
  if (auto o = silent_nodes(e, nodes)) return *o;
  return stop_with(Decision::kRestart, srun_status,
                   (e.cancelled ? "the step did not end and was cancelled"
                                : "srun ended with " + status_text(srun_status)) +
                       "; no node to blame");
}

}  // namespace

// The evidence in the order of docs/resilience.md's table: the first step that has something
// to go by decides.
Outcome classify(const Evidence& e, const std::vector<std::string>& nodes, int srun_status,
                 const std::set<int>& no_retry_exits) {
  Outcome o = classify_without_signature(e, nodes, srun_status, no_retry_exits);
  if (o.decision == Decision::kRestart && o.signature.empty()) o.signature = signature_of(e, o);
  return o;
}

namespace {

std::string nodes_text(const std::vector<std::string>& nodes) {
  return hostlist::compress(nodes);
}

constexpr core::Named<Decision> kDecisionWords[] = {{Decision::kSucceeded, "completed"},
                                                    {Decision::kRestart, "failed"},
                                                    {Decision::kPreempted, "preempted"},
                                                    {Decision::kPermanent, "failed, not retried"}};

std::string decision_word(const Outcome& o) {
  return std::string(core::name_of(o.decision, kDecisionWords));
}

}  // namespace

std::string attempt_line(const AttemptRecord& r) {
  std::string line = "dtlaunch job: attempt " + std::to_string(r.attempt) + " on " +
                     nodes_text(r.nodes) + ": " + decision_word(r.outcome) + " after " +
                     core::duration_text(r.wall);
  for (const auto& replaced : r.replaced) line += "; replaced live: " + replaced;
  if (r.outcome.decision == Decision::kSucceeded) return line;
  line +=
      "; culprit " + (r.outcome.culprits.empty() ? std::string("none") : list(r.outcome.culprits));
  line += "; cause: " + r.outcome.cause;
  if (r.stop.count() > 0)
    line += "; step stopped " + core::duration_text(r.stop) + " after the first failure";
  return line;
}

std::string summary_table(const std::vector<AttemptRecord>& attempts, std::string_view result) {
  std::string out = "dtlaunch job: " + std::string(result) + "\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-7s  %-24s  %-20s  %-16s  %8s  %8s  %s\n", "attempt", "nodes",
                "result", "culprit", "ran", "stop", "cause");
  out += buf;
  for (const auto& r : attempts) {
    std::snprintf(buf, sizeof buf, "%-7u  %-24s  %-20s  %-16s  %8s  %8s  %s\n", r.attempt,
                  nodes_text(r.nodes).c_str(), decision_word(r.outcome).c_str(),
                  r.outcome.culprits.empty() ? "-" : list(r.outcome.culprits).c_str(),
                  core::duration_text(r.wall).c_str(),
                  r.stop.count() ? core::duration_text(r.stop).c_str() : "-",
                  core::excerpt(r.outcome.cause, 100, core::Quote::kNone).c_str());
    out += buf;
  }
  return out;
}

std::string summary_json(const std::vector<AttemptRecord>& attempts, std::string_view result,
                         int exit_status) {
  std::string out = "{\"result\": " + core::json_quote(result) +
                    ", \"exit_status\": " + std::to_string(exit_status) + ", \"attempts\": [";
  for (std::size_t i = 0; i < attempts.size(); ++i) {
    const auto& r = attempts[i];
    out += i ? ", " : "";
    out += "{\"attempt\": " + std::to_string(r.attempt) +
           ", \"nodes\": " + core::json_quote(nodes_text(r.nodes)) +
           ", \"result\": " + core::json_quote(decision_word(r.outcome)) + ", \"culprits\": [";
    bool first = true;
    for (const auto& c : r.outcome.culprits) {
      out += (first ? "" : ", ") + core::json_quote(c);
      first = false;
    }
    out += "], \"cause\": " + core::json_quote(r.outcome.cause) +
           ", \"exit_status\": " + std::to_string(r.outcome.exit_status) +
           ", \"ran_s\": " + std::to_string(r.wall.count() / 1000.0) +
           ", \"stop_s\": " + std::to_string(r.stop.count() / 1000.0) + ", \"replaced\": [";
    for (std::size_t k = 0; k < r.replaced.size(); ++k)
      out += (k ? ", " : "") + core::json_quote(r.replaced[k]);
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace dtlaunch::job
