#include "proc/output_relay.hpp"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "core/error.hpp"

namespace dtlaunch {

void Console::write(int fd, std::string_view text) {
  if (fd < 0 || fd > 2 || closed_[fd]) return;
  if (!write_all(fd, text)) closed_[fd] = true;
}

LogFiles::LogFiles(std::optional<std::string> dir) : dir_(std::move(dir)) {
  if (!dir_) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir_, ec);
  if (ec) throw Error(ExitCode::kBadInput, "log directory '" + *dir_ + "': " + ec.message());
}

int LogFiles::fd_for(std::uint32_t rank) {
  if (!dir_) return -1;
  auto it = files_.find(rank);
  if (it != files_.end()) return it->second.get();
  const std::string path = *dir_ + "/rank-" + std::to_string(rank) + ".log";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(ExitCode::kBadInput, "log file '" + path + "': " +
                                         std::error_code(errno, std::generic_category()).message());
  }
  files_.emplace(rank, UniqueFd(fd));
  return fd;
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
  if (log_fd_ >= 0) log_batch_.append(line) += '\n';
}

void StreamRelay::flush() {
  if (!console_batch_.empty()) console_.write(console_fd_, console_batch_);
  console_batch_.clear();
  // A log file that cannot be written (disk full) must not stop the run; the console has it.
  if (!log_batch_.empty()) write_all(log_fd_, log_batch_);
  log_batch_.clear();
}

}  // namespace dtlaunch
