#include "core/error.hpp"

#include <cstring>

#include "core/text.hpp"

namespace dtlaunch::core {

Error Error::usage(std::string_view what) {
  return Error(ExitCode::kBadInput, std::string(what));
}

Error Error::bad_env(std::string_view name, std::string_view value, std::string_view why) {
  std::string msg;
  msg.append(name).append("='").append(excerpt(value)).append("': ").append(why);
  return Error(ExitCode::kBadInput, std::move(msg));
}

Error Error::missing_env(std::string_view name, std::string_view why) {
  std::string msg;
  msg.append(name).append(" is not set");
  if (!why.empty()) msg.append(": ").append(why);
  return Error(ExitCode::kBadInput, std::move(msg));
}

Error Error::inconsistent(std::string_view what) {
  return Error(ExitCode::kBadInput, "inconsistent Slurm environment: " + std::string(what));
}

Error Error::system(std::string_view what, int errno_value) {
  std::string msg(what);
  msg.append(": ").append(std::strerror(errno_value));
  return Error(ExitCode::kFailure, std::move(msg));
}

}  // namespace dtlaunch::core
