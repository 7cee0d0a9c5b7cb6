// The pure core of `dtlaunch job` (lib/job): the allocation, the nodes of each attempt, srun's
// command line and what an attempt's output says about the culprit.
#include "job/job.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/env_map.hpp"
#include "core/error.hpp"
#include "core/hmac.hpp"
#include "dtlaunch_catch.hpp"
#include "job/outcome.hpp"
#include "job/srun_output.hpp"

using namespace dtlaunch;
using namespace dtlaunch::job;

namespace {

core::EnvMap batch_env() {
  return core::EnvMap{{"SLURM_JOB_ID", "77"},
                      {"SLURM_JOB_NODELIST", "cn[1-4]"},
                      {"SLURM_TASKS_PER_NODE", "2(x4)"},
                      {"SLURM_NTASKS", "8"}};
}

bool has_label(std::string_view line) {
  const auto colon = line.find(": ");
  return colon != std::string_view::npos && colon > 0 &&
         line.substr(0, colon).find_first_not_of(" 0123456789") == std::string_view::npos;
}

// The attempt's key, as the driver makes one; sealed(TEXT) is TEXT as a task's dtlaunch prints it.
const core::JobKey kKey = core::make_job_key();
std::string sealed(std::string_view text) {
  return core::seal_line(kKey, text);
}

// The lines as srun --label writes them: srun's own bare, a task's behind its label ("0: " when
// the case gives none), read through SrunOutput as the driver reads them.
Evidence evidence_of(const std::vector<std::string>& lines) {
  Evidence e;
  SrunOutput output(true, [&e](std::string_view line, LineSource source) {
    observe_line(line, source, kKey, e);
  });
  for (const auto& l : lines)
    output.feed((l.rfind("srun: ", 0) == 0 || has_label(l) ? "" : "0: ") + l + "\n");
  output.finish();
  return e;
}

const std::vector<std::string> kNodes = {"cn1", "cn2", "cn3"};

// The exit status of the Error `f` throws; -1 when it throws none.
template <class F>
int status_of(F&& f) {
  try {
    f();
  } catch (const core::Error& e) {
    return e.exit_status();
  }
  return -1;
}

}  // namespace

TEST_CASE("job: the allocation comes from the batch job's environment") {
  const Allocation a = read_allocation(batch_env());
  CHECK(a.job_id == "77");
  CHECK(a.nodes == std::vector<std::string>{"cn1", "cn2", "cn3", "cn4"});
  CHECK(a.tasks_per_node == 2);

  core::EnvMap in_step = batch_env();
  in_step.set("SLURM_STEP_ID", "0");
  CHECK(status_of([&] { read_allocation(in_step); }) == 2);
  CHECK(status_of([&] { read_allocation(core::EnvMap{{"PATH", "/bin"}}); }) == 2);
  core::EnvMap bad = batch_env();
  bad.set("SLURM_JOB_NODELIST", "cn[1-");
  CHECK(status_of([&] { read_allocation(bad); }) == 2);
}

TEST_CASE("job: sizes from --nodes, --spare-nodes and --min-nodes") {
  const Allocation a = read_allocation(batch_env());
  struct Case {
    std::optional<std::uint32_t> nodes, spares, min;
    std::uint32_t want_nodes, want_spares, want_min;
  };
  const Case cases[] = {
      {std::nullopt, std::nullopt, std::nullopt, 4, 0, 4},
      {std::nullopt, 1, std::nullopt, 3, 1, 3},
      {3, std::nullopt, std::nullopt, 3, 1, 3},
      {2, 1, 1, 2, 1, 1},
  };
  for (const auto& c : cases) {
    JobOptions o;
    o.nodes = c.nodes;
    o.spare_nodes = c.spares;
    o.min_nodes = c.min;
    const Sizes s = decide_sizes(a, o);
    CHECK(s.nodes == c.want_nodes);
    CHECK(s.spares == c.want_spares);
    CHECK(s.min_nodes == c.want_min);
    CHECK(s.tasks_per_node == 2);
  }
  const Case bad[] = {{5, std::nullopt, std::nullopt, 0, 0, 0},
                      {3, 2, std::nullopt, 0, 0, 0},
                      {std::nullopt, 4, std::nullopt, 0, 0, 0},
                      {2, std::nullopt, 3, 0, 0, 0}};
  for (const auto& c : bad) {
    JobOptions o;
    o.nodes = c.nodes;
    o.spare_nodes = c.spares;
    o.min_nodes = c.min;
    CHECK(status_of([&] { decide_sizes(a, o); }) == 2);
  }
}

TEST_CASE("job: the victims are kept and a spare replaces the culprit") {
  const std::vector<std::string> all = {"cn1", "cn2", "cn3", "cn4"};
  CHECK(choose_nodes(all, {}, 3) == std::vector<std::string>{"cn1", "cn2", "cn3"});
  CHECK(choose_nodes(all, {"cn2"}, 3) == std::vector<std::string>{"cn1", "cn3", "cn4"});
  CHECK(choose_nodes(all, {"cn2", "cn4"}, 3) == std::vector<std::string>{"cn1", "cn3"});
}

TEST_CASE("job: srun runs the preflight on exactly the chosen nodes") {
  const Allocation a = read_allocation(batch_env());
  JobOptions o;
  o.spare_nodes = 1;
  o.program = {"./train", "--epochs", "2"};
  o.launch_args = {"--grace", "5"};
  const Sizes s = decide_sizes(a, o);
  // --label: srun's own lines told from the tasks' (srun_output.hpp).
  CHECK(srun_command("/bin/dtlaunch", {"cn1", "cn3", "cn4"}, s, a, o, 0) ==
        std::vector<std::string>{"srun", "--nodes=3", "--nodelist=cn[1,3-4]", "--ntasks=6",
                                 "--ntasks-per-node=2", "--kill-on-bad-exit=1", "--label",
                                 "/bin/dtlaunch", "--preflight", "--grace", "5", "--", "./train",
                                 "--epochs", "2"});
  // A restart shares the resources a step of the last attempt may still hold in slurmctld.
  const auto restart = srun_command("/bin/dtlaunch", {"cn1", "cn3", "cn4"}, s, a, o, 1);
  CHECK(restart[6] == "--overlap");
  CHECK(restart[8] == "/bin/dtlaunch");
  o.watch = true;
  const auto with_watch = srun_command("/bin/dtlaunch", {"cn1"}, s, a, o, 0);
  CHECK(with_watch[8] == "--preflight");
  CHECK(with_watch[9] == "--watch");
  // The user's own -l: srun is not given a second one, and the output keeps the labels.
  o.srun_args = {"-l"};
  const auto labelled = srun_command("/bin/dtlaunch", {"cn1"}, s, a, o, 0);
  CHECK(std::count(labelled.begin(), labelled.end(), "--label") == 0);
  CHECK(srun_labels_asked(o.srun_args));
  CHECK_FALSE(srun_labels_asked({"--exclusive"}));
  const std::string key(64, 'b');
  CHECK(attempt_environment(2, key) ==
        std::vector<std::pair<std::string, std::string>>{{"DTLAUNCH_RESTART_COUNT", "2"},
                                                         {"TORCHELASTIC_RESTART_COUNT", "2"},
                                                         {"DTLAUNCH_JOB_KEY", key}});
}

TEST_CASE("job: --live runs one step per node, and a replacement joins beside what is left") {
  core::EnvMap env = batch_env();
  env.set("SLURMD_NODENAME", "cn1");
  env.set("SLURM_CPUS_PER_TASK", "4");
  const Allocation a = read_allocation(env);
  CHECK(a.batch_host == "cn1");
  JobOptions o;
  o.spare_nodes = 1;
  o.live = true;
  o.program = {"./train"};
  o.launch_args = {"--grace", "5"};
  const Sizes s = decide_sizes(a, o);
  CHECK(node_step_command("/bin/dtlaunch", "cn2", 1, 3, s, a, o, false) ==
        std::vector<std::string>{"srun", "--nodes=1", "--nodelist=cn2", "--ntasks=2",
                                 "--ntasks-per-node=2", "--kill-on-bad-exit=1", "--cpus-per-task=4",
                                 "--label", "/bin/dtlaunch", "--job-node=1/3", "--grace", "5", "--",
                                 "./train"});
  // The replacement: slot 1's ranks on the spare, beside the steps that still hold resources.
  const auto replacement = node_step_command("/bin/dtlaunch", "cn4", 1, 3, s, a, o, true);
  CHECK(replacement[2] == "--nodelist=cn4");
  CHECK(replacement[6] == "--overlap");
  CHECK(replacement[10] == "--job-node=1/3");
  // No preflight in a node's step: the others run already (docs/resilience.md).
  CHECK(std::count(replacement.begin(), replacement.end(), "--preflight") == 0);

  const std::vector<std::string> all = {"cn1", "cn2", "cn3", "cn4", "cn5"};
  struct Case {
    std::set<std::string> excluded, in_use;
    std::vector<std::string> returned;
    std::optional<std::string> spare;
  };
  const Case cases[] = {
      {{}, {"cn1", "cn2", "cn3"}, {}, "cn4"},
      {{"cn2"}, {"cn1", "cn3", "cn4"}, {}, "cn5"},
      {{"cn4"}, {"cn1", "cn2", "cn3"}, {}, "cn5"},
      {{"cn2", "cn5"}, {"cn1", "cn3", "cn4"}, {}, std::nullopt},
      {{}, {"cn1", "cn2", "cn3", "cn4", "cn5"}, {}, std::nullopt},
      // Back in service: used only when no fresh spare is left, in the order they came back,
      // though earlier in the allocation.
      {{"cn3"}, {"cn1", "cn4"}, {"cn2"}, "cn5"},
      {{"cn3"}, {"cn1", "cn4", "cn5"}, {"cn2"}, "cn2"},
      {{"cn3"}, {"cn4", "cn5"}, {"cn2", "cn1"}, "cn2"},
      {{"cn3"}, {"cn2", "cn4", "cn5"}, {"cn2", "cn1"}, "cn1"},
      {{"cn1", "cn3"}, {"cn2", "cn4", "cn5"}, {"cn1"}, std::nullopt},
  };
  for (const auto& c : cases) CHECK(choose_spare(all, c.excluded, c.in_use, c.returned) == c.spare);

  CHECK(live_environment("cn1", 29400) ==
        std::vector<std::pair<std::string, std::string>>{{"MASTER_ADDR", "cn1"},
                                                         {"MASTER_PORT", "29400"},
                                                         {"DTLAUNCH_STORE_HOSTED", "1"},
                                                         {"DTLAUNCH_DDP_LIVE", "1"}});
  // srun's task numbers in a node's step, as the job's ranks.
  CHECK(ranks_of_tasks("0-1", 4) == "4-5");
  CHECK(ranks_of_tasks("1", 2) == "3");
  CHECK(ranks_of_tasks("0,2-3", 8) == "8,10-11");
  CHECK(ranks_of_tasks("", 8) == "");
}

TEST_CASE("job: srun's per-node lines are read, other lines are not") {
  const Evidence e = evidence_of({
      "srun: error: cn2: tasks 2-3: Killed",
      "srun: error: cn1: task 0: Exited with exit code 76",
      "srun: error: cn3: task 5: Segmentation fault (core dumped)",
      "srun: error: Timed out waiting for job step to complete",
      "0: srun: error: not: a task line",
      "loss 0.3",
  });
  REQUIRE(e.failures.size() == 3);
  CHECK(e.failures[0].node == "cn2");
  CHECK(e.failures[0].tasks == "2-3");
  CHECK(e.failures[0].status == 137);
  CHECK(e.failures[1].status == 76);
  CHECK(e.failures[2].status == 139);
}

TEST_CASE("job: the culprit, the cause and whether to retry") {
  struct Case {
    const char* name;
    std::vector<std::string> lines;
    int srun_status;
    Decision decision;
    std::set<std::string> culprits;
    int exit_status;
  };
  const std::string lost = sealed(
      "dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn2) exited (its connection closed), seen "
      "by rank 1, last in all_reduce #9");
  const Case cases[] = {
      {"success", {}, 0, Decision::kSucceeded, {}, 0},
      {"a node's ranks killed, the survivors name it",
       {lost, "srun: error: cn1: tasks 0-1: Exited with exit code 76",
        "srun: error: cn2: tasks 2-3: Killed"},
       1,
       Decision::kRestart,
       {"cn2"},
       1},
      {"a cut-off node says it was declared lost",
       {sealed("dtlaunch ddp: rank 4 (cn3): peer lost: this rank 4 (cn3) was declared lost by "
               "rank 3: unreachable (silent for 3 s; no connection to it)")},
       1,
       Decision::kRestart,
       {"cn3"},
       1},
      {"a frozen node woken by Slurm's SIGCONT sees the others lost, later",
       {sealed("dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn2) frozen (silent for 3 s; its "
               "host still accepts connections), seen by rank 0"),
        sealed("dtlaunch ddp: rank 2 (cn2): peer lost: rank 0 (cn1) exited (its connection "
               "closed), seen by rank 2"),
        "srun: error: cn1: task 0: Exited with exit code 76",
        "srun: error: cn2: task 2: Exited with exit code 76"},
       1,
       Decision::kRestart,
       {"cn2"},
       1},
      {"one verdict: the ranks that exited on it after it are not lost",
       {sealed("dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn2) frozen (silent for 3 s; its "
               "host still accepts connections), seen by rank 0; rank 4 (cn3) exited (its "
               "connection closed), seen by rank 5"),
        sealed("dtlaunch ddp: rank 5 (cn3): peer lost: rank 2 (cn2) frozen (silent for 3 s; its "
               "host still accepts connections), seen by rank 0; rank 0 (cn1) exited (its "
               "connection closed), seen by rank 1"),
        "srun: error: cn1: tasks 0-1: Exited with exit code 76",
        "srun: error: cn3: tasks 4-5: Exited with exit code 76",
        "srun: error: cn2: tasks 2-3: Exited with exit code 76"},
       1,
       Decision::kRestart,
       {"cn2"},
       1},
      {"dtlaunch --watch names the lost node",
       {sealed("dtlaunch --watch: rank 0 (cn1): a peer was lost: rank 4 (cn3) unreachable "
               "(silent for 3 s; no connection to it), seen by rank 0; stopping the program, "
               "exit 76"),
        "srun: error: cn1: tasks 0-1: Exited with exit code 76"},
       1,
       Decision::kRestart,
       {"cn3"},
       1},
      {"killed, no heartbeat: the first node srun saw end",
       {"srun: error: cn3: tasks 4-5: Killed", "srun: error: cn1: tasks 0-1: Killed",
        "srun: error: cn2: tasks 2-3: Killed"},
       137,
       Decision::kRestart,
       {"cn3"},
       137},
      {"the program's own failure on one node",
       {"srun: error: cn2: task 3: Exited with exit code 1",
        "srun: error: cn1: tasks 0-1: Exited with exit code 76"},
       1,
       Decision::kRestart,
       {"cn2"},
       1},
      {"the same failure on every node",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 1",
        "srun: error: cn2: tasks 2-3: Exited with exit code 1",
        "srun: error: cn3: tasks 4-5: Exited with exit code 1"},
       1,
       Decision::kPermanent,
       {},
       1},
      {"bad input",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 2"},
       2,
       Decision::kPermanent,
       {},
       2},
      {"program not found",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 127"},
       127,
       Decision::kPermanent,
       {},
       127},
      {"preempted",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 75",
        "srun: error: cn2: tasks 2-3: Exited with exit code 75"},
       75,
       Decision::kPreempted,
       {},
       75},
      {"a crash, then the others checkpoint on srun's SIGTERM and exit 75",
       {"srun: error: cn3: task 4: Killed",
        "srun: error: cn1: tasks 0-1: Exited with exit code 75"},
       137,
       Decision::kRestart,
       {"cn3"},
       137},
      {"the preflight names a node",
       {"0: " + sealed("dtlaunch --preflight: exclude: cn3"),
        "srun: error: cn1: tasks 0-1: Exited with exit code 3"},
       3,
       Decision::kRestart,
       {"cn3"},
       3},
      {"the preflight fails everywhere",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 3"},
       3,
       Decision::kPermanent,
       {},
       3},
      {"only peer-lost statuses: the silent node",
       {"srun: error: cn1: tasks 0-1: Exited with exit code 76",
        "srun: error: cn3: tasks 4-5: Exited with exit code 76"},
       1,
       Decision::kRestart,
       {"cn2"},
       76},
      {"the program's own 76, no peer named lost: the node that ended first",
       {"srun: error: cn2: tasks 2-3: Exited with exit code 76",
        "srun: error: cn1: tasks 0-1: Killed", "srun: error: cn3: tasks 4-5: Killed"},
       137,
       Decision::kRestart,
       {"cn2"},
       76},
      {"76 on every node and no peer named lost: a failure every node shares",
       {"srun: error: cn2: tasks 2-3: Exited with exit code 76",
        "srun: error: cn1: tasks 0-1: Exited with exit code 76",
        "srun: error: cn3: tasks 4-5: Exited with exit code 76"},
       1,
       Decision::kPermanent,
       {},
       76},
      {"nothing to go by", {}, 1, Decision::kRestart, {}, 1},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const Outcome o = classify(evidence_of(c.lines), kNodes, c.srun_status);
    CHECK(o.decision == c.decision);
    CHECK(o.culprits == c.culprits);
    CHECK(o.exit_status == c.exit_status);
    CHECK(!o.cause.empty());
  }
}

TEST_CASE("job: the attempt line and the summary name the culprit and the cause") {
  AttemptRecord r;
  r.attempt = 1;
  r.nodes = kNodes;
  r.outcome =
      classify(evidence_of({"srun: error: cn2: task 3: Exited with exit code 1"}), kNodes, 1);
  r.wall = std::chrono::milliseconds(12500);
  r.stop = std::chrono::milliseconds(800);
  const std::string line = attempt_line(r);
  CHECK(line.find("attempt 1 on cn[1-3]") != std::string::npos);
  CHECK(line.find("culprit cn2") != std::string::npos);
  CHECK(line.find("exit 1") != std::string::npos);
  const std::string table = summary_table({r}, "completed after 1 restart");
  CHECK(table.find("cn2") != std::string::npos);
  const std::string json = summary_json({r}, "done", 0);
  CHECK(json.find("\"culprits\": [\"cn2\"]") != std::string::npos);
  CHECK(json.find("\"nodes\": \"cn[1-3]\"") != std::string::npos);
}

TEST_CASE("job: --no-retry-exit's statuses end the job, other statuses still restart") {
  const std::set<int> no_retry = parse_exit_statuses("--no-retry-exit", "3,10-12");
  CHECK(no_retry == std::set<int>{3, 10, 11, 12});
  const auto crash = evidence_of({"srun: error: cn2: task 3: Exited with exit code 11",
                                  "srun: error: cn1: tasks 0-1: Exited with exit code 76"});
  const Outcome stopped = classify(crash, kNodes, 1, no_retry);
  CHECK(stopped.decision == Decision::kPermanent);
  CHECK(stopped.exit_status == 11);
  CHECK(stopped.cause.find("--no-retry-exit") != std::string::npos);
  CHECK(classify(crash, kNodes, 1, {1, 2}).decision == Decision::kRestart);
  CHECK(classify(crash, kNodes, 1).decision == Decision::kRestart);
  // 76 is the survivors' "peer lost", never the listed status of the culprit.
  CHECK(classify(crash, kNodes, 1, {76}).decision == Decision::kPermanent);
}

TEST_CASE("job: --no-retry-exit's value is checked") {
  for (const char* bad : {"", "0", "256", "3,", "a", "12-10", "3-", "-3", "1,,2", "3 4"}) {
    INFO(bad);
    CHECK(status_of([&] { parse_exit_statuses("--no-retry-exit", bad); }) == 2);
  }
  try {
    parse_exit_statuses("--no-retry-exit", "3,x");
    FAIL("no error");
  } catch (const core::Error& e) {
    CHECK(std::string(e.what()).find("--no-retry-exit") != std::string::npos);
    CHECK(std::string(e.what()).find("'x'") != std::string::npos);
  }
  CHECK(parse_exit_statuses("--no-retry-exit", "255") == std::set<int>{255});
}

TEST_CASE("job: two attempts that fail the same way stop the job") {
  const auto attempt = [](std::uint32_t n, const std::vector<std::string>& lines) {
    AttemptRecord r;
    r.attempt = n;
    r.nodes = kNodes;
    r.outcome = classify(evidence_of(lines), kNodes, 1);
    return r;
  };
  const auto exit1_on = [&](std::uint32_t n, const std::string& node) {
    return attempt(n, {"srun: error: " + node + ": task 3: Exited with exit code 1"});
  };
  const auto lost_at = [](std::string_view collective) {
    return sealed(
        "dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn2) exited (its connection "
        "closed), seen by rank 1, last in " +
        std::string(collective));
  };
  const std::string lost_at_9 = lost_at("all_reduce #9");
  struct Case {
    const char* name;
    std::vector<AttemptRecord> attempts;
    bool stops;
  };
  const Case cases[] = {
      {"one attempt", {exit1_on(1, "cn2")}, false},
      {"exit 1 twice, on different nodes", {exit1_on(1, "cn2"), exit1_on(2, "cn3")}, true},
      {"exit 1, then exit 4",
       {exit1_on(1, "cn2"), attempt(2, {"srun: error: cn3: task 3: Exited with exit code 4"})},
       false},
      {"the same collective twice", {attempt(1, {lost_at_9}), attempt(2, {lost_at_9})}, true},
      {"lost at different collectives",
       {attempt(1, {lost_at_9}), attempt(2, {lost_at("all_reduce #42")})},
       false},
      {"silent nodes say nothing of how",
       {attempt(1, {"srun: error: cn1: tasks 0-1: Exited with exit code 76"}),
        attempt(2, {"srun: error: cn1: tasks 0-1: Exited with exit code 76"})},
       false},
      {"a loop is the last two, not any two",
       {exit1_on(1, "cn2"), attempt(2, {lost_at_9}), exit1_on(3, "cn1")},
       false},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const auto why = repeated_failure(c.attempts);
    CHECK(why.has_value() == c.stops);
    if (why) CHECK(why->find("failed the same way") != std::string::npos);
  }
  CHECK(exit1_on(1, "cn2").outcome.signature == "exit 1");
  CHECK(attempt(1, {lost_at_9}).outcome.signature == "all_reduce #9");
}

TEST_CASE("job: out of nodes, --min-nodes is advised only where it can help") {
  Sizes sizes;
  sizes.nodes = 3;
  sizes.min_nodes = 3;
  JobOptions options;
  const std::string advice = "--min-nodes lets";
  const std::string line = out_of_nodes(2, {"cn2"}, sizes, options);
  CHECK(line.find("2 healthy node(s) left (cn2 excluded), 3 needed") != std::string::npos);
  CHECK(line.find(advice) != std::string::npos);
  options.min_nodes = 2;
  sizes.min_nodes = 2;
  CHECK(out_of_nodes(1, {"cn2", "cn3"}, sizes, options).find(advice) == std::string::npos);
  options.min_nodes.reset();
  sizes.nodes = sizes.min_nodes = 1;
  CHECK(out_of_nodes(0, {"cn1", "cn2"}, sizes, options).find(advice) == std::string::npos);
}

TEST_CASE("job: srun's own lines are told from the tasks', in pieces cut anywhere") {
  const std::string text =
      "  0: step 1\n"
      "srun: error: cn2: task 3: Killed\n"
      " 12: srun: error: cn2: task 1: Killed\n"
      "  3: progress 50%\r  3: still going\n"
      "12:no blank after the colon\n"
      "1234567890123456789: too long a number\n"
      "  \n"
      "  7: " +
      std::string(70000, 'x') + "srun: error: cn3: task 2: Killed\n" + "  1: last words";
  // What srun's own lines and the tasks' lines are, however the stream is cut.
  for (std::size_t piece : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7},
                            std::size_t{4096}, text.size()}) {
    INFO("pieces of " << piece);
    std::vector<std::pair<std::string, LineSource>> lines;
    SrunOutput output(true, [&lines](std::string_view line, LineSource source) {
      lines.emplace_back(std::string(line.substr(0, 40)), source);
    });
    std::string passed;
    for (std::size_t at = 0; at < text.size(); at += piece)
      passed += output.feed(std::string_view(text).substr(at, piece));
    passed += output.finish();
    const std::vector<std::pair<std::string, LineSource>> want = {
        {"step 1", LineSource::kTask},
        {"srun: error: cn2: task 3: Killed", LineSource::kSrun},
        {"srun: error: cn2: task 1: Killed", LineSource::kTask},
        {"progress 50%\r  3: still going", LineSource::kTask},
        {"12:no blank after the colon", LineSource::kSrun},
        {"1234567890123456789: too long a number", LineSource::kSrun},
        {"  ", LineSource::kSrun},
        // the 70,000-byte line is passed on but never read
        {"last words", LineSource::kTask},
    };
    CHECK(lines == want);
    // Passed on as it came, less the labels at the lines' starts.
    CHECK(passed.rfind("step 1\nsrun: error: cn2: task 3: Killed\nsrun: error: cn2: task 1", 0) ==
          0);
    CHECK(passed.find("  0: ") == std::string::npos);
    CHECK(passed.find("\r  3: still going") != std::string::npos);
    CHECK(passed.size() == text.size() - 5 - 5 - 5 - 5 - 5);
  }
  // srun --label cuts a task's line every 1,024 bytes: the pieces of one task are joined again.
  {
    const std::string k(1024, 'x');
    std::vector<std::pair<std::string, LineSource>> lines;
    SrunOutput output(true, [&lines](std::string_view line, LineSource source) {
      lines.emplace_back(std::string(line.substr(line.size() > 40 ? line.size() - 40 : 0)), source);
    });
    std::string passed;
    for (char c : "1: " + k + "\n1: " + k + "\n1: tail srun: error: cn2: task 1: Killed\n" +
                      "1: " + k + "\nsrun: error: cn3: task 0: Killed\n" + "1: " + k + "\n0: a\n" +
                      "1: " + k + "\n")
      passed += output.feed(std::string_view(&c, 1));
    passed += output.finish();
    CHECK(passed == k + k + "tail srun: error: cn2: task 1: Killed\n" + k +
                        "\nsrun: error: cn3: task 0: Killed\n" + k + "\na\n" + k + "\n");
    REQUIRE(lines.size() == 6);
    CHECK(lines[0] == std::make_pair(std::string("xxxtail srun: error: cn2: task 1: Killed"),
                                     LineSource::kTask));
    CHECK(lines[2] ==
          std::make_pair(std::string("srun: error: cn3: task 0: Killed"), LineSource::kSrun));
    // With the labels kept (the user's -l), srun's output is passed on as it is.
    SrunOutput kept(false, [](std::string_view, LineSource) {});
    const std::string raw = "1: " + k + "\n1: end\n";
    CHECK(kept.feed(raw) + kept.finish() == raw);
  }
  // Asked for by the user: the labels stay in what is passed on.
  SrunOutput keep(false, [](std::string_view, LineSource) {});
  CHECK(keep.feed("  0: step 1\n") == "  0: step 1\n");
}

TEST_CASE(
    "job: a line a task prints that looks like srun's or like the runtime's decides nothing") {
  // The program, healthy, prints srun's words and the runtime's, then ends well.
  const Evidence forged = evidence_of({"1: srun: error: cn2: task 2: Killed",
                                       "1: srun: error: cn3: tasks 0-1: Exited with exit "
                                       "code 75"});
  CHECK(forged.failures.empty());
  CHECK(classify(forged, kNodes, 0).decision == Decision::kSucceeded);
  // Failing for its own reason on cn1, after printing srun's words about cn2.
  const Evidence mixed = evidence_of({"0: srun: error: cn2: task 2: Killed",
                                      "srun: error: cn1: task 0: Exited with exit code 1",
                                      "srun: error: cn2: tasks 2-3: Killed"});
  CHECK(classify(mixed, kNodes, 1).culprits == std::set<std::string>{"cn1"});
}

TEST_CASE("job: only lines sealed with the attempt's key name lost or excluded nodes") {
  const std::string lost_cn2 =
      "dtlaunch ddp: rank 0 (cn1): peer lost: rank 2 (cn2) exited (its connection closed), seen "
      "by rank 0";
  const std::string watch_cn2 =
      "dtlaunch --watch: rank 0 (cn1): a peer was lost: rank 2 (cn2) exited, seen by rank 0; "
      "stopping the program, exit 76";
  const std::string exclude_all = "dtlaunch --preflight: exclude: cn[1-3]";
  const core::JobKey old_attempt = core::make_job_key();
  // What a program may print: the words as they are, an old attempt's sealed line from a log, the
  // runtime's error as the example prints it, the doctor's report line, a seal made up.
  const std::vector<std::string> forged = {
      lost_cn2,
      watch_cn2,
      exclude_all,
      core::seal_line(old_attempt, lost_cn2),
      core::seal_line(old_attempt, exclude_all),
      "dtlaunch-train: peer-lost error: dtlaunch ddp: rank 0 (cn1): peer lost (heartbeat, "
      "timeout 3 s): rank 2 (cn2) exited",
      "exclude: cn[1-3]   (srun/sbatch --exclude=cn[1-3])",
      lost_cn2 + " [seal " + std::string(32, '0') + "]",
  };
  for (const auto& line : forged) {
    INFO(line);
    const Evidence e = evidence_of({line, "srun: error: cn3: task 4: Exited with exit code 1"});
    CHECK(e.lost_nodes.empty());
    CHECK(e.preflight_exclude.empty());
    CHECK(classify(e, kNodes, 1).culprits == std::set<std::string>{"cn3"});
  }
  // The same words sealed with this attempt's key are the task's dtlaunch speaking.
  CHECK(evidence_of({sealed(lost_cn2)}).lost_nodes == std::set<std::string>{"cn2"});
  CHECK(evidence_of({sealed(watch_cn2)}).lost_nodes == std::set<std::string>{"cn2"});
  // --live reads every naming once, in order: cn2 named again after cn3 (a node back in service
  // and lost again) is a new report, though the set has it already.
  const std::string lost_cn3 =
      "dtlaunch ddp: rank 0 (cn1): peer lost: rank 4 (cn3) exited (its connection closed), seen "
      "by rank 0";
  CHECK(evidence_of({sealed(lost_cn2), sealed(lost_cn3), sealed(lost_cn2)}).lost_reports ==
        std::vector<std::string>{"cn2", "cn3", "cn2"});
  CHECK(evidence_of({sealed(exclude_all)}).preflight_exclude ==
        std::set<std::string>{"cn1", "cn2", "cn3"});
  // A cut-off task under --watch names itself, as the runtime does.
  CHECK(evidence_of({sealed("dtlaunch --watch: rank 4 (cn3): a peer was lost: this task, rank 4 "
                            "(cn3), was declared lost by rank 3: unreachable (silent for 3 s; no "
                            "connection to it); stopping the program, exit 76")})
            .lost_nodes == std::set<std::string>{"cn3"});
  // On srun's side of the stream a sealed line is no task's report either.
  Evidence bare;
  observe_line(sealed(lost_cn2), LineSource::kSrun, kKey, bare);
  CHECK(bare.lost_nodes.empty());
}
