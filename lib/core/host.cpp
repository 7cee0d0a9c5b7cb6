#include "core/host.hpp"

#include <unistd.h>

namespace dtlaunch::core {

std::string host_name(std::string_view unknown) {
  char buf[256] = {};  // HOST_NAME_MAX is 64 on Linux; the last byte stays the terminator
  if (::gethostname(buf, sizeof buf - 1) != 0) return std::string(unknown);
  return buf;
}

std::string short_host_name(std::string_view unknown) {
  const std::string name = host_name(unknown);
  return name.substr(0, name.find('.'));
}

}  // namespace dtlaunch::core
