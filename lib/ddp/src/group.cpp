// ProcessGroup's collectives, common to both backends: the argument checks (one wording), the
// sequence numbers and flight recorder, the opt-in mismatch check and the errors of a collective
// that failed, with the cross-rank report for a timeout or a lost peer.
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "core/text.hpp"
#include "internal.hpp"
#include "monitor.hpp"
#include "peer_watch.hpp"

namespace dtlaunch::ddp {
namespace {

using detail::Monitor;
using detail::Op;
using detail::PeerWatch;

// A backend failure while the heartbeat declares a peer lost (Gloo often sees the closed
// connection a moment before the verdict arrives): the heartbeat's error, which names the rank,
// its host and how it was lost, instead of the backend's. Waits at most this long for it.
constexpr std::chrono::milliseconds kVerdictWait{1500};

std::optional<Error> peer_lost(const PeerWatch* watch, const Error& cause) {
  if (watch == nullptr) return std::nullopt;
  if (cause.kind() != ErrorKind::kPeerLost && cause.kind() != ErrorKind::kBackend && !watch->lost())
    return std::nullopt;
  if (!watch->wait_lost(kVerdictWait)) return std::nullopt;
  return watch->error();
}

void check_defined(const at::Tensor& t, const char* op) {
  if (!t.defined())
    throw Error(ErrorKind::kConfig, std::string("dtlaunch ddp: ") + op + " of an undefined tensor");
}

// The signature the ranks compare under DTLAUNCH_DDP_CHECK=1, as int64s: sequence number,
// operation, reduce op, dtype, root, number of dimensions, then up to kMaxDims sizes.
constexpr int64_t kMaxDims = 10;
constexpr int64_t kSignatureLength = 6 + kMaxDims;

at::Tensor signature(uint64_t seq, Op op, int reduce_op, const at::Tensor* t, int root) {
  at::Tensor s = at::zeros({kSignatureLength}, at::kLong);
  int64_t* v = s.data_ptr<int64_t>();
  v[0] = static_cast<int64_t>(seq);
  v[1] = static_cast<int64_t>(op);
  v[2] = reduce_op;
  v[3] = t ? static_cast<int64_t>(t->scalar_type()) : -1;
  v[4] = root;
  v[5] = t ? t->dim() : -1;
  if (t)
    for (int64_t d = 0; d < t->dim() && d < kMaxDims; ++d) v[6 + d] = t->size(d);
  return s;
}

// "#5 all_reduce sum float32 [256]", "#5 broadcast float32 [2, 3] root 0", "#6 barrier".
std::string signature_text(const std::vector<int64_t>& v) {
  std::string out = "#" + std::to_string(v[0]) + " " + detail::op_name(static_cast<Op>(v[1]));
  if (v[2] >= 0) out += std::string(" ") + to_string(static_cast<ReduceOp>(v[2]));
  if (v[3] >= 0) {
    out += " " + detail::dtype_name(static_cast<int8_t>(v[3])) + " [";
    for (int64_t d = 0; d < v[5] && d < kMaxDims; ++d)
      out += (d ? ", " : "") + std::to_string(v[6 + d]);
    out += v[5] > kMaxDims ? ", ...]" : "]";
  }
  if (v[4] >= 0) out += " root " + std::to_string(v[4]);
  return out;
}

std::string differences(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<std::string> what;
  if (a[0] != b[0]) what.push_back("sequence number");
  if (a[1] != b[1]) what.push_back("operation");
  if (a[1] == b[1] && a[2] != b[2]) what.push_back("reduce op");
  if (a[1] == b[1] && a[3] != b[3]) what.push_back("dtype");
  if (a[1] == b[1] && !std::equal(a.begin() + 5, a.end(), b.begin() + 5)) what.push_back("shape");
  if (a[1] == b[1] && a[4] != b[4]) what.push_back("root");
  return core::join(what, ", ");
}

// The backend's work, with its end recorded and its failure turned into the runtime's error.
class MonitoredWork final : public Work {
 public:
  MonitoredWork(std::shared_ptr<Work> inner, std::shared_ptr<Monitor> monitor, uint64_t seq,
                std::shared_ptr<PeerWatch> watch)
      : inner_(std::move(inner)),
        monitor_(std::move(monitor)),
        seq_(seq),
        watch_(std::move(watch)) {}

  void wait() override {
    if (done_) return;
    done_ = true;
    try {
      inner_->wait();
    } catch (const Error& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(Error(ErrorKind::kBackend, "dtlaunch ddp: " + detail::first_line(e)));
    }
    monitor_->recorder().end(seq_, true);
  }
  bool completed() override { return done_ || inner_->completed(); }

 private:
  [[noreturn]] void fail(const Error& e) {
    if (auto lost = peer_lost(watch_.get(), e)) {
      monitor_->recorder().end(seq_, false);
      throw *lost;
    }
    Error out = monitor_->failure(seq_, e);
    monitor_->recorder().end(seq_, false);
    throw out;
  }

  std::shared_ptr<Work> inner_;
  std::shared_ptr<Monitor> monitor_;
  uint64_t seq_;
  std::shared_ptr<PeerWatch> watch_;
  bool done_ = false;
};

}  // namespace

ProcessGroup::ProcessGroup(WorkerEnv env, Backend backend, at::Device device,
                           std::chrono::milliseconds timeout, std::shared_ptr<Monitor> monitor)
    : env_(std::move(env)),
      backend_(backend),
      device_(device),
      timeout_(timeout),
      monitor_(monitor ? std::move(monitor)
                       : std::make_shared<Monitor>(env_, c10::intrusive_ptr<c10d::Store>(), timeout,
                                                   detail::MonitorSettings{})) {}

ProcessGroup::~ProcessGroup() = default;

uint64_t ProcessGroup::collectives_started() const noexcept {
  if (forward_) return forward_->collectives_started();
  return monitor_->recorder().started();
}

std::string ProcessGroup::write_flight_record(const std::string& reason) const {
  if (forward_) return forward_->write_flight_record(reason);
  return monitor_->write_file(reason);
}

namespace {

// Starts one collective: numbers it, records it, checks the ranks agree when asked, and turns a
// failure into the runtime's error (recorded in the flight recorder file).
template <class Start>
auto run_collective(ProcessGroup& group, Monitor& monitor, const PeerWatch* watch, Op op,
                    const at::Tensor* tensor, int reduce_op, int root, Start&& start,
                    const std::function<std::vector<at::Tensor>(const at::Tensor&)>& gather)
    -> std::pair<uint64_t, decltype(start())> {
  // After a loss the group's connections are shut: fail at once, with the verdict.
  if (watch != nullptr && watch->lost()) throw monitor.record(watch->error());
  const uint64_t seq = monitor.recorder().begin(op, tensor, root);
  auto fail = [&](const Error& e) -> Error {
    if (auto lost = peer_lost(watch, e)) {
      monitor.recorder().end(seq, false);
      return *lost;
    }
    Error out = monitor.failure(seq, e);
    monitor.recorder().end(seq, false);
    return out;
  };
  try {
    if (monitor.check_enabled()) {
      const at::Tensor mine = signature(seq, op, reduce_op, tensor, root);
      const std::vector<at::Tensor> all = gather(mine);
      std::map<std::vector<int64_t>, std::vector<int>> groups;
      for (int r = 0; r < group.size(); ++r) {
        const int64_t* v = all[r].data_ptr<int64_t>();
        groups[std::vector<int64_t>(v, v + kSignatureLength)].push_back(r);
      }
      if (groups.size() > 1) {
        // The largest group first: usually the ranks that did the expected thing.
        std::vector<std::pair<std::vector<int64_t>, std::vector<int>>> sorted(groups.begin(),
                                                                              groups.end());
        std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
          return a.second.size() > b.second.size();
        });
        std::string msg = "dtlaunch ddp: ranks disagree on collective #" + std::to_string(seq) +
                          " of rank " + std::to_string(group.rank()) + " (DTLAUNCH_DDP_CHECK=1): ";
        for (size_t i = 0; i < sorted.size(); ++i) {
          const auto& ranks = sorted[i].second;
          msg += (i ? "; " : "") + std::string(ranks.size() == 1 ? "rank " : "ranks ") +
                 detail::format_ranks(ranks) + " call " + signature_text(sorted[i].first);
          if (i > 0) msg += " (differs in " + differences(sorted[0].first, sorted[i].first) + ")";
        }
        throw fail(Error(ErrorKind::kMismatch, msg));
      }
    }
    monitor.recorder().handed_to_backend(seq);
    return {seq, start()};
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kMismatch) throw;
    throw fail(e);
  } catch (const std::exception& e) {
    throw fail(Error(ErrorKind::kBackend, "dtlaunch ddp: " + std::string(detail::op_name(op)) +
                                              " failed on rank " + std::to_string(group.rank()) +
                                              ": " + detail::first_line(e)));
  }
}

}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce_async(at::Tensor& tensor, ReduceOp op) {
  if (forward_) return forward_->all_reduce_async(tensor, op);
  check_defined(tensor, "all_reduce");
  if (op == ReduceOp::kAvg && !at::isFloatingType(tensor.scalar_type()))
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: all_reduce avg needs a floating tensor, got " +
                                        std::string(c10::toString(tensor.scalar_type())));
  auto [seq, work] = run_collective(
      *this, *monitor_, peer_watch_.get(), Op::kAllReduce, &tensor, static_cast<int>(op), -1,
      [&] { return start_all_reduce(tensor, op); },
      [&](const at::Tensor& t) { return run_all_gather(t); });
  return std::make_shared<MonitoredWork>(std::move(work), monitor_, seq, peer_watch_);
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  if (forward_) return forward_->broadcast(tensor, root);
  check_defined(tensor, "broadcast");
  if (root < 0 || root >= size())
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: broadcast root " + std::to_string(root) +
                                        " is not a rank of a group of " + std::to_string(size()));
  auto [seq, work] = run_collective(
      *this, *monitor_, peer_watch_.get(), Op::kBroadcast, &tensor, -1, root,
      [&] { return start_broadcast(tensor, root); },
      [&](const at::Tensor& t) { return run_all_gather(t); });
  MonitoredWork(std::move(work), monitor_, seq, peer_watch_).wait();
}

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& tensor) {
  if (forward_) return forward_->all_gather(tensor);
  check_defined(tensor, "all_gather");
  auto [seq, parts] = run_collective(
      *this, *monitor_, peer_watch_.get(), Op::kAllGather, &tensor, -1, -1,
      [&] { return run_all_gather(tensor); },
      [&](const at::Tensor& t) { return run_all_gather(t); });
  monitor_->recorder().end(seq, true);
  return parts;
}

void ProcessGroup::barrier() {
  if (forward_) return forward_->barrier();
  auto [seq, work] = run_collective(
      *this, *monitor_, peer_watch_.get(), Op::kBarrier, nullptr, -1, -1,
      [&] { return start_barrier(); }, [&](const at::Tensor& t) { return run_all_gather(t); });
  MonitoredWork(std::move(work), monitor_, seq, peer_watch_).wait();
}

}  // namespace dtlaunch::ddp
