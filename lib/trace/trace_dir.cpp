// Reads DIR twice or three times, one file at a time: the headers to pick the run and each rank's
// newest file, then the chosen files into the merger, then (for a picture) again into it. Memory
// is one file plus the summary, whatever the number of ranks.
#include "trace/trace_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>

#include "core/error.hpp"
#include "core/file.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "trace/record.hpp"
#include "trace/timeline.hpp"
#include "trace/verdict.hpp"

namespace dtlaunch::trace {

using core::excerpt;

namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 30;  // 1,000,000 entries are about 250 MB
constexpr size_t kHeadBytes = 64 * 1024;

// The whole file, or nullopt and `why`. Regular files only: a FIFO or a device named *.json
// must not block or flood the reader.
std::optional<std::string> read_whole(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *why = std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = "not a regular file";
  } else if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    *why = "larger than 1 GiB";
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t used = 0;
    while (used < text.size()) {
      const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      used += static_cast<size_t>(n);
    }
    text.resize(used);
    ::close(fd);
    return text;
  }
  ::close(fd);
  return std::nullopt;
}

struct Candidate {
  std::string path, name;
  Header header;
};

void write_output_file(const std::string& path, const std::string& data) {
  // The team's rule for created files: an existing target must be a regular file, and a symlink
  // at the final component is not followed.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw core::Error::usage("--html " + excerpt(path) + ": exists and is not a regular file");
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) throw core::Error::usage("--html " + excerpt(path) + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = errno;
      ::close(fd);
      ::unlink(path.c_str());
      throw core::Error::system("writing " + excerpt(path), e);
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw core::Error::system("writing " + excerpt(path), errno);
}

using RunKey = std::pair<std::string, int>;  // run id, attempt
using Runs = std::map<RunKey, std::vector<Candidate>>;

// `word` as one word of a shell command line, quoted only when it must be: a hint's command is
// meant to be pasted.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           (c != '\0' && std::strchr("_./:=@%+-,", c) != nullptr);
  });
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The *.json names in dir (not the runtime's *.tmp.* files), sorted.
std::vector<std::string> record_names(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw core::Error::usage("trace: " + excerpt(dir) + " is not a directory" +
                             (ec ? " (" + ec.message() + ")" : ""));
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 &&
        name.find(".tmp.") == std::string::npos)
      names.push_back(name);
  }
  if (ec) throw core::Error::usage("trace: cannot list " + excerpt(dir) + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// One file's header, or nullopt and `why`.
std::optional<Header> read_header(const std::string& path, std::string& why) {
  // Regular files only: a FIFO, a device or a directory named *.json is no record.
  struct stat st {};
  std::optional<std::string> text;
  if (::stat(path.c_str(), &st) != 0)
    why = std::strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else
    // The header is the first line: 64 KiB hold it unless the reason is longer.
    text = core::read_file_head(path, kHeadBytes);
  std::optional<Header> h;
  if (text) h = parse_header(*text, &why);
  // Only a header cut by the head's end is read again whole: a file that is already wrong in
  // its first 64 KiB (a 1 GB sparse file of zeros) costs 64 KiB, not its size.
  if (!h && text && text->size() == kHeadBytes && why.rfind("truncated at byte ", 0) == 0) {
    text = read_whole(path, &why);
    if (text) h = parse_header(*text, &why);
  }
  if (!text && why.empty()) why = std::strerror(errno);
  return h;
}

// Pass 1: every file's header, grouped by run; the unreadable ones in `broken` ("NAME: why").
Runs read_headers(const std::string& dir, const std::vector<std::string>& names,
                  std::vector<std::string>& broken) {
  Runs runs;
  for (const auto& name : names) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    std::string why;
    const std::optional<Header> h = read_header(path, why);
    if (!h) {
      broken.push_back(name + ": " + why);
      continue;
    }
    runs[{h->run_id, h->attempt}].push_back({path, name, *h});
  }
  return runs;
}

// The key of the newest dump among the runs named `run_id` (any when empty) and, when given, of
// that attempt; nullptr when none matches.
const RunKey* newest(const Runs& runs, const std::string& run_id, std::optional<int> attempt) {
  const RunKey* chosen = nullptr;
  int64_t newest_us = INT64_MIN;
  for (const auto& [key, files] : runs) {
    if ((!run_id.empty() && key.first != run_id) || (attempt && key.second != *attempt)) continue;
    for (const auto& c : files)
      if (chosen == nullptr || c.header.dumped_at_us > newest_us) {
        newest_us = c.header.dumped_at_us;
        chosen = &key;
      }
  }
  return chosen;
}

// What exists, for an error that refuses a selection: "0, 1" (the attempts of one run, the first
// 20) or "a (attempts 0, 1), b (attempt 0)" (every run, the first 10).
std::string attempts_of(const Runs& runs, const std::string& run_id) {
  constexpr size_t kListed = 20;
  std::string out;
  size_t n = 0;
  for (const auto& key : runs)
    if (key.first.first == run_id && n++ < kListed)
      out += (out.empty() ? "" : ", ") + std::to_string(key.first.second);
  if (n > kListed) out += " and " + std::to_string(n - kListed) + " more";
  return out;
}
std::string runs_list(const Runs& runs) {
  constexpr size_t kListed = 10;
  std::vector<std::string> ids;
  for (const auto& key : runs)
    if (ids.empty() || ids.back() != key.first.first) ids.push_back(key.first.first);
  std::string out;
  for (size_t i = 0; i < ids.size() && i < kListed; ++i) {
    const std::string attempts = attempts_of(runs, ids[i]);
    out += (i ? ", '" : "'") + excerpt(ids[i], 64) + "'" +
           (attempts.find(',') == std::string::npos ? " (attempt " : " (attempts ") + attempts +
           ")";
  }
  if (ids.size() > kListed) out += " and " + std::to_string(ids.size() - kListed) + " more";
  return out;
}

// The run --run names, or the newest dump's; its attempt --attempt names, or its newest dump's.
// nullptr when DIR holds no record; throws for a run or an attempt that is not there.
const RunKey* choose_run(const Runs& runs, const TraceOptions& options) {
  const std::string in_dir = " in '" + excerpt(options.dir) + "'";
  const RunKey* run = newest(runs, options.run_id, std::nullopt);
  if (run == nullptr && !runs.empty())
    throw core::Error::bad_env(
        "--run", options.run_id,
        "no flight record of that run" + in_dir + "; runs there: " + runs_list(runs));
  if (options.attempt.empty()) return run;
  const std::optional<uint64_t> n = core::parse_uint(options.attempt, INT_MAX);
  const std::string exist = run == nullptr ? in_dir + " (no flight record there)"
                                           : " of run '" + excerpt(run->first, 64) + "'" + in_dir +
                                                 ": " + attempts_of(runs, run->first);
  if (!n)
    throw core::Error::bad_env("--attempt", options.attempt,
                               "expected one of the attempts" + exist);
  if (run == nullptr) return nullptr;
  const RunKey* chosen = newest(runs, run->first, static_cast<int>(*n));
  if (chosen == nullptr)
    throw core::Error::bad_env("--attempt", options.attempt,
                               "no such attempt; the attempts" + exist);
  return chosen;
}

// No run to read: says why on `err` and returns kTraceNoInput.
int no_run(const TraceOptions& options, const std::vector<std::string>& broken, std::ostream& err) {
  const std::string& dir = options.dir;
  for (size_t i = 0; i < broken.size() && i < kSkippedListed; ++i)
    err << "dtlaunch trace: skipped " << excerpt(broken[i], 300) << "\n";
  if (broken.size() > kSkippedListed)
    err << "dtlaunch trace: ... and " << broken.size() - kSkippedListed << " more skipped files\n";
  err << "dtlaunch trace: " << excerpt(dir)
      << (broken.empty() ? ": no flight record (*.json) in it; set DTLAUNCH_DDP_TRACE_DIR for the "
                           "job, and dump with kill -USR2 or at an error"
                         : ": no readable flight record in it")
      << "\n";
  return kTraceNoInput;
}

// Pass 2: each rank's newest file of the chosen run into the merger; `used` gets those read.
Findings merge_run(const std::string& dir, const Runs& runs, const RunKey& chosen,
                  const std::vector<std::string>& broken, std::vector<const Candidate*>& used) {
  const std::vector<Candidate>& files = runs.at(chosen);
  int world = 0;
  for (const auto& c : files) world = std::max(world, c.header.world_size);
  std::map<int, const Candidate*> per_rank;
  for (const auto& c : files) {
    auto& slot = per_rank[c.header.rank];
    if (slot == nullptr || c.header.dumped_at_us > slot->header.dumped_at_us) slot = &c;
  }
  Merger merger(chosen.first, chosen.second, world);
  for (const auto& b : broken) merger.skip(b.substr(0, b.find(": ")), b.substr(b.find(": ") + 2));
  for (const auto& [key, other] : runs)
    if (key != chosen)
      merger.other_run(key.first + " attempt " + std::to_string(key.second) + " (" +
                       std::to_string(other.size()) + " files; dtlaunch trace " + shell_word(dir) +
                       " --run " + shell_word(key.first) + " --attempt " +
                       std::to_string(key.second) + ")");
  for (const auto& [rank, c] : per_rank) {
    std::string why;
    auto text = read_whole(c->path, &why);
    std::optional<RankFile> f;
    if (text) f = parse_rank_file(*text, &why);
    if (!f) {
      merger.skip(c->name, why);
      continue;
    }
    merger.add(c->name, *f);
    used.push_back(c);
  }
  return merger.finish();
}

// Pass 3, for the pictures: the Chrome trace on `out`, the HTML timeline to --html.
void draw(const TraceOptions& options, const Findings& v, const std::string& text,
          const std::vector<const Candidate*>& used, std::ostream& out) {
  const bool chrome = options.format == TraceFormat::kChrome;
  Timeline timeline(v);
  const int64_t t0 = time_origin_us(v);
  if (chrome) out << chrome_begin(v);
  for (const Candidate* c : used) {
    std::string why;
    auto data = read_whole(c->path, &why);
    std::optional<RankFile> f;
    if (data) f = parse_rank_file(*data, &why);
    if (!f) continue;  // changed since pass 2: it is in the verdict, not in the picture
    if (chrome) out << chrome_rank(v, *f, t0, false);
    if (!options.html.empty()) timeline.add(*f);
  }
  if (chrome) out << chrome_end(v);
  if (!options.html.empty()) write_output_file(options.html, timeline.html(text));
}

}  // namespace

int run_trace(const TraceOptions& options, std::ostream& out, std::ostream& err) {
  const std::string& dir = options.dir;
  // Pass 1: headers. The newest dump decides the run and attempt, unless --run, --attempt name
  // them.
  std::vector<std::string> broken;
  const Runs runs = read_headers(dir, record_names(dir), broken);
  const RunKey* chosen = choose_run(runs, options);
  if (chosen == nullptr) return no_run(options, broken, err);

  std::vector<const Candidate*> used;
  const Findings v = merge_run(dir, runs, *chosen, broken, used);
  bool any = false;
  for (const auto& r : v.ranks) any = any || r.present;
  const std::string text = render_text(v, dir);
  if (!any) {
    err << text;
    err << "dtlaunch trace: " << excerpt(dir) << ": no readable flight record in it\n";
    return kTraceNoInput;
  }
  if (options.format == TraceFormat::kChrome || !options.html.empty())
    draw(options, v, text, used, out);
  if (options.format == TraceFormat::kText) out << text;
  if (options.format == TraceFormat::kJson) out << render_json(v, dir);
  if (options.format == TraceFormat::kChrome) err << text;
  return v.healthy() ? 0 : kTraceProblem;
}

}  // namespace dtlaunch::trace
