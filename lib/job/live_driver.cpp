#include "live_driver.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <ostream>

#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "outcome.hpp"

namespace dtlaunch::job {

namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kPeerLost = 76;
constexpr int kPreempted = 75;

milliseconds since(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t);
}

// dtlaunch-store on the batch host: the store outlives every rank, rank 0 included, and lives as
// long as the attempt. It says its port on its first line.
class StoreProcess {
 public:
  explicit StoreProcess(const std::string& program) {
    proc::Pipe out = srun_pipe();
    pid_ = spawn({program, "--port", "0"}, out.write.get(), -1);
    out.write.reset();
    std::string line;
    const auto start = Clock::now();
    while (line.find('\n') == std::string::npos && since(start) < milliseconds(20000)) {
      pollfd p{out.read.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out.read.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      line.append(buf, static_cast<std::size_t>(n));
    }
    constexpr std::string_view kSays = "hosting the store on port ";
    const auto at = line.find(kSays);
    if (at != std::string::npos) {
      const char* first = line.data() + at + kSays.size();
      std::from_chars(first, line.data() + line.size(), port_);  // port_ stays 0 on garbage
    }
    if (port_ <= 0 || port_ > 65535) {
      stop();
      throw core::Error(core::ExitCode::kBadInput,
                        "--live: the store (" + program + " --port 0) did not say its port" +
                            (line.empty() ? std::string(" (its errors are above)")
                                          : ": '" + core::excerpt(line, 120) + "'") +
                            "; --store-program names it");
    }
  }
  ~StoreProcess() { stop(); }
  StoreProcess(const StoreProcess&) = delete;
  StoreProcess& operator=(const StoreProcess&) = delete;
  std::uint16_t port() const { return static_cast<std::uint16_t>(port_); }

 private:
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  pid_t pid_ = -1;
  int port_ = 0;
};

// One node's step: srun -N1 ... dtlaunch --job-node SLOT/N.
struct NodeStep {
  std::uint32_t slot = 0;
  std::string node;
  pid_t pid = -1;
  std::vector<Stream> streams;  // srun's stdout and stderr
  Evidence evidence;            // srun's failure lines of this step, sealed lines of its tasks
  bool reaped = false;
  int status = 0;
  bool written_off = false;  // its ranks were started again elsewhere: its end does not count
  std::optional<Clock::time_point> aborted;  // srun asked to cancel it (SIGINT twice)
  bool killed = false;                       // srun SIGKILLed: it did not end
  std::size_t lost_seen = 0;                 // evidence.lost_reports already read
};

class LiveRun {
 public:
  LiveRun(const LivePlan& plan, const core::JobKey& key, proc::Console& console, std::ostream& err)
      : plan_(plan), key_(key), console_(console), err_(err), nodes_(plan.nodes) {}

  LiveAttempt run();

 private:
  void start(std::uint32_t slot, const std::string& node, bool replacement);
  void reap();
  void act_on_losses();
  bool lose(NodeStep& step, const std::string& why);
  void abort_step(NodeStep& step);
  void end_attempt(const NodeStep* cause, std::string why);
  void advance_stops();
  bool done() const;
  void finish(LiveAttempt& out);
  NodeStep* current(std::uint32_t slot);
  void return_to_service(const NodeStep& step);

  const LivePlan& plan_;
  const core::JobKey& key_;
  proc::Console& console_;
  std::ostream& err_;
  std::vector<std::string> nodes_;
  std::vector<std::unique_ptr<NodeStep>> steps_;
  std::uint32_t replacements_ = 0;
  std::set<std::string> lost_;         // out of service: their ranks were started elsewhere
  std::vector<std::string> returned_;  // lost, then their old step ended: spares again
  std::vector<std::string> replaced_;
  Clock::time_point start_ = Clock::now();
  std::optional<Clock::time_point> first_failure_;
  std::optional<Clock::time_point> ending_;  // the attempt ends: every step is being stopped
  std::optional<Clock::time_point> signalled_;
  // Why the attempt ended early: the step whose loss could not be replaced, or that failed.
  Evidence blame_;
  int blame_status_ = 0;
};

NodeStep* LiveRun::current(std::uint32_t slot) {
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it)
    if ((*it)->slot == slot && !(*it)->written_off) return it->get();
  return nullptr;
}

void LiveRun::start(std::uint32_t slot, const std::string& node, bool replacement) {
  auto step = std::make_unique<NodeStep>();
  step->slot = slot;
  step->node = node;
  NodeStep& s = *step;
  const auto observe = [&s, this](std::string_view line, LineSource source) {
    observe_line(line, source, key_, s.evidence);
  };
  proc::Pipe out = srun_pipe(), errs = srun_pipe();
  const auto argv =
      node_step_command(plan_.dtlaunch, node, slot, static_cast<std::uint32_t>(nodes_.size()),
                        plan_.sizes, plan_.allocation, plan_.options, replacement);
  std::vector<std::pair<std::string, std::string>> join;
  if (replacement) join.emplace_back(std::string(contract::setting::kLiveJoin.name), "1");
  s.pid = spawn_srun(argv, out.write.get(), errs.write.get(), join);
  s.streams.push_back(
      {std::move(out.read), STDOUT_FILENO, SrunOutput(plan_.strip_labels, observe)});
  s.streams.push_back(
      {std::move(errs.read), STDERR_FILENO, SrunOutput(plan_.strip_labels, observe)});
  steps_.push_back(std::move(step));
}

void LiveRun::reap() {
  for (auto& s : steps_) {
    if (s->reaped) continue;
    int wstatus = 0;
    if (::waitpid(s->pid, &wstatus, WNOHANG) != s->pid) continue;
    s->reaped = true;
    s->status = shell_status(wstatus);
    return_to_service(*s);
  }
}

// A written-off step that ended (not srun killed by us: its node could not be reached) leaves its
// node free of this job's ranks: the node can take a later loss's ranks, so a storm of faults
// needs no more spares than faults at one time.
void LiveRun::return_to_service(const NodeStep& step) {
  if (!step.written_off || !step.reaped || step.killed || ending_ || signalled_) return;
  // A node out of service is never chosen as a spare, so no current step runs on it.
  if (!lost_.erase(step.node)) return;
  returned_.push_back(step.node);
  err_ << "dtlaunch job: --live: node " << step.node << "'s old step has ended: it is a spare again"
       << std::endl;
}

// srun's own abort of one step: SIGINT twice within a second cancels it (the other steps run on).
void LiveRun::abort_step(NodeStep& step) {
  if (step.reaped || step.aborted) return;
  ::kill(step.pid, SIGINT);
  ::usleep(200 * 1000);
  ::kill(step.pid, SIGINT);
  step.aborted = Clock::now();
}

// A node's ranks are lost: on a spare when one is left and the budget allows, else the attempt
// ends. Returns whether they were replaced.
bool LiveRun::lose(NodeStep& step, const std::string& why) {
  if (!first_failure_) first_failure_ = Clock::now();
  std::set<std::string> in_use, excluded = plan_.excluded;
  for (const auto& s : steps_)
    if (!s->written_off) in_use.insert(s->node);
  excluded.insert(lost_.begin(), lost_.end());
  excluded.insert(step.node);
  const auto spare = replacements_ < plan_.replacements_left
                         ? choose_spare(plan_.allocation.nodes, excluded, in_use, returned_)
                         : std::nullopt;
  const bool spare_ok = spare.has_value();
  const std::uint32_t first = step.slot * plan_.sizes.tasks_per_node;
  const std::string ranks =
      std::to_string(first) + "-" + std::to_string(first + plan_.sizes.tasks_per_node - 1);
  if (!spare_ok) {
    err_ << "dtlaunch job: --live: node " << step.node << " (ranks " << ranks << ") lost (" << why
         << ") and "
         << (replacements_ < plan_.replacements_left ? "no spare is left"
                                                     : "the restart budget is spent")
         << ": the attempt ends" << std::endl;
    return false;
  }
  step.written_off = true;
  abort_step(step);
  lost_.insert(step.node);
  std::erase(returned_, *spare);
  ++replacements_;
  nodes_[step.slot] = *spare;
  const std::string record = step.node + " -> " + *spare + " (ranks " + ranks + ")";
  replaced_.push_back(record);
  err_ << "dtlaunch job: --live: node " << step.node << " lost (" << why << "): ranks " << ranks
       << " start again on " << *spare << "; the other nodes keep running" << std::endl;
  start(step.slot, *spare, true);
  return_to_service(step);  // its step had ended already (its ranks were killed)
  return true;
}

// Every step stops: the attempt ends as a plain attempt does, and the restart loop takes over.
void LiveRun::end_attempt(const NodeStep* cause, std::string why) {
  if (ending_) return;
  ending_ = Clock::now();
  if (!first_failure_) first_failure_ = ending_;
  if (cause) {
    blame_ = cause->evidence;
    for (auto& f : blame_.failures)
      f.tasks = ranks_of_tasks(f.tasks, cause->slot * plan_.sizes.tasks_per_node);
    blame_status_ = cause->reaped ? cause->status : kPeerLost;
    if (blame_.lost_nodes.empty() && blame_.failures.empty()) {
      blame_.lost_nodes.insert(cause->node);
      blame_.first_lost_message = why;
    }
  }
  for (auto& s : steps_) abort_step(*s);
}

// Steps found lost: by a survivor's sealed line naming their host, or by their own failure.
void LiveRun::act_on_losses() {
  // The hosts named since the last look, each once, matched against the steps current before
  // any of them is acted on: a host named by several survivors, or lost and then chosen as a
  // spare in this same look, is lost once. (A node back in service is named anew by new lines
  // only: each report is read once.)
  std::map<std::string, std::string> named;  // host -> the first report's message
  for (auto& reporter : steps_) {
    const auto& reports = reporter->evidence.lost_reports;
    for (std::size_t k = reporter->lost_seen; k < reports.size() && !reporter->written_off; ++k)
      named.emplace(reports[k], reporter->evidence.first_lost_message);
    reporter->lost_seen = reports.size();
  }
  std::vector<std::pair<NodeStep*, std::string>> hit;
  for (const auto& [host, message] : named)
    for (std::uint32_t slot = 0; slot < nodes_.size(); ++slot)
      if (NodeStep* lost = current(slot); lost && lost->node == host)
        hit.emplace_back(lost, message);
  for (const auto& [lost, message] : hit)
    if (!ending_ && !lose(*lost, "a survivor's heartbeat named it")) end_attempt(lost, message);
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    NodeStep& s = *steps_[i];
    if (!s.reaped || s.written_off || s.status == 0 || ending_) continue;
    if (!first_failure_) first_failure_ = Clock::now();
    const int first = s.evidence.failures.empty() ? s.status : s.evidence.failures.front().status;
    const bool program_said = first == kPeerLost || first == kPreempted ||
                              (first > 0 && first < 128) ||
                              plan_.options.no_retry_exits.count(first);
    // A rank killed or crashed by a signal, or a node that went away: its ranks start again.
    // An exit status is the program's word (76: its live recovery gave up), for the restart loop.
    if (program_said || !lose(s, "its step ended: " + std::to_string(s.status)))
      end_attempt(&s, "node " + s.node + "'s step failed");
  }
}

// What was aborted and has not ended within 5 s: srun is killed (a cut-off node's step cannot be
// cancelled now; Slurm ends it with the job). After a signal, the tasks get the grace first.
void LiveRun::advance_stops() {
  if (signalled_ && !ending_ && since(*signalled_) > plan_.options.stop_grace) {
    err_ << "dtlaunch job: the steps have not ended "
         << core::duration_text(plan_.options.stop_grace) << " after the signal: cancelling them"
         << std::endl;
    ending_ = Clock::now();
    for (auto& s : steps_) abort_step(*s);
  }
  for (auto& s : steps_)
    if (s->aborted && !s->reaped && !s->killed && since(*s->aborted) > milliseconds(5000)) {
      ::kill(s->pid, SIGKILL);
      s->killed = true;
    }
}

// Every slot's current step ended (a written-off one need not).
bool LiveRun::done() const {
  for (const auto& s : steps_)
    if (!s->reaped && (!s->written_off || ending_)) return false;
  return true;
}

LiveAttempt LiveRun::run() {
  StoreProcess store(plan_.options.store_program);
  for (const auto& [name, value] : live_environment(plan_.allocation.batch_host, store.port()))
    ::setenv(name.c_str(), value.c_str(), 1);
  err_ << "dtlaunch job: --live: the store on " << plan_.allocation.batch_host << ":"
       << store.port() << "; one step per node" << std::endl;
  for (std::uint32_t slot = 0; slot < nodes_.size(); ++slot) start(slot, nodes_[slot], false);
  while (!done()) {
    std::vector<Stream*> streams;
    for (auto& s : steps_)
      for (auto& stream : s->streams) streams.push_back(&stream);
    pump_ready(streams, console_);
    reap();
    if (const int sig = g_user_signal) {
      g_user_signal = 0;
      for (auto& s : steps_)
        if (!s->reaped) ::kill(s->pid, sig);
    }
    if (const int sig = g_stop_signal; sig && !signalled_) {
      signalled_ = Clock::now();
      deliver_to_tasks(plan_.allocation.job_id, sig, err_);
    }
    if (!signalled_) act_on_losses();
    advance_stops();
  }
  // The written-off steps that have not ended: their node cannot be reached (Slurm ends them
  // with the job); srun is not waited for.
  for (auto& s : steps_)
    if (!s->reaped) {
      ::kill(s->pid, SIGKILL);
      while (::waitpid(s->pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      s->reaped = true;
      s->status = 128 + SIGKILL;
    }
  for (auto& s : steps_)
    for (auto& stream : s->streams)
      while (stream.fd && pump(stream, console_)) {
      }
  LiveAttempt out;
  finish(out);
  return out;
}

void LiveRun::finish(LiveAttempt& out) {
  out.run.wall = since(start_);
  if (first_failure_ && ending_) out.run.stop = since(*first_failure_);
  out.nodes = nodes_;
  out.replaced = replaced_;
  out.lost = lost_;
  if (ending_ && !signalled_) {
    out.run.evidence = blame_;
    out.run.status = blame_status_ ? blame_status_ : kPeerLost;
    return;
  }
  // Every step that still counts: their failures, in their ranks.
  for (const auto& s : steps_) {
    if (s->written_off) continue;
    for (TaskFailure f : s->evidence.failures) {
      f.tasks = ranks_of_tasks(f.tasks, s->slot * plan_.sizes.tasks_per_node);
      out.run.evidence.failures.push_back(std::move(f));
    }
    if (s->status != 0 && out.run.status == 0) out.run.status = s->status;
  }
}

}  // namespace

LiveAttempt run_live_attempt(const LivePlan& plan, const core::JobKey& key, proc::Console& console,
                             std::ostream& err) {
  return LiveRun(plan, key, console, err).run();
}

}  // namespace dtlaunch::job
