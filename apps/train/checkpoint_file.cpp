#include "checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "error.hpp"

namespace dtlaunch::train {
namespace {

const std::string kMagic = "dtlaunch-train checkpoint ";
constexpr int kFileVersion = 2;

std::uint32_t crc_of(const char* data, std::size_t size) {
  return static_cast<std::uint32_t>(
      ::crc32_z(::crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), size));
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes a descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string seal_checkpoint(const std::string& payload) {
  char header[96];
  std::snprintf(header, sizeof header, "%s%d size %zu crc32 %08" PRIx32 "\n", kMagic.c_str(),
                kFileVersion, payload.size(), crc_of(payload.data(), payload.size()));
  return header + payload;
}

std::string unseal_checkpoint(const std::string& path, const std::string& bytes) {
  auto not_ours = [&](const std::string& why) {
    return Error(ExitCode::kBadInput, path + ": not a dtlaunch-train checkpoint (" + why + ")");
  };
  auto corrupt = [&](const std::string& why) {
    return Error(ExitCode::kBadInput, path + ": the checkpoint is corrupt (" + why +
                                          "); restore a good copy, or remove it to start afresh");
  };
  if (bytes.rfind("PK\x03\x04", 0) == 0)
    throw not_ours(
        "format 1, written by an older dtlaunch-train without a checksum: it cannot "
        "be verified");
  if (bytes.rfind(kMagic, 0) != 0) throw not_ours("no checkpoint header");
  const auto eol = bytes.find('\n');
  if (eol == std::string::npos || eol > 120) throw corrupt("the header line is cut or garbled");
  int version = 0;
  unsigned long long size = 0;
  unsigned crc = 0;
  int used = 0;
  const std::string header = bytes.substr(kMagic.size(), eol - kMagic.size());
  if (std::sscanf(header.c_str(), "%d size %llu crc32 %8x%n", &version, &size, &crc, &used) != 3 ||
      static_cast<std::size_t>(used) != header.size())
    throw corrupt("the header line is garbled");
  if (version != kFileVersion)
    throw not_ours("format " + std::to_string(version) + ", expected " +
                   std::to_string(kFileVersion));
  const std::size_t have = bytes.size() - eol - 1;
  if (size != have)
    throw corrupt("the header says " + std::to_string(size) + " bytes follow it, the file has " +
                  std::to_string(have));
  const std::uint32_t actual = crc_of(bytes.data() + eol + 1, have);
  if (actual != crc) {
    char why[96];
    std::snprintf(why, sizeof why, "CRC-32 of its %zu bytes is %08" PRIx32 ", the header says %08x",
                  have, actual, crc);
    throw corrupt(why);
  }
  return bytes.substr(eol + 1);
}

void refuse_unless_regular_or_absent(const std::string& what, const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  throw Error(ExitCode::kBadInput,
              what + " '" + path + "': exists and is " + kind_of(st.st_mode) +
                  "; a checkpoint is only read from or written to a regular file (give the path "
                  "of the file itself)");
}

std::string read_regular_file(const std::string& path, std::size_t max_bytes) {
  Fd f{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) {
    const int err = errno;
    // ELOOP (a symbolic link), ENXIO (a socket, a FIFO without a writer...): say what it is.
    refuse_unless_regular_or_absent("--checkpoint", path);
    throw Error::system("cannot open checkpoint " + path, err);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw Error::system("cannot stat checkpoint " + path, errno);
  if (!S_ISREG(st.st_mode))
    throw Error(ExitCode::kBadInput,
                "--checkpoint '" + path + "': is " + kind_of(st.st_mode) + ", not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
    throw Error(ExitCode::kBadInput, path + ": not a dtlaunch-train checkpoint (" +
                                         std::to_string(st.st_size) + " bytes, more than the " +
                                         std::to_string(max_bytes) + " a checkpoint may have)");
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(f.fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error::system("cannot read checkpoint " + path, errno);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

std::string previous_checkpoint(const std::string& path) {
  return path + ".prev";
}

namespace {

// previous_checkpoint(path) becomes what `path` is now when that passes its check (nothing when
// `path` is absent; a corrupt one leaves the older previous in place: what is kept is verified).
// Checking reads the file once more, about 1 MB for this model. A failure costs only the
// fallback, never the new checkpoint: it is said and training goes on.
void keep_as_previous(const std::string& path) {
  const std::string prev = previous_checkpoint(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  try {
    unseal_checkpoint(path, read_regular_file(path, std::size_t{1} << 31));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtlaunch-train: %s: not kept as the previous checkpoint\n", e.what());
    return;
  }
  if (::unlink(prev.c_str()) != 0 && errno != ENOENT) {
    std::fprintf(stderr, "dtlaunch-train: cannot replace %s (%s): the previous checkpoint is not kept\n",
                 prev.c_str(), std::strerror(errno));
    return;
  }
  if (::link(path.c_str(), prev.c_str()) == 0) return;
  // No hard links here (some file systems): a copy, written the same careful way.
  try {
    replace_file(prev, read_regular_file(path, std::size_t{1} << 31));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtlaunch-train: the previous checkpoint is not kept: %s\n", e.what());
  }
}

}  // namespace

void replace_file(const std::string& path, const std::string& bytes, bool keep_previous) {
  refuse_unless_regular_or_absent("--checkpoint", path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  auto fail = [&](int err) {
    ::unlink(tmp.c_str());
    return Error::system("cannot write checkpoint " + path, err);
  };
  ::unlink(tmp.c_str());  // a leftover of an earlier process that had this pid
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644)};
  if (f.fd < 0)
    throw Error::system("cannot write checkpoint " + path + " (creating " + tmp + ")", errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(f.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(f.fd) != 0) throw fail(errno);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) throw fail(errno);
  if (keep_previous) keep_as_previous(path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail(errno);
  // The rename itself reaches the disk with the directory.
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

}  // namespace dtlaunch::train
