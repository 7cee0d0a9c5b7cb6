#include "record_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/fd.hpp"
#include "core/names.hpp"

namespace dtlaunch::ddp::detail {
namespace {

constexpr core::Named<DumpKind> kDumpKindNames[] = {{DumpKind::kError, "error"},
                                                    {DumpKind::kRequest, "request"},
                                                    {DumpKind::kSignal, "signal"},
                                                    {DumpKind::kExit, "exit"}};

// Writes the record to fd, in pieces of about 64 KB; false with errno set on failure (ENOSPC on
// a full filesystem).
bool write_record(int fd, const flight::Header& head,
                  const std::vector<flight::Collective>& entries) {
  std::string out = flight::record_head(head);
  for (size_t i = 0; i < entries.size(); ++i) {
    out += flight::record_entry(entries[i], i == 0);
    if (out.size() >= (1u << 16)) {
      if (!core::write_all(fd, out)) return false;
      out.clear();
    }
  }
  out += flight::kRecordEnd;
  return core::write_all(fd, out);
}

// Gives the written file `tmp` its name and returns it, or "" with `why` set (tmp removed either
// way). Other dumps replace `path`; an error's file is never replaced: link() refuses an
// existing name, so a second error of the same rank and run goes to STEM.error-2.json, -3, ...
std::string publish(const std::string& tmp, std::string path, const std::string& stem,
                    DumpKind kind, std::string& why) {
  int err = 0;
  if (kind != DumpKind::kError) {
    if (::rename(tmp.c_str(), path.c_str()) == 0) return path;
    err = errno;
  } else {
    for (int n = 1; n <= 100; ++n) {
      if (n > 1) path = stem + ".error-" + std::to_string(n) + ".json";
      if (::link(tmp.c_str(), path.c_str()) == 0) {
        ::unlink(tmp.c_str());
        return path;
      }
      err = errno;
      if (err != EEXIST) break;
    }
  }
  ::unlink(tmp.c_str());
  why = err == EEXIST ? "100 error files of this rank are there already" : std::strerror(err);
  return "";
}

}  // namespace

const char* kind_name(DumpKind kind) {
  return core::name_of(kind, kDumpKindNames, "request").data();
}

std::string record_stem(const std::string& dir, const std::string& run_id, int attempt, int rank) {
  return dir + "/" + run_id + ".a" + std::to_string(attempt) + ".rank-" + std::to_string(rank);
}

std::string record_path(const std::string& stem, DumpKind kind) {
  return stem + (kind == DumpKind::kError ? ".error.json" : ".json");
}

std::string write_record_file(const std::string& dir, const std::string& stem, DumpKind kind,
                              const flight::Header& head,
                              const std::vector<flight::Collective>& entries, std::string& why) {
  const std::string path = record_path(stem, kind);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    why = "cannot create the directory: " + ec.message();
    return "";
  }
  // The team's rule for created files: refuse an existing target that is not a regular file, and
  // follow no symlink at the final component (lstat; rename and link replace or refuse a link,
  // never write through it).
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    why = "it exists and is not a regular file";
    return "";
  }
  static std::atomic<unsigned> tmp_counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(tmp_counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    why = std::strerror(errno);
    return "";
  }
  bool ok = write_record(fd, head, entries);
  const int write_errno = errno;
  if (::close(fd) != 0 && ok) ok = false;
  if (!ok) {
    ::unlink(tmp.c_str());
    why = std::strerror(write_errno != 0 ? write_errno : EIO);
    return "";
  }
  return publish(tmp, path, stem, kind, why);
}

}  // namespace dtlaunch::ddp::detail
