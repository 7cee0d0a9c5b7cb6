// Live recovery (ddp.h's TrainingState and LiveRun; docs/ddp.md, "Live recovery"). Each
// generation of the group has its own rendezvous, heartbeat and backend under the prefix
// "dtlaunch/live/G/" of the job's store, so that nothing of a torn-down generation can meet the
// next one. A recovery, on every survivor: the heartbeat's verdict names the lost ranks; the old
// group is destroyed (the verdict already shut its connections: no collective timeout); each
// lost rank is marked wanted in the next generation; the survivors and the replacements
// rendezvous there with the same world size, a replacement under the lost rank's number (same
// reduction order, same bits); they all-gather their completed step; the lowest rank at the
// highest step sends its serialised state, point to point, to every rank behind it.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "core/hmac.hpp"
#include "core/host.hpp"
#include "core/text.hpp"
#include "failure_record.hpp"
#include "internal.hpp"
#include "live_wanted.hpp"
#include "peer_watch.hpp"
#include "rng_state.hpp"
#include "settings.hpp"
#include "startup_line.hpp"
#include "store_client.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp {

namespace {

constexpr const char* kStepKey = "dtlaunch_step";
constexpr const char* kCpuRngKey = "dtlaunch_cpu_rng";
constexpr const char* kCudaRngKey = "dtlaunch_cuda_rng";  // this rank's CUDA device's

// An archive key is a TorchScript attribute name: no dots, not empty.
void check_part_name(const std::string& name) {
  const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_';
  });
  if (!ok || name.rfind("dtlaunch_", 0) == 0)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: TrainingState part name '" +
                                        core::excerpt(name) +
                                        "' must be letters, digits and _ and not start with "
                                        "dtlaunch_");
}

}  // namespace

TrainingState& TrainingState::add(const std::string& name, Save save, Load load) {
  return add(name, std::move(save), std::move(load), [] { return std::string("save/load"); });
}

TrainingState& TrainingState::add(const std::string& name, Save save, Load load,
                                  std::function<std::string()> describe) {
  check_part_name(name);
  for (const Part& p : parts_)
    if (p.name == name)
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: TrainingState has two parts named '" + name + "'");
  parts_.push_back(Part{name, std::move(save), std::move(load), std::move(describe)});
  return *this;
}

TrainingState& TrainingState::add(const std::string& name, torch::nn::Module& module) {
  return add(
      name, [&module](torch::serialize::OutputArchive& a) { module.save(a); },
      [&module](torch::serialize::InputArchive& a) { module.load(a); },
      [&module] {
        std::string out = "module";
        const auto add_tensor = [&out](const std::string& key, const at::Tensor& t) {
          out += " " + key + ":" + std::string(c10::toString(t.scalar_type())) + "[";
          for (int64_t d = 0; d < t.dim(); ++d) out += (d ? "," : "") + std::to_string(t.size(d));
          out += "]";
        };
        for (const auto& p : module.named_parameters(true)) add_tensor(p.key(), p.value());
        for (const auto& b : module.named_buffers(true)) add_tensor(b.key(), b.value());
        return out;
      });
}

TrainingState& TrainingState::add(const std::string& name, torch::optim::Optimizer& optimizer) {
  return add(
      name, [&optimizer](torch::serialize::OutputArchive& a) { optimizer.save(a); },
      [&optimizer](torch::serialize::InputArchive& a) { optimizer.load(a); },
      [&optimizer] {
        std::string out = "optimizer";
        for (const auto& g : optimizer.param_groups())
          out += " group:" + std::to_string(g.params().size());
        return out;
      });
}

TrainingState& TrainingState::add(const std::string& name, int64_t& counter) {
  return add(
      name,
      [&counter](torch::serialize::OutputArchive& a) { a.write("value", c10::IValue(counter)); },
      [&counter](torch::serialize::InputArchive& a) {
        c10::IValue v;
        a.read("value", v);
        counter = v.toInt();
      },
      [] { return std::string("counter"); });
}

TrainingState& TrainingState::add(const std::string& name, DistributedSampler& sampler) {
  return add(
      name, [&sampler](torch::serialize::OutputArchive& a) { sampler.save(a); },
      [&sampler](torch::serialize::InputArchive& a) { sampler.load(a); },
      [] { return std::string("sampler"); });
}

std::string TrainingState::describe() const {
  std::string out;
  for (const Part& p : parts_) out += p.name + ": " + p.describe() + "\n";
  return out;
}

std::string TrainingState::serialize() const {
  torch::serialize::OutputArchive root;
  root.write(kStepKey, c10::IValue(*step_));
  const detail::RngStates rng = detail::rng_states();
  root.write(kCpuRngKey, rng.cpu);
  if (rng.cuda.defined()) root.write(kCudaRngKey, rng.cuda);
  for (const Part& p : parts_) {
    torch::serialize::OutputArchive sub;
    p.save(sub);
    root.write(p.name, sub);
  }
  std::ostringstream out;
  root.save_to(out);
  return std::move(out).str();
}

void TrainingState::deserialize(const std::string& bytes) {
  torch::serialize::InputArchive root;
  std::istringstream in(bytes);
  root.load_from(in);
  c10::IValue step;
  detail::RngStates rng;
  if (!root.try_read(kStepKey, step) || !root.try_read(kCpuRngKey, rng.cpu))
    throw Error(ErrorKind::kMismatch,
                "dtlaunch ddp: the training state received is not a TrainingState's");
  for (const Part& p : parts_) {
    torch::serialize::InputArchive sub;
    if (!root.try_read(p.name, sub))
      throw Error(ErrorKind::kMismatch, "dtlaunch ddp: the training state received has no part '" +
                                            p.name +
                                            "': the sender registered other parts (another "
                                            "program or build?)");
    p.load(sub);
  }
  *step_ = step.toInt();
  root.try_read(kCudaRngKey, rng.cuda);  // absent where the sender had no CUDA
  detail::set_rng_states(rng);
}

struct StoreHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreHost::StoreHost(int port) : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: StoreHost port " + std::to_string(port) + " is not 0 to 65535");
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  WorkerEnv env;
  env.master_addr = "127.0.0.1";  // the server's own client; the server listens on every address
  env.master_port = port;
  try {
    impl_->store = c10::static_intrusive_pointer_cast<c10d::TCPStore>(detail::open_store(env, o));
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kBackend, "dtlaunch ddp: could not host a store on port " +
                                         std::to_string(port) + ": " + detail::first_line(e));
  }
}

StoreHost::~StoreHost() = default;

int StoreHost::port() const noexcept {
  return impl_->store->getPort();
}

namespace detail {

// A LiveRun's group: every call goes to the current generation's group (ProcessGroup::forward_),
// so that the program and its DistributedDataParallel keep one object through recoveries.
class LiveGroup final : public ProcessGroup {
 public:
  LiveGroup(const WorkerEnv& env, std::shared_ptr<ProcessGroup> first)
      : ProcessGroup(env, first->backend(), first->device(), first->timeout(), nullptr) {
    set(std::move(first));
  }

  void set(std::shared_ptr<ProcessGroup> group) {
    current_ = std::move(group);
    forward_ = current_.get();
  }
  ProcessGroup& current() {
    if (!current_)
      throw Error(ErrorKind::kConfig, "dtlaunch ddp: a collective during a live recovery");
    return *current_;
  }
  // Set on a replacement: its first DistributedDataParallel skips the initial broadcast, which
  // the survivors, constructed long ago, would not match.
  bool skip_initial_broadcast = false;

 protected:
  // Reached only while no generation is current (forward_ is null): current() says so.
  std::shared_ptr<Work> start_all_reduce(at::Tensor& t, ReduceOp op) override {
    return current().all_reduce_async(t, op);
  }
  std::shared_ptr<Work> start_broadcast(at::Tensor& t, int root) override {
    current().broadcast(t, root);
    return nullptr;
  }
  std::vector<at::Tensor> run_all_gather(const at::Tensor& t) override {
    return current().all_gather(t);
  }
  std::shared_ptr<Work> start_barrier() override {
    current().barrier();
    return nullptr;
  }

 private:
  std::shared_ptr<ProcessGroup> current_;
};

bool take_initial_broadcast_skip(ProcessGroup& group) {
  auto* live = dynamic_cast<LiveGroup*>(&group);
  return live != nullptr && std::exchange(live->skip_initial_broadcast, false);
}

}  // namespace detail

namespace {

using detail::Clock;
using std::chrono::milliseconds;
using keys = detail::store_keys::Live;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A steady-clock time as the wall clock's Unix seconds, so that lines of several machines can be
// laid side by side.
std::string unix_time(Clock::time_point t) {
  const auto wall =
      std::chrono::system_clock::now() -
      std::chrono::duration_cast<std::chrono::system_clock::duration>(Clock::now() - t);
  return fixed(std::chrono::duration<double>(wall.time_since_epoch()).count(), 3);
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// What a replacement must share with the running job: the executable's bytes (the same
// program and build) and the state's layout.
std::string program_identity(const TrainingState& state) {
  core::Sha256 hash;
  std::ifstream exe("/proc/self/exe", std::ios::binary);
  std::vector<char> chunk(1 << 20);
  while (exe.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || exe.gcount() > 0)
    hash.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(chunk.data()),
                                         static_cast<size_t>(exe.gcount())));
  return "executable sha256 " + core::to_hex(hash.finish()) + "\n" + state.describe();
}

// "" when `mine` equals `theirs`, else what differs, from the first line that does.
std::string program_difference(const std::string& mine, const std::string& theirs) {
  if (mine == theirs) return "";
  std::istringstream a(mine), b(theirs);
  std::string here, there;
  while (std::getline(a, here) && std::getline(b, there) && here == there) {
  }
  const bool executable = here.rfind("executable", 0) == 0;
  return std::string("its ") + (executable ? "executable" : "training state") +
         " differs from the job's (here '" + core::excerpt(here, 160) + "', there '" +
         core::excerpt(there, 160) + "')";
}

// After a re-form: the lowest rank at the highest completed step (a replacement reports -1)
// gives its state to every rank behind it.
struct Agreement {
  int64_t step = -1;
  int donor = -1;
  std::vector<int> behind;
};

Agreement agree_on(const std::vector<int64_t>& steps) {
  Agreement a;
  for (size_t r = 0; r < steps.size(); ++r)
    if (steps[r] > a.step) a.step = steps[r], a.donor = static_cast<int>(r);
  for (size_t r = 0; r < steps.size(); ++r)
    if (steps[r] < a.step) a.behind.push_back(static_cast<int>(r));
  return a;
}

// A generation whose rendezvous lost a rank is left for the next: a replacement still waiting
// in it reads this record, as a rank reads rank 0's diagnosis, and goes to the next one.
void abandon(c10d::Store& in_g, int g, const Error& why, const std::string& job_key) {
  in_g.set(detail::store_keys::Rendezvous::failed(),
           detail::bytes(detail::encode_failure(
               static_cast<int>(ErrorKind::kPeerLost),
               "dtlaunch ddp: generation " + std::to_string(g) + " was abandoned: " + why.what(),
               detail::job_key_of(job_key))));
}

// The ranks that never checked in to a generation's rendezvous.
std::vector<int> never_checked_in(c10d::Store& in_g, int world_size) {
  std::vector<int> out;
  for (int r = 0; r < world_size; ++r)
    if (!in_g.check({detail::store_keys::Rendezvous::rank(r)})) out.push_back(r);
  return out;
}

std::shared_ptr<Work> point_to_point(detail::LiveGroup& group, at::Tensor& bytes, int peer,
                                     bool sending) {
#if DTLAUNCH_DDP_HAVE_GLOO
  return detail::gloo_point_to_point(group.current(), bytes, peer, sending);
#else
  (void)group, (void)bytes, (void)peer, (void)sending;
  throw Error(ErrorKind::kConfig, "dtlaunch ddp: live recovery on Gloo needs this build's Gloo");
#endif
}

// The donor broadcasts the state's size, then sends the bytes to every rank behind it, which
// loads them: point to point on Gloo; on NCCL in one broadcast (pipelined along NCCL's ring, it
// takes about the time of one send; the ranks not behind drop the bytes). Returns the size.
int64_t send_state(detail::LiveGroup& group, TrainingState& state, int donor,
                   const std::vector<int>& behind, const detail::PeerWatch* watch) {
  at::Tensor size = at::zeros({1}, at::kLong);
  std::string bytes;
  if (group.rank() == donor) {
    bytes = state.serialize();
    size.data_ptr<int64_t>()[0] = static_cast<int64_t>(bytes.size());
  }
  group.broadcast(size, donor);
  const int64_t n = size.data_ptr<int64_t>()[0];
  if (behind.empty()) return n;
  at::Tensor buffer = at::empty({n}, at::kByte);
  const bool receiving = contains(behind, group.rank());
  if (group.rank() == donor) std::memcpy(buffer.data_ptr(), bytes.data(), static_cast<size_t>(n));
  try {
    if (group.backend() == Backend::kNccl) {
      group.broadcast(buffer, donor);
    } else if (group.rank() == donor) {
      std::vector<std::shared_ptr<Work> > sends;
      for (int r : behind) sends.push_back(point_to_point(group, buffer, r, true));
      for (auto& w : sends) w->wait();
    } else if (receiving) {
      point_to_point(group, buffer, donor, false)->wait();
    }
  } catch (const Error&) {
    // A peer lost during the transfer: the heartbeat's verdict names it.
    if (watch && watch->wait_lost(milliseconds(1500))) throw watch->error();
    throw;
  }
  if (receiving)
    state.deserialize(
        std::string(static_cast<const char*>(buffer.data_ptr()), static_cast<size_t>(n)));
  return n;
}

}  // namespace

struct LiveRun::Impl {
  Impl(TrainingState& s, const InitOptions& o)
      : state(s),
        options(o),
        env(WorkerEnv::from_environment()),
        settings(detail::RuntimeSettings::from_environment(env.world_size)) {}

  TrainingState& state;
  InitOptions options;
  WorkerEnv env;
  detail::RuntimeSettings settings;
  // Generation 0's store: on rank 0 it hosts the job's store server, which must outlive every
  // generation's group.
  c10::intrusive_ptr<c10d::Store> first_store;
  // This process's client of the job's store since the last recovery (a verdict shuts the
  // runtime's connections, this one's too).
  c10::intrusive_ptr<c10d::Store> store;
  std::shared_ptr<detail::LiveGroup> group;
  std::shared_ptr<detail::PeerWatch> watch;
  std::optional<core::JobKey> key = detail::job_key_of(env.job_key);  // DTLAUNCH_JOB_KEY
  int generation = 0;
  bool replacement = false;
  bool has_state = true;  // false on a replacement until a survivor's state is loaded

  std::string me() const {
    return "rank " + std::to_string(env.rank) + " (" + core::host_name("?") + ")";
  }

  // A replacement of another program or build is refused before it claims anything.
  void refuse_other_program() {
    if (!store->check({keys::program()})) return;
    const std::string record = detail::text(store->get(keys::program()));
    const std::optional<std::string_view> theirs =
        key ? core::unseal_line(*key, record) : std::optional<std::string_view>(record);
    if (!theirs) {  // not this job's: no check rather than a refusal someone else decided
      detail::say("dtlaunch ddp: " + me() +
                  ": the running job's program record has no valid seal; it was ignored");
      return;
    }
    const std::string why = program_difference(program_identity(state), std::string(*theirs));
    if (!why.empty())
      throw Error(ErrorKind::kConfig, "dtlaunch ddp: " + me() +
                                          " refused to join the running job as rank " +
                                          std::to_string(env.rank) + ": " + why +
                                          ": start the job's own program and build");
  }

  // Generation `g`: spent even if it fails, and its heartbeat kept to name whoever was lost.
  void form(int g, c10::intrusive_ptr<c10d::Store> generation_store) {
    generation = g;
    InitOptions o = options;
    if (g > 0) o.rendezvous_timeout = settings.live_wait;
    detail::StartupPhases phases;
    phases.start = phases.env_read = Clock::now();
    detail::FormedGroup f =
        detail::form_group(env, settings, o, phases, std::move(generation_store), &watch);
    if (g == 0) {
      first_store = f.store;
      // Only where replacements may come: it reads the whole executable.
      if (env.rank == 0 && settings.live)
        first_store->set(keys::program(),
                         detail::bytes(key ? core::seal_line(*key, program_identity(state))
                                           : program_identity(state)));
    }
    if (group)
      group->set(f.group);
    else
      group = std::make_shared<detail::LiveGroup>(env, f.group);
  }

  c10::intrusive_ptr<c10d::Store> generation_store(int g) const {
    return c10::make_intrusive<c10d::PrefixStore>(keys::generation(g), store);
  }

  // A fresh client of the job's store, retried until `deadline` (a replacement may start before
  // the network lets it through).
  void reconnect(Clock::time_point deadline, const std::string& why) {
    for (;;) {
      try {
        store = detail::connect_store(env, settings.live_wait);
        return;
      } catch (const std::exception& e) {
        if (detail::stop_requested()) throw detail::stopped("dtlaunch ddp: " + me() + ": " + why);
        if (Clock::now() >= deadline)
          throw Error(ErrorKind::kPeerLost, "dtlaunch ddp: " + me() + ": " + why +
                                                ", but the job's store at " + env.master_addr +
                                                ":" + std::to_string(env.master_port) +
                                                " cannot be reached: " + detail::first_line(e));
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
  }

  // A replacement: the generation whose survivors want this rank and where nobody checked in as
  // it yet (the check-in record: rank 0 claims its place otherwise than the others).
  int wanted_generation(Clock::time_point deadline) {
    const std::string claim = detail::store_keys::Rendezvous::rank(env.rank);
    for (int polls = 0;; ++polls) {
      const int wanted = wanted_in();
      if (wanted >= 0 && !generation_store(wanted)->check({claim})) return wanted;
      if (polls % 10 == 9)
        if (const int g = detail::claim_place(store, key, env, me(), wanted); g > 0) return g;
      if (detail::stop_requested())
        throw detail::stopped("dtlaunch ddp: " + me() + " to be wanted");
      if (Clock::now() >= deadline) throw detail::nobody_wanted(me(), env, settings.live_wait);
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  void join() {
    replacement = true;
    has_state = false;
    const auto deadline = Clock::now() + settings.live_wait;
    reconnect(deadline, "started as a replacement");
    refuse_other_program();
    for (;;) {
      const int g = wanted_generation(deadline);
      try {
        form(g, generation_store(g));
        agree_and_send(Clock::now());
        break;
      } catch (const Error& e) {
        if (moved_on_from(g)) continue;  // the survivors abandoned g for a newer generation
        if (!lost_again(e)) throw;
        recover(e);
        break;
      }
    }
    group->skip_initial_broadcast = true;
  }

  // The lowest rank at the highest completed step sends its state to every rank behind it.
  void agree_and_send(Clock::time_point formed) {
    at::Tensor mine = at::zeros({1}, at::kLong);
    mine.data_ptr<int64_t>()[0] = has_state ? state.step() : -1;
    std::vector<int64_t> steps;
    for (const at::Tensor& t : group->all_gather(mine)) steps.push_back(t.data_ptr<int64_t>()[0]);
    const Agreement agreed_on = agree_on(steps);
    const int64_t highest = agreed_on.step;
    const int donor = agreed_on.donor;
    const std::vector<int>& behind = agreed_on.behind;
    if (donor < 0)
      throw Error(ErrorKind::kPeerLost, "dtlaunch ddp: " + me() +
                                            ": no rank of the re-formed group has a training "
                                            "state");
    const auto agreed = Clock::now();
    const bool receiving = contains(behind, env.rank);
    const int64_t bytes = send_state(*group, state, donor, behind, watch.get());
    if (receiving) has_state = true;
    const auto sent = Clock::now();
    if (receiving && replacement)
      detail::say("dtlaunch ddp: " + me() +
                  " joined the running job as a replacement in "
                  "generation " +
                  std::to_string(generation) + " with step " + std::to_string(highest) +
                  "'s state from rank " + std::to_string(donor));
    if (env.rank == donor && !behind.empty())
      detail::say("dtlaunch ddp: " + me() + ": live recovery, generation " +
                  std::to_string(generation) + ": agreed on step " + std::to_string(highest) +
                  " (rank " + std::to_string(donor) + "'s state, " +
                  fixed(static_cast<double>(bytes) / 1e6, 1) + " MB to rank" +
                  (behind.size() == 1 ? " " : "s ") + detail::format_ranks(behind) + "); agree " +
                  fixed(seconds_between(formed, agreed), 3) + " s, transfer " +
                  fixed(seconds_between(agreed, sent), 3) + " s (" +
                  fixed(static_cast<double>(bytes) * 8 / 1e6 /
                            std::max(1e-9, seconds_between(agreed, sent)),
                        0) +
                  " Mbit/s)");
  }

  // A loss this rank cannot recover from: it was cut off itself, or the store's host is gone.
  void refuse_unrecoverable(const Error& cause, const std::vector<int>& lost) {
    if (lost.empty() || contains(lost, env.rank)) throw cause;
    if (contains(lost, 0) && !env.store_hosted) {
      // Or this rank was stopped, and everyone it knew is gone to a newer generation.
      if (store_answers()) refuse_if_replaced(cause);
      throw Error(ErrorKind::kPeerLost, std::string(cause.what()) +
                                            "; live recovery cannot replace rank 0, which hosts "
                                            "the job's store");
    }
  }

  // Whether a fresh connection to the job's store succeeds within a moment (it is then this
  // rank's client).
  bool store_answers() {
    try {
      store = detail::connect_store(env, milliseconds(2000));
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // A rank that was stopped or cut off while the others replaced it finds out here, and leaves
  // without disturbing them.
  void refuse_if_replaced(const Error& cause) {
    const int g = wanted_in();
    if (g > generation)
      throw Error(ErrorKind::kPeerLost, "dtlaunch ddp: " + me() + " was replaced in generation " +
                                            std::to_string(g) +
                                            " while it was stopped or cut off; it leaves the job "
                                            "to its replacement (" +
                                            cause.what() + ")");
  }

  // Marks `rank` wanted in generation `g` (wanted_record).
  void want(int rank, int g) const {
    store->set(keys::wanted(rank), detail::bytes(detail::wanted_record(key, g)));
  }

  // The generation this rank is wanted in, or -1: also for a record that is not this job's,
  // which is said once and changes nothing.
  int wanted_in() {
    if (!store->check({keys::wanted(env.rank)})) return -1;
    const std::string record = detail::text(store->get(keys::wanted(env.rank)));
    const int g = detail::wanted_generation_of(record, key);
    if (g < 0 && !std::exchange(said_forged_, true))
      detail::say("dtlaunch ddp: " + me() + ": a record wanting rank " + std::to_string(env.rank) +
                  " that is not this job's was ignored (" + core::excerpt(record, 80) + ")");
    return g;
  }

  // Whether this rank is wanted in a generation after `g`, within a moment (a survivor
  // abandons a generation after it wants the ranks in the next one).
  bool moved_on_from(int g) {
    const auto until = Clock::now() + milliseconds(2000);
    for (;;) {
      if (wanted_in() > g) return true;
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(milliseconds(50));
    }
  }

  // A loss in the middle of a recovery starts the next one, with this loss's verdict.
  bool lost_again(const Error& e) const {
    return e.kind() == ErrorKind::kPeerLost && watch && watch->lost();
  }

  // The recovery after `cause`, a loss the heartbeat named; again after each loss during it.
  void recover(Error cause) {
    watch_verdict_ = watch->first_verdict_at();
    std::vector<int> lost = watch->lost_ranks();
    for (;;) {
      const auto caught = Clock::now();
      if (detail::stop_requested())
        throw detail::stopped("dtlaunch ddp: " + me() + ": live recovery from " + cause.what());
      refuse_unrecoverable(cause, lost);
      if (group) group->set(nullptr);  // the verdict shut its connections: its threads end now
      watch.reset();
      const auto torn = Clock::now();
      reconnect(torn + settings.live_wait, "recovering from the loss of rank" +
                                               std::string(lost.size() == 1 ? " " : "s ") +
                                               detail::format_ranks(lost));
      refuse_if_replaced(cause);
      const int next = generation + 1;
      for (int r : lost) want(r, next);
      try {
        form(next, generation_store(next));
      } catch (const Error& e) {
        if (e.kind() == ErrorKind::kTimeout)
          throw detail::no_replacement(cause, lost, settings.live_wait, e);
        if (!lost_again(e)) throw;
        cause = e;
        watch_verdict_ = watch->first_verdict_at();
        // The ranks lost now, and those lost before whose replacements had not checked in.
        std::vector<int> before = lost;
        lost = watch->lost_ranks();
        for (int r : never_checked_in(*generation_store(next), env.world_size))
          if (contains(before, r) && !contains(lost, r)) lost.push_back(r);
        // Wanted in the next generation first: a replacement that reads the abandonment then
        // finds where to go.
        for (int r : lost) want(r, next + 1);
        abandon(*generation_store(next), next, e, env.job_key);
        continue;
      }
      const auto formed = Clock::now();
      int lowest = 0;  // the lowest surviving rank says it
      while (contains(lost, lowest)) ++lowest;
      if (env.rank == lowest)
        detail::say("dtlaunch ddp: " + me() + ": live recovery, generation " +
                    std::to_string(next) + ": rank" + (lost.size() == 1 ? " " : "s ") +
                    detail::format_ranks(lost) + " replaced; verdict at " +
                    unix_time(watch_verdict_) + " (Unix s), caught " +
                    fixed(seconds_between(watch_verdict_, caught), 3) + " s after it, tear down " +
                    fixed(seconds_between(caught, torn), 3) + " s, re-form " +
                    fixed(seconds_between(torn, formed), 3) + " s");
      try {
        agree_and_send(formed);
        return;
      } catch (const Error& e) {
        if (!lost_again(e)) throw;
        cause = e;
        watch_verdict_ = watch->first_verdict_at();
        lost = watch->lost_ranks();
      }
    }
  }
  Clock::time_point watch_verdict_{};
  bool said_forged_ = false;
};

LiveRun::LiveRun(TrainingState& state, const InitOptions& options)
    : impl_(std::make_unique<Impl>(state, options)) {
  Impl& m = *impl_;
  if (m.env.world_size > 1 && m.settings.monitor.heartbeat_timeout.count() == 0)
    throw Error(ErrorKind::kConfig,
                "dtlaunch ddp: LiveRun needs the heartbeat to name a lost rank, and "
                "DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=0 turns it off");
  if (m.settings.live_join)
    m.join();
  else
    m.form(0, {});
}

LiveRun::~LiveRun() = default;

std::shared_ptr<ProcessGroup> LiveRun::group() const {
  return impl_->group;
}
bool LiveRun::replacement() const noexcept {
  return impl_->replacement;
}
int LiveRun::generation() const noexcept {
  return impl_->generation;
}

bool LiveRun::step(const std::function<void()>& body) {
  // The step is run again after a recovery: with the random numbers it began with (dropout),
  // or the weights would differ from a run without the fault.
  const detail::RngStates rng_before = detail::rng_states();
  try {
    body();
    return true;
  } catch (const Error& e) {
    Impl& m = *impl_;
    if (!m.settings.live || !m.lost_again(e)) throw;
    detail::set_rng_states(rng_before);
    try {
      m.recover(e);
    } catch (const Error& during) {
      // A stop signal came during the recovery: it is the reason, whatever ended the wait (rank 0,
      // which hosts the store, may have left on it first).
      if (!detail::stop_requested()) throw;
      std::string at = detail::first_line(during);
      if (const auto cut = at.rfind(": stopped ("); cut != std::string::npos) at.resize(cut);
      throw Error(ErrorKind::kStopped, "dtlaunch ddp: " + m.me() +
                                           ": a stop signal (request_stop()) ended the live "
                                           "recovery from '" +
                                           detail::first_line(e) + "' in: " + at);
    }
    return false;
  }
}

}  // namespace dtlaunch::ddp
