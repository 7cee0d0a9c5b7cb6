// Rendezvous through c10d::TCPStore with a deadline and a diagnosis. TCPStore's own
// waitWorkers gives up silently and a later Gloo connect then fails with "Socket Timeout", at
// about twice the timeout (see docs/ddp.md). So the store is opened without waiting and the ranks
// check in through keys that say, at the deadline, exactly who is missing. The keys also carry the
// job's identity (DTLAUNCH_RUN_ID and WORLD_SIZE): two jobs that share MASTER_ADDR:MASTER_PORT by
// accident would otherwise mix ranks and train together. Rank 0 publishes its identity before
// anything else; a client reads it before it writes any key of its own rank, so a rank of another
// job cannot take a rank's place. It reports itself under a refusal key instead, which rank 0 logs
// in one line before it goes on waiting for its own ranks: one misconfigured job must not be able
// to end another's. A second process with this job's identity and an already claimed rank is this
// job's own misconfiguration: it reports itself under keys::refused(), and rank 0 fails the whole
// rendezvous with that one line.
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>
#include <utility>

#include "core/socket.hpp"
#include "core/text.hpp"
#include "failure_record.hpp"
#include "internal.hpp"
#include "monitor.hpp"
#include "peer_watch.hpp"
#include "store_client.hpp"
#include "store_keys.hpp"

namespace dtlaunch::ddp::detail {
namespace {

using keys = store_keys::Rendezvous;

// An identity record's first line: a peer's key that lacks it was not written by this protocol.
const std::string kIdentityMagic = "dtlaunch-rdzv 2";

// Rank 0 logs this many refused foreign ranks, then one line for the rest.
constexpr int64_t kForeignLinesShown = 8;

std::string address(const WorkerEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

// Who is at the rendezvous: the launcher's run identity and the world size it was started with.
struct Identity {
  std::string run_id;
  int world_size = 0;
  bool operator==(const Identity&) const = default;
};

std::string record(const Identity& id) {
  return kIdentityMagic + "\n" + std::to_string(id.world_size) + "\n" + id.run_id;
}

std::optional<Identity> parse_record(const std::string& rec) {
  const auto a = rec.find('\n');
  if (a == std::string::npos || rec.substr(0, a) != kIdentityMagic) return std::nullopt;
  const auto b = rec.find('\n', a + 1);
  if (b == std::string::npos) return std::nullopt;
  const std::string world = rec.substr(a + 1, b - a - 1);
  if (world.empty() || world.size() > 9 ||
      world.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return Identity{rec.substr(b + 1), std::stoi(world)};
}

// A peer's run id is untrusted text: escaped and bounded like every value dtlaunch echoes.
std::string describe(const Identity& id) {
  return "run '" + core::excerpt(id.run_id, 128) + "' (world " + std::to_string(id.world_size) +
         ")";
}

// The message both sides print when a rank of another job reached this rendezvous.
std::string foreign_message(const WorkerEnv& env, int rank, const Identity& mine,
                            const Identity& host) {
  return "dtlaunch ddp: rank " + std::to_string(rank) + " of " + describe(mine) +
         " reached the rendezvous at " + address(env) + " of " + describe(host) +
         ": two jobs share MASTER_ADDR:MASTER_PORT; give each its own MASTER_PORT (dtlaunch sets "
         "DTLAUNCH_RUN_ID and a port per Slurm step)";
}

// ---------------------------------------------------------------------------------------------
// Bounding the store's own waits. TCPStore's client blocks in recv with no timeout of its own
// (1.13's set and add, 2.x's too), and exposes no socket: a peer that accepts the connection but
// never answers (another program on MASTER_PORT, a stopped rank 0) would hold a rank forever.
// So the watchdog finds the store's client sockets (created after it started, connected to
// MASTER_PORT) and shuts them down at the cut-off; the blocked call then fails at once.

// The sockets among this process's descriptors whose peer port is `port` (all when port < 0).
std::set<core::OpenSocket> sockets_to(int port) {
  std::set<core::OpenSocket> out;
  for (const core::OpenSocket& s : core::open_sockets())
    if (port < 0 || core::peer_port(s.fd) == port) out.insert(s);
  return out;
}

// `abort`, when set (the heartbeat's verdict on a lost peer), is a cut-off at once: a store
// call blocked on a frozen rank 0 then fails within 0.1 s.
class StoreWatchdog {
 public:
  StoreWatchdog(int port, Clock::time_point cutoff,
                std::shared_ptr<const std::atomic<bool>> abort = nullptr)
      : port_(port),
        before_(sockets_to(-1)),
        cutoff_(cutoff),
        abort_(std::move(abort)),
        thread_([this] { run(); }) {}
  ~StoreWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  StoreWatchdog(const StoreWatchdog&) = delete;
  StoreWatchdog& operator=(const StoreWatchdog&) = delete;

  void set_cutoff(Clock::time_point cutoff) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cutoff_ = cutoff;
    }
    cv_.notify_all();
  }
  // Whether the watchdog cut the store's connections, and so caused the error at hand.
  bool fired() const { return fired_; }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      const auto cutoff = cutoff_;
      const auto until = abort_ ? std::min(cutoff, Clock::now() + milliseconds(100)) : cutoff;
      if (cv_.wait_until(lock, until, [&] { return stop_ || cutoff_ != cutoff; })) {
        if (stop_) return;
        continue;
      }
      if (Clock::now() < cutoff && !(abort_ && abort_->load(std::memory_order_acquire))) continue;
      // Past the cut-off every new connection to the port is cut as soon as it appears:
      // LibTorch 2.x's client reconnects and pings again after a failed receive, and would
      // otherwise block anew on the same silent peer.
      do {
        for (const core::OpenSocket& s : sockets_to(port_))
          if (!before_.count(s)) {
            fired_ = true;
            ::shutdown(s.fd, SHUT_RDWR);
          }
      } while (!cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_; }));
      return;
    }
  }

  const int port_;
  const std::set<core::OpenSocket> before_;
  std::mutex mutex_;
  std::condition_variable cv_;
  Clock::time_point cutoff_;
  bool stop_ = false;
  std::atomic<bool> fired_{false};
  const std::shared_ptr<const std::atomic<bool>> abort_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------

// One non-blocking connect to `a`, waiting at most a second (and not past the deadline).
// Returns 0 once accepted, else the errno that says why not.
int try_connect(const addrinfo& a, Clock::time_point deadline) {
  const int fd = core::connect_until(a, deadline);
  if (fd < 0) return -fd;
  ::close(fd);
  return 0;
}

using AddrList = std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>;

// Resolves MASTER_ADDR. A name that the resolver says does not exist is an error at once, on
// every rank (waiting would not fix a typo); other failures are returned in `reason`.
AddrList resolve(const WorkerEnv& env, std::string& reason) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env.master_port);
  const int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found);
  AddrList owner(found, ::freeaddrinfo);
  if (rc == EAI_NONAME || rc == EAI_FAIL)
    throw Error(ErrorKind::kConfig, "dtlaunch ddp: rank " + std::to_string(env.rank) +
                                        " cannot resolve MASTER_ADDR '" + env.master_addr +
                                        "': " + ::gai_strerror(rc));
  if (rc != 0) {
    reason = "cannot resolve MASTER_ADDR '" + env.master_addr + "': " + ::gai_strerror(rc);
    return AddrList(nullptr, ::freeaddrinfo);
  }
  return owner;
}

// Prints "dtlaunch ddp: <what> (<elapsed> of <timeout>)" every `every` while a rank waits, so
// that a long rendezvous says what it waits for instead of staying silent.
class Progress {
 public:
  Progress(Clock::time_point start, milliseconds timeout, milliseconds every)
      : start_(start), timeout_(timeout), every_(every), next_(start + every) {}
  bool due() const { return every_.count() > 0 && Clock::now() >= next_; }
  void print(const std::string& what) {
    const auto elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start_);
    say("dtlaunch ddp: " + what + " (" +
        core::duration_text(std::chrono::duration_cast<std::chrono::seconds>(elapsed)) + " of " +
        core::duration_text(timeout_) + ")");
    while (next_ <= Clock::now()) next_ += every_;
  }

 private:
  Clock::time_point start_;
  milliseconds timeout_;
  milliseconds every_;
  Clock::time_point next_;
};

// Waits until something accepts TCP connections at env's MASTER_ADDR:MASTER_PORT, trying every
// 5-100 ms, up to the deadline. TCPStore's client spends its whole timeout on a first connect
// attempt and then backs off for seconds (LibTorch 2.6 reported a missing rank 0 2.5 times past
// a 2 s timeout; 1.13 retries once a second), so a rank that starts before rank 0 listens would
// arrive late and one whose rank 0 never comes would report well after the deadline. Returns ""
// once a connection was accepted, else why the last attempt failed.
std::string wait_for_listener(const WorkerEnv& env, Clock::time_point deadline,
                              Progress& progress) {
  std::string reason = "no attempt was made";
  auto pause = milliseconds(5);
  for (;;) {
    const AddrList found = resolve(env, reason);
    for (const addrinfo* a = found.get(); a; a = a->ai_next) {
      const int err = try_connect(*a, deadline);
      if (err == 0) return "";
      reason = "connect: " + std::string(std::strerror(err));
    }
    const auto now = Clock::now();
    if (now >= deadline) return reason;
    if (progress.due())
      progress.print("rank " + std::to_string(env.rank) +
                     " is waiting for the store that rank 0 hosts at " + address(env) + ": " +
                     reason);
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, milliseconds(100));
  }
}

// LibTorch 2.4+ has TCPStoreOptions::useLibUV (true by default); 1.13 has no such member.
// The failure record rank 0 publishes (failure_record.hpp): sealed with the job key, if any.
Error from_failure_record(const detail::FailureRecord& r) {
  ErrorKind k = ErrorKind::kBackend;
  for (ErrorKind each : {ErrorKind::kConfig, ErrorKind::kTimeout, ErrorKind::kPeerLost,
                         ErrorKind::kMismatch, ErrorKind::kBackend})
    if (r.kind == static_cast<int>(each)) k = each;
  return Error(k, r.message);
}

// A peer's text as one line of reasonable length, its control characters escaped.
std::string one_line(const std::string& s) {
  return core::excerpt(s.substr(0, s.find('\n')), 2000, core::Quote::kDouble);
}

}  // namespace

c10::intrusive_ptr<c10d::Store> connect_store(const WorkerEnv& env, milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = timeout;
  return open_store(env, o);
}

std::string store_host_gone(const WorkerEnv& env, milliseconds within) {
  std::string reason;
  try {
    const AddrList found = resolve(env, reason);
    const auto deadline = Clock::now() + within;
    for (const addrinfo* a = found.get(); a; a = a->ai_next) {
      const int err = try_connect(*a, deadline);
      if (err == 0) return "";
      reason = "connect: " + std::string(std::strerror(err));
    }
  } catch (const Error& e) {
    reason = e.what();
  }
  return "the store at " + address(env) + " is unreachable (" + reason + "), so rank 0 (" +
         env.master_addr + ", the store's host) is gone";
}

namespace {

// Rank 0's audit of who checks in: ranks of other jobs, refused on their side, logged once each;
// once all have come, every rank's identity and the settings that must agree.
class CheckInAudit {
 public:
  CheckInAudit(const WorkerEnv& env, const Identity& mine, const std::string& where,
               const std::string& agreed)
      : env_(env), mine_(mine), where_(where), agreed_(agreed) {}

  // Ranks of other jobs were refused on their side; one line each here, then on.
  void log_foreign_ranks(c10d::Store& store) {
    for (const int64_t refused = store.add(keys::foreign_count(), 0); foreign_logged_ < refused;) {
      const int64_t n = foreign_logged_ + 1;
      std::string line = "(its message did not arrive)";
      if (store.check({keys::foreign(n)})) {
        line = one_line(text(store.get(keys::foreign(n))));
      } else if (n <= kForeignLinesShown) {
        // It sets its line right after it counts itself: wait a moment for it.
        if (foreign_since_ == Clock::time_point{}) foreign_since_ = Clock::now();
        if (Clock::now() - foreign_since_ < std::chrono::seconds(1)) break;
      }
      foreign_since_ = {};
      foreign_logged_ = n;
      if (n <= kForeignLinesShown)
        say("dtlaunch ddp: rank 0 refused a rank of another job: " + line +
            "; still waiting for this job's ranks");
      else if (n == refused)
        say("dtlaunch ddp: rank 0 has refused " + std::to_string(refused) +
            " ranks of other jobs (lines after the first " + std::to_string(kForeignLinesShown) +
            " not shown); still waiting for this job's ranks");
    }
  }

  // Every rank checked in with this run's identity: the clients checked it already; this
  // catches a peer that wrote its rank key without doing so.
  std::optional<Error> wrong_identity(c10d::Store& store) const {
    for (int r = 1; r < env_.world_size; ++r) {
      const auto theirs = parse_record(text(store.get(keys::rank(r))));
      if (!theirs || !(*theirs == mine_))
        return Error(ErrorKind::kConfig,
                     theirs ? foreign_message(env_, r, *theirs, mine_)
                            : where_ + ": rank " + std::to_string(r) +
                                  " checked in without a dtlaunch identity (another program, or "
                                  "an older dtlaunch, on MASTER_PORT?)");
    }
    return std::nullopt;
  }

  // Settings a collective depends on (DTLAUNCH_DDP_CHECK): one rank that checks and one that
  // does not would deadlock at the first collective, so they must agree here.
  std::optional<Error> different_settings(c10d::Store& store) const {
    std::vector<int> differ;
    std::string theirs_text;
    for (int r = 1; r < env_.world_size; ++r) {
      const std::string theirs = text(store.get(keys::settings(r)));
      if (theirs == agreed_) continue;
      if (differ.empty()) theirs_text = theirs;
      differ.push_back(r);
    }
    if (differ.empty()) return std::nullopt;
    return Error(ErrorKind::kConfig, "dtlaunch ddp: the ranks' settings differ: rank 0 has '" +
                                         core::excerpt(agreed_, 200) + "', rank" +
                                         (differ.size() > 1 ? "s " : " ") + format_ranks(differ) +
                                         " '" + core::excerpt(theirs_text, 200) +
                                         "'; set these variables the same on every rank");
  }

 private:
  const WorkerEnv& env_;
  const Identity& mine_;
  const std::string& where_;
  const std::string& agreed_;
  int64_t foreign_logged_ = 0;
  Clock::time_point foreign_since_{};
};

// How a rank's failures to reach or keep the store are worded: where, who, and what it means.
class StoreFailureWords {
 public:
  StoreFailureWords(const std::string& where, const std::string& me, milliseconds timeout,
                    milliseconds first_answer, int world_size)
      : where_(where),
        me_(me),
        timeout_(timeout),
        first_answer_(first_answer),
        world_size_(world_size) {}

  Error unreachable(const std::string& reason) const {
    return Error(ErrorKind::kTimeout,
                 where_ + " failed: " + me_ +
                     " could not reach the store that rank 0 hosts within " +
                     core::duration_text(timeout_) +
                     " (is rank 0 running? are MASTER_ADDR/MASTER_PORT right?): " + reason);
  }
  Error silent_peer(const std::exception& e) const {
    return Error(ErrorKind::kTimeout, where_ + " failed: " + me_ +
                                          " connected, but the peer there did not answer within " +
                                          core::duration_text(first_answer_) +
                                          " (is MASTER_PORT another program's port, or is rank 0 "
                                          "stopped?): " +
                                          first_line(e));
  }

  // A store client's own failure, as the error that says what it means.
  Error translate(const std::exception& e, bool answered, bool watchdog_fired,
                  int64_t arrived) const {
    if (!answered) {
      // Silence is a timeout (a stopped rank 0 looks the same); an answer that is not the
      // store's protocol is a configuration error: MASTER_PORT is another program's.
      if (watchdog_fired) return silent_peer(e);
      return Error(ErrorKind::kConfig, where_ + " failed: " + me_ +
                                           " connected, but the peer there did not answer as a "
                                           "c10d TCPStore (is MASTER_PORT another program's "
                                           "port?): " +
                                           core::excerpt(first_line(e), 200, core::Quote::kDouble));
    }
    if (watchdog_fired)
      return Error(ErrorKind::kTimeout, where_ + " failed on " + me_ +
                                            ": the store that rank 0 hosts stopped answering; gave "
                                            "up at the deadline (" +
                                            core::duration_text(timeout_) + ")");
    // A reply the store client could not parse: a std::length_error or std::bad_alloc from a
    // length of 2^64-1 read out of garbage, or LibTorch's "Stop_waiting response is expected".
    // The peer there does not speak the store's protocol (a peer that closed is kPeerLost below).
    const std::string line = first_line(e);
    if (dynamic_cast<const std::length_error*>(&e) != nullptr ||
        dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
        (line.find("response") != std::string::npos && line.find("expected") != std::string::npos))
      return Error(ErrorKind::kConfig, where_ + " failed on " + me_ +
                                           ": the peer there sent a reply that is not the c10d "
                                           "TCPStore protocol (is MASTER_PORT another program's "
                                           "port?): " +
                                           core::excerpt(line, 200, core::Quote::kDouble));
    return Error(ErrorKind::kPeerLost, where_ + " failed on " + me_ + " after " +
                                           std::to_string(arrived) + " of " +
                                           std::to_string(world_size_) +
                                           " ranks had arrived: lost the store that rank 0 hosts "
                                           "(rank 0 gave up or died): " +
                                           line);
  }

 private:
  const std::string& where_;
  const std::string& me_;
  const milliseconds timeout_;
  const milliseconds first_answer_;
  const int world_size_;
};

// One rank's rendezvous, in the order it happens: reach the store, claim this rank under this
// job's identity, check in, wait for the others (rank 0 verifies them), and on failure make every
// rank that came report the same thing.
class Rendezvous {
 public:
  Rendezvous(const WorkerEnv& env, milliseconds timeout, milliseconds progress_every,
             StartupPhases& phases, const std::string& agreed_settings, PeerWatch* watch,
             c10::intrusive_ptr<c10d::Store> generation_store)
      : env_(env),
        timeout_(timeout),
        deadline_(Clock::now() + timeout),
        progress_(Clock::now(), timeout, progress_every),
        phases_(phases),
        agreed_(agreed_settings),
        watch_(watch),
        mine_{env.run_id, env.world_size},
        me_("rank " + std::to_string(env.rank)),
        where_("dtlaunch ddp: rendezvous at " + address(env)),
        first_answer_(std::min<milliseconds>(timeout, std::chrono::seconds(10))),
        words_(where_, me_, timeout_, first_answer_, env.world_size),
        audit_(env, mine_, where_, agreed_),
        store_(std::move(generation_store)) {}

  c10::intrusive_ptr<c10d::Store> run() {
    answered_ = static_cast<bool>(store_);  // set: a live recovery's generation (internal.hpp)
    if (!store_) reach_store();
    try {
      if (env_.rank == 0)
        claim_as_host();
      else
        claim();
      check_in();
      wait_for_all();
    } catch (const Error& e) {
      // Rank 0's published diagnosis is the cause: a rank that read it and ended may already be
      // "lost" to this rank's heartbeat, a consequence. A stop is the program's word.
      if (e.kind() != ErrorKind::kStopped && watch_ && watch_->lost() && !read_diagnosis_)
        throw watch_->error();
      throw;
    } catch (const std::exception& e) {
      // Once this rank's heartbeat runs (it has claimed its place), a store that fails may be
      // a rank 0 that died: its verdict names it.
      if (watch_ && joined_ && watch_->wait_lost(kVerdictGrace)) throw watch_->error();
      throw words_.translate(e, answered_, watchdog_ && watchdog_->fired(), arrived_);
    }
    phases_.all_checked_in = Clock::now();
    return store_;
  }

 private:
  // A store failure that comes a moment before the heartbeat's verdict (rank 0 killed) waits
  // this long for it, so that the error names the lost rank.
  static constexpr milliseconds kVerdictGrace{1500};

  // Connects to (or, on rank 0, hosts) the store, with the watchdog bounding its first answer.
  void reach_store() {
    const bool hosts = env_.rank == 0 && !env_.store_hosted;
    if (hosts) {
      // Rank 0's own TCPStore client connects to MASTER_ADDR too; with a name that does not
      // resolve it would retry, one warning a second, to the deadline.
      std::string reason;
      resolve(env_, reason);
    } else if (std::string reason = wait_for_listener(env_, deadline_, progress_);
               !reason.empty()) {
      throw words_.unreachable(reason);
    }
    // A real store answers each request at once; one that has not answered the first within
    // first_answer_ is not a TCPStore (or its process is stopped). Rank 0 lingers up to 2 s past
    // the deadline so that the others can read its diagnosis.
    watchdog_.emplace(env_.master_port,
                      std::min(deadline_, Clock::now() + first_answer_) +
                          (env_.rank == 0 ? std::chrono::seconds(4) : std::chrono::seconds(0)),
                      watch_ ? watch_->abort_flag() : nullptr);
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(env_.master_port);
    so.isServer = hosts;
    so.waitWorkers = false;
    so.timeout = timeout_;
    try {
      store_ = open_store(env_, so);
    } catch (const std::exception& e) {
      if (hosts)
        throw Error(ErrorKind::kBackend,
                    "dtlaunch ddp: rank 0 could not host the rendezvous store at " + address(env_) +
                        ": " + first_line(e));
      // LibTorch 2.x pings the server in the constructor: a silent peer is found here, and is
      // worded as when 1.13 finds it at the first request below.
      if (watchdog_->fired()) throw words_.silent_peer(e);
      // LibTorch 2.x's client checks the nonce of its first ping's answer: a peer that answered
      // something else is not a store of this LibTorch (our own 1.x client says so itself).
      const std::string_view what = e.what();
      if (what.find("nonce") != std::string_view::npos)
        throw Error(ErrorKind::kConfig,
                    where_ + " failed: " + me_ +
                        " connected, but the peer there sent bytes that are not a c10d TCPStore "
                        "response (is MASTER_PORT another program's port?): " +
                        first_line(e));
      // It accepted the connection (wait_for_listener) and then closed it unanswered.
      if (what.find("recv") != std::string_view::npos)
        throw Error(ErrorKind::kBackend,
                    where_ + " failed: " + me_ +
                        " connected, but the peer there closed the connection instead of "
                        "answering as a c10d TCPStore (is MASTER_PORT another program's port?): " +
                        first_line(e));
      throw words_.unreachable(first_line(e));
    }
  }

  // Rank 0 has just started its server: a count above 1 means its client reached another rank
  // 0's store (MASTER_ADDR names another host, where another job listens).
  void claim_as_host() {
    if (store_->add(keys::hosts(), 1) != 1) {
      std::string host = "another job";
      if (store_->check({keys::identity()}))
        if (auto other = parse_record(text(store_->get(keys::identity())))) host = describe(*other);
      throw Error(ErrorKind::kConfig,
                  "dtlaunch ddp: rank 0 of " + describe(mine_) + " found the rendezvous at " +
                      address(env_) + " already hosted by " + host +
                      ": two jobs share MASTER_ADDR:MASTER_PORT, or MASTER_ADDR is not the host "
                      "of rank 0");
    }
    if (!std::exchange(answered_, true)) watchdog_->set_cutoff(deadline_ + std::chrono::seconds(4));
    store_->set(keys::identity(), bytes(record(mine_)));
  }

  // The identity first: nothing of this rank is written to a store of another job.
  void claim() {
    auto pause = milliseconds(5);
    for (;;) {
      const bool published = store_->check({keys::identity()});
      if (!answered_) {
        answered_ = true;
        watchdog_->set_cutoff(deadline_ + std::chrono::seconds(1));
      }
      if (published) break;
      if (Clock::now() >= deadline_)
        throw Error(ErrorKind::kTimeout,
                    where_ + " timed out after " + core::duration_text(timeout_) + ": " + me_ +
                        " reached a store there, but no dtlaunch rank 0 published its identity in "
                        "it (is MASTER_PORT another program's TCPStore, or a rank 0 of an older "
                        "dtlaunch?)");
      if (progress_.due())
        progress_.print(me_ + " reached the store at " + address(env_) +
                        "; waiting for rank 0 to publish its identity there");
      sleep_a_little(pause);
    }
    const auto host = parse_record(text(store_->get(keys::identity())));
    if (!host)
      throw Error(ErrorKind::kConfig, where_ + ": " + me_ +
                                          " found a store whose identity record is not dtlaunch's: "
                                          "is MASTER_PORT another program's port?");
    if (!(*host == mine_)) {
      const std::string msg = foreign_message(env_, env_.rank, mine_, *host);
      store_->set(keys::foreign(store_->add(keys::foreign_count(), 1)), bytes(msg));
      throw Error(ErrorKind::kConfig, msg);
    }
    if (store_->add(keys::claim(env_.rank), 1) != 1) {
      const std::string msg = "dtlaunch ddp: " + me_ + " of " + describe(mine_) +
                              " reached the rendezvous at " + address(env_) +
                              ", where another process has already checked in as " + me_ +
                              ": two jobs share MASTER_ADDR:MASTER_PORT, or RANK is set wrong";
      store_->set(keys::refused(), bytes(msg));
      throw Error(ErrorKind::kConfig, msg);
    }
  }

  void check_in() {
    phases_.store_connected = Clock::now();
    // The store is this job's: from here on this rank's heartbeat runs and its endpoint is
    // published before it counts itself, so that a complete rendezvous has every endpoint.
    if (watch_) {
      watch_->join(*store_);
      joined_ = true;
    }
    // For rank 0's startup line and the reports: where this rank runs, and when it came.
    store_->set(store_keys::Diag::checkin(env_.rank), bytes(checkin_record(env_)));
    store_->set(keys::rank(env_.rank), bytes(record(mine_)));
    store_->set(keys::settings(env_.rank), bytes(agreed_));
    store_->add(keys::count(), 1);
    checked_in_ = Clock::now();
  }

  // Polling an add(0) or a check rather than a blocking wait(): a TCPStore wait that times out
  // leaves its reply pending on the socket, and the diagnosis needs the socket afterwards.
  void wait_for_all() {
    auto pause = milliseconds(5);
    for (;;) {
      if (env_.rank == 0 ? all_arrived() : others_done()) break;
      if (stop_requested())
        throw stopped(where_ + ": waiting for ranks " + format_ranks(missing_ranks()));
      if (watch_) {
        if (watch_->lost()) throw watch_->error();
        watch_->fetch_endpoints(*store_, false);
      }
      if (Clock::now() >= deadline_) throw timed_out();
      if (progress_.due()) print_progress();
      sleep_a_little(pause);
    }
    if (watch_) watch_->fetch_endpoints(*store_, true);
  }

  bool others_done() {
    if (store_->check({keys::done()})) return true;
    if (store_->check({keys::failed()})) {
      // Rank 0's diagnosis, published before it gave up.
      const auto rec = detail::decode_failure(text(store_->get(keys::failed())),
                                              detail::job_key_of(env_.job_key));
      if (rec.forged) {  // not rank 0's: whoever wrote it may not end the job
        if (!std::exchange(forged_seen_, true)) say(detail::forged_failure_line(me_, rec));
        return false;
      }
      store_->add(keys::failed_seen(), 1);
      read_diagnosis_ = true;
      throw from_failure_record(rec);
    }
    return false;
  }

  bool all_arrived() {
    arrived_ = store_->add(keys::count(), 0);
    if (store_->check({keys::refused()}))
      throw fail_all(Error(ErrorKind::kConfig, one_line(text(store_->get(keys::refused())))));
    audit_.log_foreign_ranks(*store_);
    if (arrived_ < env_.world_size) return false;
    if (auto wrong = audit_.wrong_identity(*store_)) throw fail_all(*wrong);
    if (auto differ = audit_.different_settings(*store_)) throw fail_all(*differ);
    store_->set(keys::done(), bytes("1"));
    phases_.rank0_waited = std::chrono::duration_cast<milliseconds>(Clock::now() - checked_in_);
    return true;
  }

  Error timed_out() {
    arrived_ = store_->add(keys::count(), 0);
    const std::string msg = where_ + " timed out after " + core::duration_text(timeout_) + ": " +
                            std::to_string(arrived_) + " of " + std::to_string(env_.world_size) +
                            " ranks arrived; missing ranks: " + format_ranks(missing_ranks());
    if (env_.rank == 0) return fail_all(Error(ErrorKind::kTimeout, msg));
    store_->add(keys::failed_seen(), 1);
    return Error(ErrorKind::kTimeout, msg);
  }

  void print_progress() {
    if (env_.rank == 0)
      progress_.print("rendezvous at " + address(env_) + ": " + std::to_string(arrived_) + " of " +
                      std::to_string(env_.world_size) + " ranks arrived; waiting for ranks " +
                      format_ranks(missing_ranks()));
    else
      progress_.print("rendezvous at " + address(env_) + ": " + me_ + " checked in; " +
                      std::to_string(store_->add(keys::count(), 0)) + " of " +
                      std::to_string(env_.world_size) + " ranks arrived");
  }

  // Rank 0 publishes its diagnosis before it gives up, and with it goes the store: so the other
  // ranks report the same thing instead of a broken pipe. It lingers, briefly, until the ranks
  // that came have read it.
  Error fail_all(const Error& e) {
    store_->set(keys::failed(), bytes(detail::encode_failure(static_cast<int>(e.kind()), e.what(),
                                                             detail::job_key_of(env_.job_key))));
    const auto linger_end = Clock::now() + std::chrono::seconds(2);
    while (store_->add(keys::failed_seen(), 0) < arrived_ - 1 && Clock::now() < linger_end)
      std::this_thread::sleep_for(milliseconds(10));
    return e;
  }

  std::vector<int> missing_ranks() {
    std::vector<int> missing;
    for (int r = 0; r < env_.world_size; ++r)
      if (!store_->check({keys::rank(r)})) missing.push_back(r);
    return missing;
  }

  void sleep_a_little(milliseconds& pause) const {
    std::this_thread::sleep_for(std::min<milliseconds>(
        pause,
        std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now()) + milliseconds(1)));
    pause = std::min(pause * 2, milliseconds(100));
  }

  const WorkerEnv& env_;
  const milliseconds timeout_;
  const Clock::time_point deadline_;
  Progress progress_;
  StartupPhases& phases_;
  const std::string& agreed_;
  PeerWatch* const watch_;
  const Identity mine_;
  const std::string me_;
  const std::string where_;
  const milliseconds first_answer_;
  const StoreFailureWords words_;
  CheckInAudit audit_;
  std::optional<StoreWatchdog> watchdog_;
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t arrived_ = 0;
  bool answered_ = false;
  bool joined_ = false;          // this rank's heartbeat runs
  bool forged_seen_ = false;     // a forged failure record was reported once
  bool read_diagnosis_ = false;  // rank 0's published failure record was read: it is the cause
  Clock::time_point checked_in_{};
};

}  // namespace

c10::intrusive_ptr<c10d::Store> rendezvous(const WorkerEnv& env, milliseconds timeout,
                                           milliseconds progress_every, StartupPhases& phases,
                                           const std::string& agreed_settings, PeerWatch* watch,
                                           c10::intrusive_ptr<c10d::Store> generation_store) {
  return Rendezvous(env, timeout, progress_every, phases, agreed_settings, watch,
                    std::move(generation_store))
      .run();
}

}  // namespace dtlaunch::ddp::detail
