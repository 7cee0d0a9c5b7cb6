// dtlaunch-train's own error: a one-line message and the exit status the program ends with
// (2: bad input, 1: anything else). The example uses only the installed dtlaunch/ddp.h, whose
// dtlaunch::ddp::Error carries a kind instead; main.cpp maps both to a status.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace dtlaunch::train {

enum class ExitCode : int { kOk = 0, kFailure = 1, kBadInput = 2 };

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int exit_status() const noexcept { return static_cast<int>(code_); }

  static Error usage(const std::string& what) { return Error(ExitCode::kBadInput, what); }
  static Error system(const std::string& what, int errno_value) {
    return Error(ExitCode::kFailure, what + ": " + std::strerror(errno_value));
  }

 private:
  ExitCode code_;
};

}  // namespace dtlaunch::train
