// The diagnostics of a group, the facade over their parts: see monitor.hpp.
#include "monitor.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <sstream>
#include <thread>

#include "clock_align.hpp"
#include "contract/settings.hpp"
#include "core/host.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "dump_signal.hpp"
#include "internal.hpp"
#include "rank_report.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

// A run id as part of a file name: [A-Za-z0-9._-] kept, anything else '_', at most 64 bytes.
std::string file_name_part(std::string_view id) {
  std::string out;
  for (char c : id.substr(0, 64))
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  if (out.empty() || out[0] == '.') out.insert(0, "run");
  return out;
}

}  // namespace

static_assert(contract::setting::kTraceEntries.max == kMaxTraceEntries);

MonitorSettings MonitorSettings::read(const core::EnvMap& env, int world_size) {
  namespace v = contract::setting;
  MonitorSettings s;
  if (auto n = contract::read_number(env, v::kTraceEntries)) s.trace_entries = *n;
  s.trace_dir = contract::read_text(env, v::kTraceDir).value_or("");
  s.trace_at_exit = contract::read_switch(env, v::kTraceAtExit, false);
  s.dump_signal = contract::read_switch(env, v::kDumpSignal, true);
  if (auto id = contract::read_text(env, v::kRunId)) s.run_id = file_name_part(*id);
  // A restart of the local supervisor, or a requeue of the Slurm job (whose run id stays).
  for (const contract::Setting* count : {&v::kTorchelasticRestartCount, &v::kSlurmRestartCount})
    if (auto n = core::parse_uint(contract::read_text(env, *count).value_or(""), 999'999))
      s.attempt += static_cast<int>(*n);
  s.check = contract::read_switch(env, v::kCheck, false);
  s.timeline = contract::read_switch(env, v::kTimeline, false);
  s.grace = default_grace(world_size);
  if (auto g = contract::read_number(env, v::kReportGraceMs)) s.grace = milliseconds(*g);
  if (auto t = contract::read_number(env, v::kHeartbeatTimeout))
    s.heartbeat_timeout = std::chrono::seconds(*t);
  return s;
}

std::string checkin_record(const WorkerEnv& env) {
  return core::host_name("?") + "\n" + std::to_string(env.local_rank) + "\n" +
         std::to_string(now_us() / 1000);
}

Monitor::Monitor(const WorkerEnv& env, c10::intrusive_ptr<c10d::Store> store, milliseconds timeout,
                 MonitorSettings settings)
    : env_(env),
      store_(std::move(store)),
      timeout_(timeout),
      settings_(std::move(settings)),
      host_(core::host_name("?")),
      recorder_(std::make_shared<FlightRecorder>(settings_.trace_entries)),
      watcher_(std::make_shared<WatcherState>()),
      clock_(std::make_shared<ClockAlignment>()) {
  if (env_.rank == 0 || !store_) {
    clock_->known = true;  // rank 0's clock is the reference
  }
  if (settings_.run_id.empty()) {
    // Without DTLAUNCH_RUN_ID (torchrun's environment) the run is named by rank 0's check-in
    // time, which every rank reads alike.
    int64_t ms = now_us() / 1000;
    if (store_ && env_.world_size > 1) {
      try {
        std::istringstream rec(text(store_->get(store_keys::Diag::checkin(0))));
        std::string line;
        for (int i = 0; i < 3 && std::getline(rec, line); ++i) {
        }
        ms = std::stoll(line);
      } catch (const std::exception&) {
      }
    }
    settings_.run_id = "t" + std::to_string(ms);
  }
}

Monitor::~Monitor() {
  if (dump_registered_) remove_from_dumps(this);
  {
    std::lock_guard<std::mutex> lock(watcher_->mutex);
    watcher_->stop = true;
  }
  watcher_->wake.notify_all();
  // An error's file says more than the exit's would: it is kept.
  if (settings_.trace_at_exit && !error_written_) write_file("exit", DumpKind::kExit);
}

void Monitor::start_watcher() {
  if (settings_.dump_signal && settings_.trace_entries > 0) dump_registered_ = add_to_dumps(this);
  if (!store_ || env_.world_size < 2) return;
  // Detached: it may be inside a store call when the group goes, and must not hold it up.
  std::thread(answer_reports, env_, host_, recorder_, watcher_).detach();
  std::thread(align_clock, env_, clock_).detach();
}

void Monitor::dump_on_signal() const {
  const CollectiveRecord last = recorder_->last();
  std::string where_now;
  if (last.seq == 0) {
    where_now = "no collective entered yet";
  } else if (last.end_us == 0) {
    where_now =
        "in " + describe(last) + " since " + seconds_text((now_us() - last.enqueue_us) / 1e6);
  } else {
    where_now = "last " + describe(last) + ", " + flight::state_name(last.state) + " " +
                seconds_text((now_us() - last.end_us) / 1e6) + " ago";
  }
  const std::string path = write_file("SIGUSR2", DumpKind::kSignal);
  const std::string line =
      "dtlaunch ddp: rank " + std::to_string(env_.rank) + " (SIGUSR2): " + where_now +
      (path.empty() ? settings_.trace_dir.empty()
                          ? "; set DTLAUNCH_DDP_TRACE_DIR to write the flight recorder"
                          : ""
                    : "; flight recorder in " + path);
  say(line);
}

flight::Header Monitor::record_header(const std::string& reason, DumpKind kind) const {
  flight::Header h;
  h.kind = kind_name(kind);
  h.reason = reason;
  h.dumped_at_us = now_us();
  h.host = host_;
  h.rank = env_.rank;
  h.world_size = env_.world_size;
  h.local_rank = env_.local_rank;
  h.run_id = settings_.run_id;
  h.attempt = settings_.attempt;
  if (clock_->known) {
    h.clock_offset_us = clock_->offset_us.load();
    h.clock_error_us = clock_->error_us.load();
  }
  h.collectives_started = recorder_->started();
  h.entries_capacity = settings_.trace_entries;
  return h;
}

std::string Monitor::write_file(const std::string& reason, DumpKind kind) const {
  if (settings_.trace_dir.empty()) return "";
  const std::string& dir = settings_.trace_dir;
  const std::string stem = record_stem(dir, settings_.run_id, settings_.attempt, env_.rank);
  std::string why;
  const std::string written =
      write_record_file(dir, stem, kind, record_header(reason, kind), recorder_->entries(), why);
  // One warning per rank and run: a full disk must not flood stderr at every collective error.
  if (written.empty() && !write_warned_.exchange(true))
    say("dtlaunch ddp: rank " + std::to_string(env_.rank) +
        ": the flight recorder was not written to '" + core::excerpt(record_path(stem, kind), 200) +
        "': " + why + " (no further warning)");
  return written;
}

const Error& Monitor::record(const Error& e) {
  write_file(e.what(), DumpKind::kError);
  error_written_ = true;
  return e;
}

Error Monitor::failure(uint64_t seq, const Error& cause) {
  const CollectiveRecord mine = recorder_->find(seq);
  std::string msg = "dtlaunch ddp: " + describe(mine);
  if (cause.kind() == ErrorKind::kTimeout) {
    msg += " timed out after " + core::duration_text(timeout_) + " on rank " +
           std::to_string(env_.rank);
  } else if (cause.kind() == ErrorKind::kPeerLost) {
    const std::string what = cause.what();
    const auto at = what.find(" failed: ");
    msg += " lost a peer on rank " + std::to_string(env_.rank) + " (" +
           (at == std::string::npos ? what : what.substr(at + 9)) + ")";
  } else {
    recorder_->end(seq, false);  // the error's file shows the collective failed
    record(cause);
    return cause;
  }
  msg += ": " + report(seq);
  recorder_->end(seq, false);
  Error e(cause.kind(), msg);
  record(e);
  if (env_.rank == 0 && store_) {
    // The others' reports need the store that leaves with this process.
    wait_for_reporters(*store_, Clock::now() + settings_.grace + std::chrono::seconds(2));
  }
  return e;
}

std::string Monitor::report(uint64_t seq) {
  if (!store_ || env_.world_size < 2) return "no other rank to ask";
  return where_everyone_is(env_, store_, settings_.grace,
                           position_record(*recorder_, host_, env_.local_rank), seq);
}

std::string Monitor::startup_line(const StartupPhases& phases) {
  if (env_.rank != 0 || !store_) return "";
  return detail::startup_line(env_, *store_, settings_.timeline, phases);
}

}  // namespace dtlaunch::ddp::detail
