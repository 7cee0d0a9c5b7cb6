// dtlaunch-train end to end, as real processes on this host: it learns Fashion-MNIST (and 2 ranks
// match 1), and a stop signal to any rank makes every rank checkpoint and exit 75, after which
// --resume finishes the run exactly as if it had never been interrupted.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "dtlaunch_catch.hpp"
#include "proc/supervisor.hpp"
#include "test_support.hpp"

using dtlaunch_test::RankOptions;
using dtlaunch_test::Ranks;
using dtlaunch_test::TempDir;
using namespace std::chrono_literals;

namespace {

const std::string kTrain = DTLAUNCH_TRAIN_BIN;

struct Accuracy {
  double value = -1;
  long correct = -1;
  long total = -1;
  long steps = -1;
};

// "done: 938 steps, test accuracy 0.8824 (8824/10000), 31.2 s"
Accuracy parse_done(const std::string& log) {
  std::smatch m;
  static const std::regex re(R"(done: (\d+) steps, test accuracy ([0-9.]+) \((\d+)/(\d+)\))");
  if (!std::regex_search(log, m, re)) return {};
  return {std::stod(m[2]), std::stol(m[3]), std::stol(m[4]), std::stol(m[1])};
}

// "weights sha256 <64 hex digits>", rank 0's last line of a completed run; "" when absent.
std::string weights_digest(const std::string& log) {
  std::smatch m;
  static const std::regex re(R"(weights sha256 ([0-9a-f]{64})\n)");
  return std::regex_search(log, m, re) ? std::string(m[1]) : std::string();
}

std::vector<std::string> common_args(const TempDir& tmp) {
  // A private cache: the test also covers unpacking the gzipped files, with ranks racing.
  return {"--cache-dir", tmp / "cache", "--seed", "1"};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Whether something accepts connections at 127.0.0.1:port.
bool listening(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

// Two epochs of 60,000 images at a global batch of 64: the same number of optimizer steps and
// the same global batch for 1 rank and for 2 ranks, so DDP should not change the result beyond
// the different sample order. Measured on this machine (seed 1): see docs/example.md.
TEST_CASE("train: 85% test accuracy in 2 epochs with 2 ranks as with 1", "[train][torch]") {
  constexpr double kBound = 0.85;
  constexpr double kMargin = 0.015;
  struct Row {
    int ranks;
    const char* batch_per_rank;
  };
  const std::vector<Row> rows = {{1, "64"}, {2, "32"}};

  TempDir tmp;
  std::vector<double> accuracy;
  for (const Row& row : rows) {
    INFO("ranks " << row.ranks << ", batch " << row.batch_per_rank << " per rank");
    Ranks ranks(kTrain,
                concat(common_args(tmp),
                       {"--epochs", "2", "--batch-size", row.batch_per_rank, "--log-every", "200"}),
                row.ranks, tmp.path(), "learn" + std::to_string(row.ranks));
    std::vector<int> status = ranks.wait_all(300s);
    INFO(ranks.log(0));
    REQUIRE(status == std::vector<int>(static_cast<size_t>(row.ranks), 0));
    Accuracy acc = parse_done(ranks.log(0));
    CHECK(acc.steps == 1876);
    CHECK(acc.total == 10000);  // the whole test set, each sample counted once across ranks
    CHECK(acc.value > kBound);
    accuracy.push_back(acc.value);
  }
  CHECK(std::abs(accuracy[1] - accuracy[0]) < kMargin);
}

// Issue 32, item 4: a run ends with the digest of its weights, so that two runs can be compared
// bit for bit. The same seed gives the same digest run to run (CPU, Gloo, 2 ranks); another seed
// another one; and it is the digest of the weights the run wrote to its checkpoint.
TEST_CASE("train: a run ends with its weights' digest, the same for the same seed",
          "[train][torch]") {
  TempDir tmp;
  const auto run = [&](const std::string& tag, const std::string& seed) {
    Ranks ranks(kTrain,
                {"--synthetic", "512", "--epochs", "2", "--batch-size", "16", "--seed", seed,
                 "--checkpoint", tmp / ("ckpt-" + tag)},
                2, tmp.path(), tag);
    INFO(ranks.log(0));
    CHECK(ranks.wait_all(120s) == std::vector<int>{0, 0});
    // Rank 0 alone says it, once every rank found the same.
    CHECK(weights_digest(ranks.log(1)).empty());
    return weights_digest(ranks.log(0));
  };
  const std::string first = run("first", "1");
  REQUIRE(first.size() == 64);
  CHECK(run("again", "1") == first);
  CHECK(run("other-seed", "2") != first);
  // The digest is of the weights: a run that loads the finished run's checkpoint, with nothing
  // left to train, ends with the very same.
  Ranks resumed(kTrain,
                {"--synthetic", "512", "--epochs", "2", "--batch-size", "16", "--seed", "1",
                 "--checkpoint", tmp / "ckpt-first", "--resume"},
                2, tmp.path(), "resumed");
  INFO(resumed.log(0));
  CHECK(resumed.wait_all(120s) == std::vector<int>{0, 0});
  CHECK(resumed.log(0).find("resumed from") != std::string::npos);
  CHECK(weights_digest(resumed.log(0)) == first);
}

// A stop signal to one rank (rank 1 for SIGUSR1, rank 0 for SIGTERM) must stop both at the same
// step boundary, with a checkpoint, status 75; resuming must finish with the very same model as
// a run that was never interrupted (same test-set count): weights, momentum and the sampler's
// place in the epoch all survive the checkpoint.
TEST_CASE("train: a stop signal to any rank checkpoints and exits 75 and --resume finishes",
          "[train][torch]") {
  struct Row {
    int signal;
    int target_rank;
    const char* message;
  };
  const std::vector<Row> rows = {{SIGUSR1, 1, "stop: User defined signal 1 received"},
                                 {SIGTERM, 0, "stop: Terminated received"}};
  TempDir tmp;
  // 1.1 epochs with a step cap: the resumed run crosses an epoch boundary (sampler epoch 2).
  const auto args = concat(common_args(tmp), {"--epochs", "2", "--max-steps", "520", "--batch-size",
                                              "64", "--log-every", "20"});

  Ranks reference(kTrain, args, 2, tmp.path(), "reference");
  std::vector<int> reference_status = reference.wait_all(300s);
  INFO(reference.log(0));
  REQUIRE(reference_status == std::vector<int>{0, 0});
  Accuracy uninterrupted = parse_done(reference.log(0));
  REQUIRE(uninterrupted.steps == 520);

  for (const Row& row : rows) {
    INFO("signal " << row.signal << " to rank " << row.target_rank);
    const std::string ckpt = tmp / ("ckpt-" + std::to_string(row.signal));
    const auto run_args = concat(args, {"--checkpoint", ckpt, "--resume"});

    Ranks first(kTrain, run_args, 2, tmp.path(), "stop" + std::to_string(row.signal));
    const bool reached = first.wait_for_output(0, "step 40/469", 120s);
    // Seen once in a fresh clone's run, not reproduced: the run ended before step 40. Say how.
    if (!reached) {
      const std::vector<int> ended = first.wait_all(1s);
      UNSCOPED_INFO("the run ended before step 40: statuses " << ended[0] << " " << ended[1]
                                                              << "\nrank 0:\n"
                                                              << first.log(0) << "\nrank 1:\n"
                                                              << first.log(1));
    }
    REQUIRE(reached);
    REQUIRE(first.pid(row.target_rank) > 0);
    ::kill(first.pid(row.target_rank), row.signal);
    std::vector<int> status = first.wait_all(120s);
    std::string log0 = first.log(0);
    INFO(log0);
    REQUIRE(status == std::vector<int>{75, 75});
    CHECK(log0.find(row.message) != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(log0, m, std::regex(R"(saved at epoch 1 step (\d+) \(global)")));
    const long stopped_at = std::stol(m[1]);
    CHECK(stopped_at >= 40);
    CHECK(stopped_at < 469);
    REQUIRE(std::filesystem::is_regular_file(ckpt));

    Ranks resumed(kTrain, run_args, 2, tmp.path(), "resume" + std::to_string(row.signal));
    status = resumed.wait_all(300s);
    std::string resumed_log = resumed.log(0);
    INFO(resumed_log);
    REQUIRE(status == std::vector<int>{0, 0});
    CHECK(resumed_log.find("resumed from " + ckpt + " at epoch 1 step " +
                           std::to_string(stopped_at)) != std::string::npos);
    Accuracy finished = parse_done(resumed_log);
    CHECK(finished.steps == 520);
    CHECK(finished.correct == uninterrupted.correct);
    // Not only the same count: the same weights, bit for bit.
    CHECK(!weights_digest(resumed_log).empty());
    CHECK(weights_digest(resumed_log) == weights_digest(reference.log(0)));
  }

  {  // a checkpoint of 2 ranks is refused by 1 rank, naming the file
    const std::string ckpt = tmp / ("ckpt-" + std::to_string(SIGUSR1));
    Ranks one(kTrain, concat(args, {"--checkpoint", ckpt, "--resume"}), 1, tmp.path(), "mismatch");
    REQUIRE(one.wait_all(120s) == std::vector<int>{2});
    CHECK(one.log(0).find(ckpt + ": written by a run with 2 ranks") != std::string::npos);
  }
}

TEST_CASE("train: bad input gets one line and status 2", "[train][torch]") {
  struct Row {
    std::vector<std::string> args;
    const char* expected;
  };
  const std::vector<Row> rows = {
      {{"--data-dir", "/nonexistent/fashion"},
       "Fashion-MNIST not found: /nonexistent/fashion/train-images-idx3-ubyte.gz does not exist "
       "(install the Debian package dataset-fashion-mnist"},
      {{"--checkpoint", "/dev/null", "--resume"},
       "--checkpoint '/dev/null': exists and is a character device"},
      {{"--backend", "mpi"}, "--backend"},
      {{"--resume"}, "--resume requires --checkpoint"},
      // Numbers: quoted as typed, named by their option, status 2 (NaN and "-1" were 1; CLI11
      // printed "-1" as a 300-digit double, and took "-5" for an option).
      {{"--lr", "nan"}, "dtlaunch-train: --lr 'nan': expected a positive number"},
      {{"--lr", "-1"}, "dtlaunch-train: --lr '-1': expected a positive number"},
      {{"--lr", "inf"}, "dtlaunch-train: --lr 'inf': expected a positive number"},
      {{"--momentum", "1.5"}, "dtlaunch-train: --momentum '1.5': expected a number from 0 to 1"},
      {{"--bucket-cap-mb", "0"}, "dtlaunch-train: --bucket-cap-mb '0': expected a positive"},
      {{"--synthetic", "-1"}, "dtlaunch-train: --synthetic '-1': expected a whole number from 0"},
      {{"--max-steps", "-5"},
       "dtlaunch-train: --max-steps '-5': expected a whole number of at least 0"},
      {{"--log-every", "-1"}, "dtlaunch-train: --log-every '-1': expected a whole number"},
      {{"--epochs", "0"}, "dtlaunch-train: --epochs '0': expected a whole number from 1 to"},
      {{"--warmup-steps", "1.5"}, "dtlaunch-train: --warmup-steps '1.5': expected a whole"},
      {{"--seed", "7"}, "dtlaunch-train: --seed is given more than once; give it once"},
      {{"--threads", "x"}, "dtlaunch-train: --threads 'x': expected a whole number from 1 to"},
      {{"--rendezvous-timeout", "0"}, "dtlaunch-train: --rendezvous-timeout '0': expected"},
      // The checkpoint's directory, at start-up rather than at the first save.
      {{"--checkpoint", "/nonexistent-dir/ck.pt"},
       "--checkpoint '/nonexistent-dir/ck.pt': the directory '/nonexistent-dir' does not exist"},
      {{"--checkpoint", "/proc/ck.pt"}, "--checkpoint '/proc/ck.pt': cannot create a file in"},
      {{"--checkpoint", "/tmp"}, "--checkpoint '/tmp': is a directory"},
  };
  TempDir tmp;
  {  // a regular file where a directory should be
    const std::string afile = tmp / "afile";
    std::ofstream(afile) << "x";
    Ranks one(kTrain, concat(common_args(tmp), {"--checkpoint", afile + "/ck.pt"}), 1, tmp.path(),
              "afile");
    REQUIRE(one.wait_all(120s) == std::vector<int>{2});
    INFO(one.log(0));
    CHECK(one.log(0).find("'" + afile + "' is not a directory") != std::string::npos);
  }
  for (const Row& row : rows) {
    INFO(row.args[0] << " ...");
    Ranks one(kTrain, concat(common_args(tmp), row.args), 1, tmp.path(), "bad");
    REQUIRE(one.wait_all(120s) == std::vector<int>{2});
    std::string log = one.log(0);
    INFO(log);
    CHECK(log.find(row.expected) != std::string::npos);
  }
}

// Bad input that every rank can see is found by every rank before the rendezvous, so each exits
// 2 with its own line; a failure found by one rank only (a corrupt file that local rank 0
// unpacks) is agreed on, so the others exit 2 too instead of 1 with "Connection reset by peer".
TEST_CASE("train: bad input fails every rank with status 2, not a broken connection",
          "[train][torch]") {
  TempDir tmp;
  const std::string corrupt = tmp / "corrupt";
  std::filesystem::create_directory(corrupt);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    std::ofstream(corrupt + "/" + name + ".gz") << "not gzip data, and short";
  struct Row {
    std::vector<std::string> args;
    const char* expected;  // in rank 0's log
  };
  const std::vector<Row> rows = {
      {{"--data-dir", "/nonexistent"}, "Fashion-MNIST not found: /nonexistent/train-images"},
      {{"--data-dir", corrupt}, "train-images-idx3-ubyte.gz: truncated gzip data"},
  };
  for (const Row& row : rows) {
    Ranks ranks(kTrain, concat(common_args(tmp), row.args), 2, tmp.path(), "bad2");
    const auto status = ranks.wait_all(120s);
    const std::string l0 = ranks.log(0), l1 = ranks.log(1);
    INFO("--- rank 0\n" << l0 << "--- rank 1\n" << l1);
    CHECK(status == std::vector<int>{2, 2});
    CHECK(l0.find(row.expected) != std::string::npos);
    CHECK(l1.find("dtlaunch-train: ") != std::string::npos);
    CHECK(l1.find("Connection") == std::string::npos);
  }
}

// Issue 26 item 2: job 200's rank forced onto job 100's port fails at once with status 2; job 100
// logs one line, goes on waiting for its own rank 1, and completes.
TEST_CASE("train: a rank of another job on our MASTER_PORT fails, our job completes",
          "[train][torch]") {
  TempDir tmp;
  const std::string port = std::to_string(dtlaunch::launch::find_free_port("127.0.0.1"));
  // Job B has another seed; common_args() sets --seed 1 for job A.
  const std::vector<std::string> args = {"--synthetic",          "256", "--max-steps", "3",
                                         "--rendezvous-timeout", "60"};
  const std::map<std::string, std::string> env_a = {{"MASTER_PORT", port},
                                                    {"DTLAUNCH_RUN_ID", "slurm-100.0"}};
  Ranks a(kTrain, concat(common_args(tmp), args), 2, tmp.path(), "jobA", RankOptions{{0}, env_a});
  for (int i = 0; i < 200 && !listening(std::stoi(port)); ++i) std::this_thread::sleep_for(50ms);
  Ranks b(kTrain, concat(args, {"--seed", "7"}), 2, tmp.path(), "jobB",
          RankOptions{{1}, {{"MASTER_PORT", port}, {"DTLAUNCH_RUN_ID", "slurm-200.0"}}});
  const auto sb = b.wait_all(30s);
  const std::string lb = b.log(1);
  INFO("--- job B rank 1\n" << lb);
  CHECK(sb == std::vector<int>{2});
  const std::string expected =
      "dtlaunch ddp: rank 1 of run 'slurm-200.0' (world 2) reached the rendezvous at 127.0.0.1:" +
      port + " of run 'slurm-100.0' (world 2): two jobs share";
  CHECK(lb.find("dtlaunch-train: config error: " + expected) != std::string::npos);
  Ranks a1(kTrain, concat(common_args(tmp), args), 2, tmp.path(), "jobA1", RankOptions{{1}, env_a});
  const auto sa = a.wait_all(60s);
  const auto sa1 = a1.wait_all(60s);
  const std::string la = a.log(0);
  INFO("--- job A rank 0\n" << la << "--- job A rank 1\n" << a1.log(1));
  CHECK(sa == std::vector<int>{0});
  CHECK(sa1 == std::vector<int>{0});
  CHECK(la.find("rank 0 refused a rank of another job: " + expected) != std::string::npos);
}

// A lone rank waits in the rendezvous; a stop signal there ends it at once with 75 (nothing was
// trained, so nothing is lost), where before it was recorded for a training loop not yet running.
TEST_CASE(
    "train: a stop signal during start-up exits 75 at once, and --rendezvous-timeout bounds it",
    "[train][torch]") {
  TempDir tmp;
  for (int sig : {SIGTERM, SIGUSR1}) {
    INFO("signal " << sig);
    const std::string port = std::to_string(dtlaunch::launch::find_free_port("127.0.0.1"));
    Ranks lone(kTrain,
               concat(common_args(tmp), {"--synthetic", "256", "--rendezvous-timeout", "60"}), 2,
               tmp.path(), "lone", RankOptions{{0}, {{"MASTER_PORT", port}}});
    bool up = false;
    for (int i = 0; i < 600 && !(up = listening(std::stoi(port))); ++i)
      std::this_thread::sleep_for(50ms);
    REQUIRE(up);
    const auto sent = std::chrono::steady_clock::now();
    ::kill(lone.pid(0), sig);
    const auto status = lone.wait_all(30s);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    INFO(lone.log(0));
    CHECK(status == std::vector<int>{75});
    CHECK(took < 5.0);
    CHECK(lone.log(0).find("received during start-up, before training began: nothing to save; "
                           "exiting with status 75") != std::string::npos);
  }
  {
    const auto started = std::chrono::steady_clock::now();
    Ranks lone(kTrain,
               concat(common_args(tmp), {"--synthetic", "256", "--rendezvous-timeout", "2"}), 2,
               tmp.path(), "timeout", RankOptions{{0}, {}});
    const auto status = lone.wait_all(60s);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(lone.log(0));
    CHECK(status == std::vector<int>{1});
    CHECK(took < 15.0);
    CHECK(lone.log(0).find("timed out after 2 s: 1 of 2 ranks arrived; missing ranks: 1") !=
          std::string::npos);
  }
}

namespace {

std::string file_bytes(const std::string& path) {
  return dtlaunch_test::read_file(path);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A tmpfs of `size` mounted at `dir` for the scope (needs CAP_SYS_ADMIN), unmounted again.
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    std::filesystem::create_directory(dir);
    mounted_ =
        ::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, ("size=" + size).c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  SmallTmpfs(const SmallTmpfs&) = delete;
  SmallTmpfs& operator=(const SmallTmpfs&) = delete;
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

}  // namespace

// Issue 26, items 4-7: a checkpoint is verified before it is loaded, its progress record is
// range-checked, a full disk is an error that leaves the previous checkpoint, and a path that is
// not a regular file is refused at start-up instead of being replaced or blocking in open().
TEST_CASE("train: checkpoints that are corrupt, do not fit, or are not regular files are refused",
          "[train][torch]") {
  // One directory and one first checkpoint for every section (Catch runs the case once per
  // section): training it is most of the case's time.
  static TempDir tmp;
  const auto args = concat(common_args(tmp), {"--log-every", "0"});
  const std::string good = tmp / "good.ckpt";
  // A run of 3 steps (4 with `more`), which checkpoints at its end.
  auto run = [&](const std::vector<std::string>& extra, const std::string& tag, bool more = false) {
    Ranks one(kTrain, concat(concat(args, {"--max-steps", more ? "4" : "3"}), extra), 1, tmp.path(),
              tag);
    const auto status = one.wait_all(120s);
    return std::make_pair(status.empty() ? -1 : status[0], one.log(0));
  };
  if (!std::filesystem::exists(good)) {
    const auto [status, log] = run({"--checkpoint", good}, "first");
    INFO(log);
    REQUIRE(status == 0);
  }
  const std::string clean = file_bytes(good);
  REQUIRE(clean.size() > 100000);

  SECTION("a byte flipped in the weights, or a cut file, is corruption: status 2") {
    std::string flipped = clean;
    flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x01);
    write_bytes(tmp / "flipped.ckpt", flipped);
    write_bytes(tmp / "cut.ckpt", clean.substr(0, clean.size() - 1000));
    for (const std::string name : {"flipped.ckpt", "cut.ckpt"}) {
      const auto [status, log] = run({"--checkpoint", tmp / name, "--resume"}, "corrupt");
      INFO(name << "\n" << log);
      CHECK(status == 2);
      CHECK(log.find(tmp / name + ": the checkpoint is corrupt (") != std::string::npos);
      CHECK(log.find("resumed from") == std::string::npos);
    }
    // The clean copy still resumes.
    write_bytes(tmp / "copy.ckpt", clean);
    const auto [status, log] = run({"--checkpoint", tmp / "copy.ckpt", "--resume"}, "clean", true);
    INFO(log);
    CHECK(status == 0);
    CHECK(log.find("resumed from " + tmp / "copy.ckpt" + " at epoch 1 step 3") !=
          std::string::npos);
  }

  // Issue 35 D: the previous verified checkpoint is kept, and a corrupt newest one falls back to
  // it with one line instead of ending the job with status 2.
  SECTION("a corrupt newest checkpoint resumes from the previous one, said in one line") {
    const std::string ckpt = tmp / "fallback.ckpt";
    const std::string prev = ckpt + ".prev";
    write_bytes(ckpt, clean);
    {
      const auto [status, log] = run({"--checkpoint", ckpt, "--resume"}, "fb-save", true);
      INFO(log);
      REQUIRE(status == 0);
    }
    REQUIRE(std::filesystem::exists(prev));
    CHECK(file_bytes(prev) == clean);
    std::string newest = file_bytes(ckpt);
    REQUIRE(newest != clean);
    newest[newest.size() / 2] = static_cast<char>(newest[newest.size() / 2] ^ 0x01);
    write_bytes(ckpt, newest);
    {
      const auto [status, log] = run({"--checkpoint", ckpt, "--resume"}, "fb-resume", true);
      INFO(log);
      CHECK(status == 0);
      CHECK(log.find(ckpt + ": the checkpoint is corrupt (") != std::string::npos);
      CHECK(log.find("resuming from the previous checkpoint " + prev + " instead") !=
            std::string::npos);
      CHECK(log.find("at epoch 1 step 3") != std::string::npos);
    }
    // The run's own checkpoint then replaced the corrupt one, which was not kept as previous.
    CHECK(file_bytes(prev) == clean);
    // Both corrupt: status 2, and the line says the previous one failed too.
    write_bytes(ckpt, newest);
    write_bytes(prev, clean.substr(0, clean.size() - 1000));
    const auto [status, log] = run({"--checkpoint", ckpt, "--resume"}, "fb-both", true);
    INFO(log);
    CHECK(status == 2);
    CHECK(log.find("the previous checkpoint " + prev + " did not load either") !=
          std::string::npos);
  }

  SECTION("every field of the progress record is range-checked behind a valid checksum") {
    struct Row {
      int field;
      long long value;
      std::string expected;
    };
    const std::vector<Row> rows = {
        {0, 7, "not a dtlaunch-train checkpoint (format version 7, expected 1)"},
        {1, 1000000, "the progress record says epoch 1000001 step 3; it does not fit this run"},
        {2, 1000000, "the progress record says step 1000000 of an epoch; it does not fit"},
        {3, 1000000, "the progress record says global step 1000000 at epoch 1 step 3"},
        {4, 3, "written by a run with 3 ranks, --batch-size 64, --seed 1"},
        {5, 0, "written by a run with 1 ranks, --batch-size 0, --seed 1"},
        {6, -4, "not a dtlaunch-train checkpoint (negative progress field)"},
    };
    for (const Row& row : rows) {
      INFO("field " << row.field << " = " << row.value);
      const std::string edited = tmp / ("field" + std::to_string(row.field) + ".ckpt");
      const std::string cmd = "/usr/bin/python3 " + std::string(EDIT_CHECKPOINT) + " " + good +
                              " " + edited + " " + std::to_string(row.field) + " " +
                              std::to_string(row.value);
      REQUIRE(std::system(cmd.c_str()) == 0);
      const auto [status, log] = run({"--checkpoint", edited, "--resume"}, "field");
      INFO(log);
      CHECK(status == 2);
      CHECK(log.find(edited + ": ") != std::string::npos);
      CHECK(log.find(row.expected) != std::string::npos);
    }
  }

  SECTION("a full disk: status 1 naming ENOSPC, no temporary file, the previous checkpoint kept") {
    const std::string dir = tmp / "small";
    // Room for one checkpoint, not for its replacement next to it.
    SmallTmpfs fs(dir, std::to_string(clean.size() * 3 / 2 / 1024) + "k");
    if (!fs.mounted()) {
      WARN("cannot mount a tmpfs here (needs CAP_SYS_ADMIN): full disk not exercised");
      return;
    }
    const std::string ckpt = dir + "/x.ckpt";
    write_bytes(ckpt, clean);
    REQUIRE(file_bytes(ckpt) == clean);
    const auto [status, log] = run({"--checkpoint", ckpt, "--resume"}, "full", true);
    INFO(log);
    CHECK(status == 1);
    CHECK(log.find("cannot write checkpoint " + ckpt + ": No space left on device") !=
          std::string::npos);
    CHECK(file_bytes(ckpt) == clean);
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      left.push_back(e.path().filename().string());
    CHECK(left == std::vector<std::string>{"x.ckpt"});
  }

  SECTION("a target that is not a regular file is refused at start-up, never replaced") {
    const std::string fifo = tmp / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const std::string target = tmp / "target";
    write_bytes(target, "not to be replaced");
    const std::string link = tmp / "link.ckpt";
    std::filesystem::create_symlink(target, link);
    const std::string dangling = tmp / "dangling.ckpt";
    std::filesystem::create_symlink(tmp / "nothing", dangling);
    struct Row {
      std::string path;
      bool resume;
      std::string what;
    };
    const std::vector<Row> rows = {{fifo, true, "a FIFO"},
                                   {fifo, false, "a FIFO"},
                                   {"/dev/full", false, "a character device"},
                                   {link, false, "a symbolic link"},
                                   {link, true, "a symbolic link"},
                                   {dangling, false, "a symbolic link"}};
    for (const Row& row : rows) {
      INFO(row.path << (row.resume ? " --resume" : ""));
      std::vector<std::string> extra = {"--checkpoint", row.path};
      if (row.resume) extra.push_back("--resume");
      const auto started = std::chrono::steady_clock::now();
      const auto [status, log] = run(extra, "target");
      INFO(log);
      CHECK(status == 2);
      CHECK(log.find("--checkpoint '" + row.path + "': exists and is " + row.what) !=
            std::string::npos);
      CHECK(std::chrono::steady_clock::now() - started < 30s);
    }
    CHECK(file_bytes(target) == "not to be replaced");
    CHECK(std::filesystem::is_symlink(link));
    struct stat st {};
    CHECK((::stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)));
  }
}

// Issue 35 E: two jobs started together with one --checkpoint. The other job's file appears
// between rank 0's look and rank 1's (made to happen every time by lstat_race.cpp, preloaded):
// the diagnosis must say so, not blame a file system that every rank shares.
TEST_CASE("train: two jobs on one --checkpoint: a file that appears at start-up is named a race",
          "[train][torch]") {
  TempDir tmp;
  const std::string ckpt = tmp / "shared.ckpt";
  Ranks ranks(kTrain,
              {"--synthetic", "256", "--epochs", "1", "--checkpoint", ckpt, "--resume",
               "--rendezvous-timeout", "60"},
              2, tmp.path(), "race",
              RankOptions{{},
                          {{"LD_PRELOAD", LSTAT_RACE},
                           {"RACE_PATH", ckpt},
                           {"RACE_CALL", "2"},  // 1: the start-up's check of the path
                           {"RACE_MARK", tmp / "rank0-looked"}}});
  const auto status = ranks.wait_all(120s);
  INFO(ranks.log(0) << ranks.log(1));
  CHECK(status == std::vector<int>{2, 2});
  CHECK(std::filesystem::exists(tmp / "rank0-looked"));  // the race took place
  for (int rank : {0, 1}) {
    CHECK(ranks.log(rank).find("--checkpoint " + ckpt + " exists on 1 of 2 ranks, and on every "
                               "rank a second later: it appeared while this job was starting") !=
          std::string::npos);
    CHECK(ranks.log(rank).find("file system every rank shares") == std::string::npos);
  }
}
