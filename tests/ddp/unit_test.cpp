// Pure parts of the DDP runtime: the launch environment and the bucket plan.
#include <cstdlib>

#include "../../lib/ddp/src/failure_record.hpp"
#include "../../lib/ddp/src/internal.hpp"
#include "dtlaunch/ddp.h"
#include "dtlaunch_catch.hpp"

using dtlaunch::ddp::plan_buckets;
using dtlaunch::ddp::WorkerEnv;
using Vars = std::map<std::string, std::string>;

namespace {

Vars base() {
  return {{"RANK", "3"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "node01"},
          {"MASTER_PORT", "29500"}};
}

Vars with(Vars v, const std::string& name, const std::string& value) {
  v[name] = value;
  return v;
}

Vars without(Vars v, const std::string& name) {
  v.erase(name);
  return v;
}

}  // namespace

TEST_CASE("WorkerEnv reads the launch contract", "[ddp][env]") {
  auto env = WorkerEnv::from_variables(base());
  CHECK(env.rank == 3);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.device_index == 1);  // LOCAL_RANK, as under torchrun
  CHECK(env.master_addr == "node01");
  CHECK(env.master_port == 29500);

  CHECK(WorkerEnv::from_variables(with(base(), "DTLAUNCH_CUDA_DEVICE", "0")).device_index == 0);
  CHECK(WorkerEnv::from_variables(with(base(), "DTLAUNCH_CUDA_DEVICE", "")).device_index == 1);
  auto minimal =
      WorkerEnv::from_variables(without(without(base(), "LOCAL_RANK"), "LOCAL_WORLD_SIZE"));
  CHECK(minimal.local_rank == 0);
  CHECK(minimal.local_world_size == 1);
  CHECK(minimal.device_index == 0);
  CHECK(minimal.node_rank == 0);  // NODE_RANK unset: one node, as far as the contract says
  CHECK(WorkerEnv::from_variables(with(with(base(), "NODE_RANK", "2"), "NNODES", "3")).node_rank ==
        2);

  // USE_LIBUV as PyTorch reads it: the libuv store server unless it is "0".
  CHECK(env.store_use_libuv);
  CHECK(WorkerEnv::from_variables(with(base(), "USE_LIBUV", "1")).store_use_libuv);
  CHECK_FALSE(WorkerEnv::from_variables(with(base(), "USE_LIBUV", "0")).store_use_libuv);
}

TEST_CASE("WorkerEnv names every missing or malformed variable in one line", "[ddp][env]") {
  struct Case {
    Vars vars;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {without(base(), "RANK"), {"missing RANK (set by dtlaunch or torchrun)"}},
      {without(without(base(), "MASTER_ADDR"), "MASTER_PORT"),
       {"missing MASTER_ADDR, MASTER_PORT"}},
      {with(base(), "MASTER_ADDR", ""), {"missing MASTER_ADDR"}},
      // An empty value counts as unset, as for the launcher.
      {with(base(), "RANK", ""), {"missing RANK (set by dtlaunch or torchrun)"}},
      {with(base(), "RANK", std::string(120000, '7')), {"RANK='7777", "... (120000 bytes)'"}},
      {with(base(), "RANK", "x"), {"RANK='x' is not an integer"}},
      {with(base(), "RANK", "-1"), {"RANK='-1' is not an integer"}},
      {with(base(), "RANK", " 3"), {"RANK=' 3' is not an integer"}},
      {with(base(), "RANK", "8"), {"RANK=8 is not below WORLD_SIZE=8"}},
      {with(base(), "WORLD_SIZE", "0"), {"WORLD_SIZE='0' must be at least 1"}},
      {with(base(), "MASTER_PORT", "65536"), {"MASTER_PORT='65536' is not an integer in 0..65535"}},
      {with(base(), "MASTER_PORT", "0"), {"MASTER_PORT='0' is not a usable port"}},
      {with(base(), "LOCAL_RANK", "4"), {"LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"}},
      {with(base(), "DTLAUNCH_CUDA_DEVICE", "gpu0"), {"DTLAUNCH_CUDA_DEVICE='gpu0'"}},
      {with(base(), "USE_LIBUV", "yes"), {"USE_LIBUV='yes' must be 0 or 1"}},
      {with(without(base(), "RANK"), "MASTER_PORT", "p"),
       {"missing RANK", "; MASTER_PORT='p' is not an integer"}},
  };
  for (const auto& c : cases) {
    std::string msg;
    try {
      WorkerEnv::from_variables(c.vars);
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.rfind("dtlaunch ddp: bad launch environment: ", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    for (const auto& part : c.expected) CHECK(msg.find(part) != std::string::npos);
  }
}

TEST_CASE("WorkerEnv::from_environment reads the process environment", "[ddp][env]") {
  for (const auto& [k, v] : base()) ::setenv(k.c_str(), v.c_str(), 1);
  ::setenv("DTLAUNCH_CUDA_DEVICE", "2", 1);
  auto env = WorkerEnv::from_environment();
  CHECK(env.rank == 3);
  CHECK(env.device_index == 2);
  for (const auto& [k, v] : base()) ::unsetenv(k.c_str());
  ::unsetenv("DTLAUNCH_CUDA_DEVICE");
  CHECK_THROWS_WITH(WorkerEnv::from_environment(),
                    dtlaunch_test::contains_text("missing RANK, WORLD_SIZE"));
}

TEST_CASE("plan_buckets", "[ddp][buckets]") {
  using Buckets = std::vector<std::vector<size_t>>;
  constexpr size_t kSame = SIZE_MAX;  // first_cap_bytes over the cap: every bucket alike
  struct Case {
    const char* name;
    std::vector<size_t> bytes;
    std::vector<int> kinds;
    size_t cap, first_cap;
    Buckets expected;
  };
  const std::vector<Case> cases = {
      {"empty", {}, {}, 100, kSame, {}},
      {"all fit in one", {10, 20, 30}, {0, 0, 0}, 100, kSame, {{0, 1, 2}}},
      {"closes once the cap is reached",
       {40, 60, 10, 90, 5},
       {0, 0, 0, 0, 0},
       100,
       kSame,
       {{0, 1}, {2, 3}, {4}}},
      {"a gradient over the cap gets its own", {10, 500, 10}, {0, 0, 0}, 100, kSame, {{0, 1}, {2}}},
      {"cap 0: one per gradient", {4, 4, 4}, {0, 0, 0}, 0, kSame, {{0}, {1}, {2}}},
      {"kinds never share", {10, 10, 10, 10}, {0, 1, 0, 1}, 100, kSame, {{0, 2}, {1, 3}}},
      {"kinds close independently, in order of their last gradient",
       {60, 10, 50, 10},
       {0, 1, 0, 1},
       100,
       kSame,
       {{0, 2}, {1, 3}}},
      {"a later kind can close first",
       {10, 60, 50, 10},
       {0, 1, 1, 0},
       100,
       kSame,
       {{1, 2}, {0, 3}}},
      {"the first bucket closes at the first cap",
       {10, 20, 30, 40, 50},
       {0, 0, 0, 0, 0},
       100,
       25,
       {{0, 1}, {2, 3, 4}}},
      {"first cap 0: the first gradient alone", {10, 20, 30}, {0, 0, 0}, 100, 0, {{0}, {1, 2}}},
      {"a first cap over the cap is the cap", {60, 50, 60}, {0, 0, 0}, 100, 1000, {{0, 1}, {2}}},
      {"each kind has a first bucket of its own",
       {10, 10, 10, 10, 10, 10},
       {0, 1, 0, 1, 0, 1},
       100,
       15,
       {{0, 2}, {1, 3}, {4}, {5}}},
      // The benchmark's MLP (bench/ddp/mlp_step.cpp) with the defaults, as PyTorch buckets it:
      // out's bias and weight, hidden's, in's.
      {"1 MiB first bucket, 25 MiB cap",
       {4096, 16777216, 16384, 67108864, 16384, 16777216},
       {0, 0, 0, 0, 0, 0},
       25u << 20,
       1u << 20,
       {{0, 1}, {2, 3}, {4, 5}}},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    CHECK(plan_buckets(c.bytes, c.kinds, c.cap, c.first_cap) == c.expected);
  }
  CHECK_THROWS_WITH(plan_buckets({1, 2}, {0}, 10, 10),
                    dtlaunch_test::contains_text("2 sizes but 1 kinds"));
}

TEST_CASE("automatic Gloo threads count the CPUs this rank may run on, not the node") {
  using dtlaunch::ddp::detail::automatic_gloo_threads;
  // The whole node (no binding): its CPUs are shared by the local ranks.
  CHECK(automatic_gloo_threads(2, 2, 2) == 1);
  CHECK(automatic_gloo_threads(64, 64, 8) == 2);
  CHECK(automatic_gloo_threads(64, 64, 32) == 1);
  // A mask narrower than the node (srun or dtlaunch --cpu-bind, a cpuset): this rank's own.
  CHECK(automatic_gloo_threads(8, 224, 8) == 2);
  CHECK(automatic_gloo_threads(2, 224, 8) == 1);  // hardware_concurrency would have said 224
  CHECK(automatic_gloo_threads(1, 2, 1) == 1);
}

TEST_CASE("backend failures are classified by their message", "[ddp][errors]") {
  using dtlaunch::ddp::ErrorKind;
  using dtlaunch::ddp::detail::classify_backend_failure;
  struct Row {
    const char* message;
    ErrorKind kind;
  };
  // Gloo's own wording, as LibTorch 1.13 and 2.6 print it.
  for (const Row& row :
       {Row{"[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "2000ms for recv operation to complete",
            ErrorKind::kTimeout},
        Row{"[../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
            "[127.0.0.1]:27734",
            ErrorKind::kPeerLost},
        Row{"[pair.cc:589] Read error [127.0.0.1]:5678: Connection reset by peer",
            ErrorKind::kPeerLost},
        Row{"[pair.cc:446] Write error [127.0.0.1]:5678: Broken pipe", ErrorKind::kPeerLost},
        Row{"Invalid scalar type", ErrorKind::kBackend}}) {
    INFO(row.message);
    CHECK(classify_backend_failure(row.message) == row.kind);
  }
}

TEST_CASE("the runtime's errors carry their kind", "[ddp][errors]") {
  using dtlaunch::ddp::ErrorKind;
  CHECK(std::string(dtlaunch::ddp::to_string(ErrorKind::kPeerLost)) == "peer-lost");
  CHECK(std::string(dtlaunch::ddp::to_string(ErrorKind::kMismatch)) == "mismatch");
  CHECK(std::string(dtlaunch::ddp::to_string(ErrorKind::kStopped)) == "stopped");
  try {
    WorkerEnv::from_variables(without(base(), "RANK"));
    FAIL("no error for a missing RANK");
  } catch (const dtlaunch::ddp::Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
  }
  try {
    plan_buckets({4}, {0, 1}, 16, 16);
    FAIL("no error for slots and kinds of different lengths");
  } catch (const dtlaunch::ddp::Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
  }
}

TEST_CASE("a malformed runtime setting fails init_process_group at once, its value quoted safely",
          "[ddp][env]") {
  using dtlaunch::ddp::ErrorKind;
  const WorkerEnv env = WorkerEnv::from_variables(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "9"}});
  dtlaunch::ddp::InitOptions options;
  options.backend = dtlaunch::ddp::Backend::kGloo;
  options.timeout = std::chrono::seconds(1);
  const std::string huge(100'000, '7');
  const std::pair<std::string, std::string> cases[] = {
      // An escape sequence is shown escaped, never sent to the terminal.
      {"DTLAUNCH_DDP_HEARTBEAT_TIMEOUT", "\x1b[2J"},
      {"DTLAUNCH_DDP_SHM", "yes"},
      {"DTLAUNCH_DDP_CHECK", "on"},
      // 100 KB are cut to a line.
      {"DTLAUNCH_DDP_TRACE_ENTRIES", huge},
  };
  const std::string expected[] = {
      "dtlaunch ddp: DTLAUNCH_DDP_HEARTBEAT_TIMEOUT='\\x1b[2J' is not an integer in 0..86400",
      "dtlaunch ddp: DTLAUNCH_DDP_SHM='yes' must be 0 or 1",
      "dtlaunch ddp: DTLAUNCH_DDP_CHECK='on' must be 0 or 1",
      "dtlaunch ddp: DTLAUNCH_DDP_TRACE_ENTRIES='" + huge.substr(0, 80) +
          "... (100000 bytes)' is not an integer in 0..1000000",
  };
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const auto& [name, value] = cases[i];
    ::setenv(name.c_str(), value.c_str(), 1);
    try {
      dtlaunch::ddp::init_process_group(env, options);
      FAIL("init_process_group accepted " << name);
    } catch (const dtlaunch::ddp::Error& e) {
      CHECK(e.kind() == ErrorKind::kConfig);
      CHECK(std::string(e.what()) == expected[i]);
    }
    ::unsetenv(name.c_str());
  }
}

TEST_CASE("failure record: sealed with the job key, a forged one flagged and any one escaped") {
  using namespace dtlaunch::ddp::detail;
  const auto key = dtlaunch::core::make_job_key();
  const std::string sealed = encode_failure(1, "rendezvous timed out", key);
  const FailureRecord good = decode_failure(sealed, key);
  CHECK_FALSE(good.forged);
  CHECK(good.kind == 1);
  CHECK(good.message == "rendezvous timed out");
  struct Case {
    std::string record;
    bool forged;
    std::string message;
  };
  const Case cases[] = {
      // What the probe wrote into the store: raw terminal escapes, no MAC.
      {"2\n\x1b]0;owned\x07peer lost\x1b[2J", true, "\\x1b]0;owned\\x07peer lost\\x1b[2J"},
      {encode_failure(1, "x", dtlaunch::core::make_job_key()), true, "x"},  // another job's
      {"1 " + std::string(64, '0') + "\nrendezvous timed out", true, "rendezvous timed out"},
      {sealed.substr(0, sealed.size() - 1), true, "rendezvous timed ou"},  // tampered
      {"3" + sealed.substr(1), true, "rendezvous timed out"},
  };
  for (const Case& c : cases) {
    INFO(c.record);
    const FailureRecord r = decode_failure(c.record, key);
    CHECK(r.forged == c.forged);
    CHECK(r.message == c.message);
  }
  // Without a key nothing can be told forged; the text is escaped still.
  const FailureRecord plain = decode_failure("2\n\x1b[2Jlost\nsecond line", std::nullopt);
  CHECK_FALSE(plain.forged);
  CHECK(plain.kind == 2);
  CHECK(plain.message == "\\x1b[2Jlost");
  CHECK(decode_failure(encode_failure(4, "m", std::nullopt), std::nullopt).kind == 4);
  CHECK(forged_failure_line("rank 3", decode_failure(cases[0].record, key)) ==
        "dtlaunch ddp: rank 3: a forged failure record was ignored "
        "(\"\\\\x1b]0;owned\\\\x07peer lost\\\\x1b[2J\": not sealed with the job key; "
        "docs/security.md)");
}
