#include "proc/output_relay.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "core/error.hpp"

namespace dtlaunch::proc {

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

void Console::set_up(int fd) {
  Stream& s = streams_[fd];
  s.open = true;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  if (S_ISSOCK(st.st_mode)) {
    s.socket = true;
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    // O_NONBLOCK on an open file description of our own: set on the inherited one, it would
    // change it for the shell and every other process that shares it.
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    s.reopened = UniqueFd(::open(link.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  }
}

ssize_t Console::try_write(int fd, std::string_view data) {
  const Stream& s = streams_[fd];
  for (;;) {
    ssize_t n;
    if (s.reopened) {
      n = ::write(s.reopened.get(), data.data(), data.size());
    } else if (s.socket) {
      n = ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      // A pipe we could not reopen: writable means room for PIPE_BUF bytes, which is all we
      // write at once. Regular files are always writable.
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 0) == 0) return 0;
      n = ::write(fd, data.data(), data.size());
    }
    if (n >= 0) return n;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno != EINTR) return -1;
  }
}

void Console::write(int fd, std::string_view text) {
  if (fd < 1 || fd > 2 || text.empty()) return;
  Stream& s = streams_[fd];
  if (!s.open) set_up(fd);
  if (s.closed) return;
  if (s.pending.empty()) {
    const ssize_t n = try_write(fd, text);
    if (n < 0) return fail(fd, errno);
    text.remove_prefix(static_cast<std::size_t>(n));
    if (text.empty()) return;
  }
  if (s.pending_bytes + text.size() > max_pending_) return note_dropped(fd, text);
  s.pending.emplace_back(text);
  s.pending_bytes += text.size();
}

int Console::waiting_fd(int fd) const {
  const Stream& s = streams_[fd];
  if (s.closed || s.pending.empty()) return -1;
  return s.reopened ? s.reopened.get() : fd;
}

void Console::flush(int fd) {
  Stream& s = streams_[fd];
  while (!s.closed && !s.pending.empty()) {
    const std::string& front = s.pending.front();
    const ssize_t n = try_write(fd, std::string_view(front).substr(s.front_written));
    if (n < 0) return fail(fd, errno);
    if (n == 0) return;
    s.front_written += static_cast<std::size_t>(n);
    if (s.front_written < front.size()) return;
    s.pending_bytes -= front.size();
    s.pending.pop_front();
    s.front_written = 0;
  }
  if (s.closed || s.dropped_lines == 0) return;
  const std::string lines = std::to_string(std::exchange(s.dropped_lines, 0));
  const std::string bytes = std::to_string(std::exchange(s.dropped_bytes, 0));
  warn("dtlaunch: " + std::string(fd == 1 ? "stdout" : "stderr") + " is read again; " + lines +
       " lines (" + bytes + " bytes) of the workers' output were dropped meanwhile\n");
}

bool Console::drain(int stop_fd) {
  for (;;) {
    std::vector<pollfd> fds{{stop_fd, POLLIN, 0}};
    for (int fd : {1, 2})
      if (const int w = waiting_fd(fd); w >= 0) fds.push_back({w, POLLOUT, 0});
    if (fds.size() == 1) return true;
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return false;
    if (fds[0].revents != 0) return false;
    flush(1);
    flush(2);
  }
}

void Console::discard(std::string_view why) {
  std::size_t bytes = 0;
  for (int fd : {1, 2}) {
    Stream& s = streams_[fd];
    bytes += s.pending_bytes - s.front_written;
    s.pending.clear();
    s.pending_bytes = s.front_written = 0;
    s.dropped_lines = s.dropped_bytes = 0;
  }
  if (bytes == 0) return;
  warn("dtlaunch: " + std::string(why) + ": dropped the " + std::to_string(bytes) +
       " bytes of output that were still waiting for a reader\n");
}

void Console::note_dropped(int fd, std::string_view text) {
  Stream& s = streams_[fd];
  const bool first = s.dropped_lines == 0;
  s.dropped_bytes += text.size();
  s.dropped_lines += std::max<std::size_t>(1, std::count(text.begin(), text.end(), '\n'));
  if (!first) return;
  warn("dtlaunch: " + std::string(fd == 1 ? "stdout" : "stderr") + " is not being read (" +
       std::to_string(s.pending_bytes) +
       " bytes waiting): dropping the workers' output until it is; the workers go on\n");
}

void Console::fail(int fd, int error) {
  Stream& s = streams_[fd];
  s.closed = true;
  s.pending.clear();
  s.pending_bytes = s.front_written = 0;
  if (error == EPIPE || fd == STDERR_FILENO) return;  // nowhere left to say it, for stderr
  warn("dtlaunch: cannot write the workers' output to " + describe_console(fd) + ": " +
       errno_text(error) + "; dropping it from now on, the workers go on\n");
}

LogFiles::LogFiles(std::optional<std::string> dir, int fd_base)
    : dir_(std::move(dir)), fd_base_(fd_base) {
  if (!dir_) return;
  std::error_code ec;
  std::filesystem::create_directories(*dir_, ec);
  if (ec)
    throw core::Error(core::ExitCode::kBadInput, "log directory '" + *dir_ + "': " + ec.message());
}

LogFile* LogFiles::for_rank(std::uint32_t rank) {
  if (!dir_) return nullptr;
  auto it = files_.find(rank);
  if (it != files_.end()) return &it->second;
  const std::string path = *dir_ + "/rank-" + std::to_string(rank) + ".log";
  // What is at the path must be a regular file dtlaunch may truncate, or nothing: a FIFO would
  // block open() (O_NONBLOCK), a device or a link's target is not ours to replace (O_NOFOLLOW;
  // links above the last component are followed). Truncated only once that is known.
  UniqueFd fd(::open(path.c_str(),
                     O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
  struct stat st {};
  const int e = !fd ? errno : ::fstat(fd.get(), &st) != 0 ? errno : 0;
  if (e == ELOOP)
    throw core::Error(core::ExitCode::kBadInput,
                      "log file '" + path +
                          "' is a symbolic link: dtlaunch follows none for a file "
                          "it creates; remove it or choose another --log-dir");
  if (e == ENXIO || (e == 0 && !S_ISREG(st.st_mode)))
    throw core::Error(core::ExitCode::kBadInput,
                      "log file '" + path +
                          "' is not a regular file (a FIFO, a device, a socket): "
                          "remove it or choose another --log-dir");
  if (e != 0)
    throw core::Error(core::ExitCode::kBadInput, "log file '" + path + "': " + errno_text(e));
  if (::ftruncate(fd.get(), 0) != 0)
    throw core::Error(core::ExitCode::kBadInput, "log file '" + path + "': " + errno_text(errno));
  LogFile& file = files_[rank];
  file.fd = move_at_or_above(std::move(fd), fd_base_);
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

}  // namespace dtlaunch::proc
