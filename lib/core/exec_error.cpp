#include "core/exec_error.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "core/text.hpp"

namespace dtlaunch::core {

namespace {

// The interpreter a "#!" first line names, if the file has one.
std::optional<std::string> hashbang_interpreter(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char head[256] = {};
  file.read(head, sizeof head - 1);
  const std::string line(head, static_cast<std::size_t>(file.gcount()));
  if (line.rfind("#!", 0) != 0) return std::nullopt;
  const std::size_t start = line.find_first_not_of(" \t", 2);
  if (start == std::string::npos) return std::string();
  const std::size_t end = line.find_first_of(" \t\r\n", start);
  return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace

Error exec_error(const std::string& program_path, int errno_value) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(program_path, ec);
  // ENOTDIR: a component of the path is a file, so the program is not there either (as the
  // launcher's own PATH lookup reports it).
  if ((errno_value == ENOENT || errno_value == ENOTDIR) && !exists)
    return Error(ExitCode::kNotFound, excerpt(program_path, 300) + ": no such file");
  std::string why = std::strerror(errno_value);
  // The kernel reports a missing or unusable #! interpreter as the program's own ENOENT or
  // EACCES; a shell names the interpreter, and so do we.
  // EACCES counts only for a program we may execute: otherwise it is the program's own mode.
  if (errno_value == ENOENT ||
      (errno_value == EACCES && ::access(program_path.c_str(), X_OK) == 0)) {
    if (const auto interpreter = hashbang_interpreter(program_path)) {
      why = excerpt(*interpreter, 300) + ": bad interpreter: " + why;
    } else if (errno_value == ENOENT) {
      why = "required file not found (its ELF interpreter, the dynamic loader, is missing)";
    }
  }
  // The paths are quoted as the launcher's own checks quote them (core/text.hpp).
  return Error(ExitCode::kNotExecutable, excerpt(program_path, 300) + ": cannot execute: " + why);
}

}  // namespace dtlaunch::core
