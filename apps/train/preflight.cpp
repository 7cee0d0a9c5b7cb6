#include "preflight.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "checkpoint_file.hpp"
#include "error.hpp"

namespace dtlaunch::train {
namespace fs = std::filesystem;

void check_checkpoint_path(const std::string& path) {
  const std::string option = "--checkpoint '" + path + "': ";
  auto bad = [&](const std::string& why) { return Error(ExitCode::kBadInput, option + why); };
  if (path.empty()) throw bad("expected the path of a file");
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw bad("names a directory; expected the path of a file");
  std::error_code ec;
  if (fs::is_directory(p, ec)) throw bad("is a directory; expected the path of a file");
  // A FIFO would block the rank in open() at --resume, a device or a symbolic link would be
  // replaced by the first save: refused here, before the rendezvous, on every rank.
  refuse_unless_regular_or_absent("--checkpoint", path);

  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  // Which part of the directory is missing or is not a directory, as the user wrote it.
  fs::path prefix;
  for (const fs::path& part : dir) {
    prefix /= part;
    const auto st = fs::status(prefix, ec);
    if (!fs::exists(st)) throw bad("the directory '" + prefix.string() + "' does not exist");
    if (!fs::is_directory(st)) throw bad("'" + prefix.string() + "' is not a directory");
  }

  std::string probe = (dir / ("." + name + ".probe.XXXXXX")).string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) throw bad("cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace dtlaunch::train
