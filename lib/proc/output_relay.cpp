#include "proc/output_relay.hpp"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/error.hpp"

namespace dtlaunch {

namespace {

std::string errno_text(int e) {
  return std::error_code(e, std::generic_category()).message();
}

// "stdout (/dev/full)": what the descriptor is open on, for the warning.
std::string describe_console(int fd) {
  const std::string name = fd == STDOUT_FILENO ? "stdout" : "stderr";
  char target[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
  if (n <= 0) return name;
  return name + " (" + std::string(target, static_cast<std::size_t>(n)) + ")";
}

}  // namespace

void Console::write(int fd, std::string_view text) {
  if (fd < 0 || fd > 2 || closed_[fd]) return;
  if (write_all(fd, text)) return;
  const int e = errno;
  closed_[fd] = true;
  if (e == EPIPE || fd == STDERR_FILENO) return;  // nowhere left to say it, for stderr
  warn("dtlaunch: cannot write the workers' output to " + describe_console(fd) + ": " +
       errno_text(e) + "; dropping it from now on, the workers go on\n");
}

LogFiles::LogFiles(std::optional<std::string> dir, int fd_base)
    : dir_(std::move(dir)), fd_base_(fd_base) {
  if (!dir_) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir_, ec);
  if (ec) throw Error(ExitCode::kBadInput, "log directory '" + *dir_ + "': " + ec.message());
}

LogFile* LogFiles::for_rank(std::uint32_t rank) {
  if (!dir_) return nullptr;
  auto it = files_.find(rank);
  if (it != files_.end()) return &it->second;
  const std::string path = *dir_ + "/rank-" + std::to_string(rank) + ".log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ExitCode::kBadInput, "log file '" + path + "': " + errno_text(errno));
  LogFile& file = files_[rank];
  file.fd = move_at_or_above(UniqueFd(fd), fd_base_);
  file.path = path;
  return &file;
}

void StreamRelay::feed(std::string_view data) {
  splitter_.feed(data, [this](std::string_view line) { add_line(line); });
  flush();
}

void StreamRelay::finish() {
  splitter_.finish([this](std::string_view line) { add_line(line); });
  flush();
}

void StreamRelay::add_line(std::string_view line) {
  tail_.push(line);
  if (console_batch_.size() + prefix_.size() + line.size() + 1 > PIPE_BUF) {
    console_.write(console_fd_, console_batch_);
    console_batch_.clear();
  }
  console_batch_.append(prefix_).append(line) += '\n';
  if (log_ != nullptr && !log_->failed) log_batch_.append(line) += '\n';
}

void StreamRelay::flush() {
  if (!console_batch_.empty()) console_.write(console_fd_, console_batch_);
  console_batch_.clear();
  // A log file that cannot be written (disk full) must not stop the run, and the console still
  // has the lines; the log stops there rather than going on with a hole in it.
  if (!log_batch_.empty() && !write_all(log_->fd.get(), log_batch_)) {
    log_->failed = true;
    console_.warn("dtlaunch: cannot write '" + log_->path + "': " + errno_text(errno) +
                  "; this log stops here, the workers go on\n");
  }
  log_batch_.clear();
}

}  // namespace dtlaunch
