#include "launch/gpu.hpp"

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;
using S = std::vector<std::string>;

TEST_CASE("CUDA_VISIBLE_DEVICES parsing follows CUDA's rules") {
  const std::pair<const char*, S> cases[] = {
      {"0,1,2,3", {"0", "1", "2", "3"}},
      {"3,1", {"3", "1"}},
      {"", {}},
      {"NoDevFiles", {}},
      {"-1", {}},
      {"0,-1,2", {"0"}},  // CUDA stops at the first invalid entry
      {"0,,2", {"0"}},
      {"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6,GPU-0a1b",
       {"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "GPU-0a1b"}},
      {"MIG-GPU-8932f937/1/0,MIG-GPU-8932f937/2/0",
       {"MIG-GPU-8932f937/1/0", "MIG-GPU-8932f937/2/0"}},
      {"MIG-c6a4d5c2-1e3a-5b7f-8e0d-0123456789ab", {"MIG-c6a4d5c2-1e3a-5b7f-8e0d-0123456789ab"}},
      {" 0, 1", {"0", "1"}},
      {"0,1,", {"0", "1"}},
  };
  for (const auto& [text, expected] : cases) {
    INFO("'" << text << "'");
    CHECK(parse_visible_devices(text) == expected);
  }
}

TEST_CASE("CUDA_VISIBLE_DEVICES entries CUDA cannot read are refused, naming the entry") {
  // CUDA would stop at them and see no device from there on, silently.
  for (const char* text : {"a,b", "0,x", "gpu0", "0,1 2", "GPU", "cuda:0"}) {
    INFO(text);
    std::string msg;
    try {
      parse_visible_devices(text);
      FAIL("accepted");
    } catch (const core::Error& e) {
      msg = e.what();
      CHECK(e.exit_status() == 2);
    }
    CHECK(msg.rfind("CUDA_VISIBLE_DEVICES='" + std::string(text) + "': entry '", 0) == 0);
  }
  try {
    parse_visible_devices("1,z", "SLURM_STEP_GPUS");
    FAIL("accepted");
  } catch (const core::Error& e) {
    CHECK(std::string(e.what()).rfind("SLURM_STEP_GPUS='1,z': entry 'z'", 0) == 0);
  }
}

namespace {
GpuPlan plan(S visible, GpuBind bind = GpuBind::kShare, bool from_env = true) {
  GpuPlan p;
  p.visible = std::move(visible);
  p.bind = bind;
  p.from_cuda_visible_devices = from_env;
  if (from_env) {
    std::string list;
    for (const std::string& id : p.visible) list += (list.empty() ? "" : ",") + id;
    p.counted_from = "CUDA_VISIBLE_DEVICES='" + list + "'";
  }
  return p;
}
}  // namespace

TEST_CASE("device choice: share mode maps local rank through the visible list") {
  // Slurm narrowed the node's GPUs to 4,5,6,7 (indices, UUIDs or MIG ids alike): local rank r
  // uses visible entry r, and its index within the list is r.
  for (S visible : {S{"4", "5", "6", "7"}, S{"GPU-a", "GPU-b", "GPU-c", "GPU-d"},
                    S{"MIG-1/1/0", "MIG-1/2/0", "MIG-2/1/0", "MIG-2/2/0"}}) {
    for (std::uint32_t r = 0; r < 4; ++r) {
      auto d = choose_device(plan(visible), r, 4);
      REQUIRE(d);
      CHECK(d->index == r);
      CHECK(d->id == visible[r]);
    }
  }
  // More GPUs than ranks: each rank still takes its own.
  CHECK(choose_device(plan({"0", "1", "2", "3"}), 1, 2)->index == 1);
}

TEST_CASE("device choice: isolate mode gives the device id to narrow to") {
  auto d = choose_device(plan({"GPU-a", "GPU-b"}, GpuBind::kIsolate), 1, 2);
  REQUIRE(d);
  CHECK(d->id == "GPU-b");
}

TEST_CASE("device choice: Slurm's per-task isolation means index 0 and one warning for rank 0") {
  GpuPlan p = plan({"3"});
  p.isolated_by_slurm = true;
  for (std::uint32_t r = 0; r < 4; ++r) {
    auto d = choose_device(p, r, 4);
    REQUIRE(d);
    CHECK(d->index == 0);
    CHECK(d->id == "3");
  }
  std::vector<Note> notes;
  check_gpu_plan(p, 4, notes);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].level == Note::Level::kWarn);
  CHECK(notes[0].rank0_only);
  CHECK(notes[0].text.find("NVLink") != std::string::npos);
}

TEST_CASE("device choice: fewer GPUs than local ranks is an error unless sharing is allowed") {
  GpuPlan p = plan({"0", "1"});
  std::vector<Note> notes;
  try {
    check_gpu_plan(p, 4, notes);
    FAIL("accepted");
  } catch (const core::Error& e) {
    CHECK(e.exit_status() == 2);
    CHECK(std::string(e.what()) ==
          "2 GPU(s) (CUDA_VISIBLE_DEVICES='0,1') for 4 ranks on this node: ask Slurm for one GPU "
          "per task (--gpus-per-node=4 or --gpus-per-task=1), or pass --allow-gpu-sharing to put "
          "several ranks on one GPU");
  }
  p.mode = Mode::kLocal;  // the ranks per node are ours to set, not Slurm's
  try {
    check_gpu_plan(p, 4, notes);
    FAIL("accepted");
  } catch (const core::Error& e) {
    CHECK(std::string(e.what()) ==
          "2 GPU(s) (CUDA_VISIBLE_DEVICES='0,1') for 4 ranks on this node: pass --nproc-per-node "
          "2 or fewer, or --allow-gpu-sharing to put several ranks on one GPU");
  }
  CHECK_THROWS_AS(choose_device(p, 3, 4), core::Error);
  p.allow_sharing = true;
  check_gpu_plan(p, 4, notes);
  CHECK(choose_device(p, 3, 4)->index == 1);
  CHECK(choose_device(p, 2, 4)->index == 0);
}

TEST_CASE("device choice: no GPU, or binding off, binds nothing") {
  std::vector<Note> notes;
  check_gpu_plan(plan({}), 8, notes);
  CHECK_FALSE(choose_device(plan({}), 0, 8));
  CHECK_FALSE(choose_device(plan({"0"}, GpuBind::kNone), 0, 1));
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].text.find("no GPU") != std::string::npos);
}
