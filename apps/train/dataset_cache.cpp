#include "dataset_cache.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "error.hpp"

namespace dtlaunch::train {
namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 4> kFiles = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

// The gzip trailer ends with ISIZE, the uncompressed size modulo 2^32 (RFC 1952); the largest
// file here is 47 MB, so it is the exact size.
std::uint64_t gzip_uncompressed_size(const fs::path& gz) {
  std::ifstream in(gz, std::ios::binary);
  in.seekg(-4, std::ios::end);
  std::array<unsigned char, 4> b{};
  in.read(reinterpret_cast<char*>(b.data()), b.size());
  if (!in) throw Error(ExitCode::kBadInput, gz.string() + ": not a complete gzip file");
  return std::uint64_t{b[0]} | std::uint64_t{b[1]} << 8 | std::uint64_t{b[2]} << 16 |
         std::uint64_t{b[3]} << 24;
}

// Closes and, unless released, removes the temporary file on every exit path.
class TempFile {
 public:
  explicit TempFile(const fs::path& final_path) : path_(final_path.string() + ".XXXXXX") {
    fd_ = ::mkstemp(path_.data());
    if (fd_ < 0)
      throw Error::system("cannot create a file in " + final_path.parent_path().string(), errno);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(path_.c_str());
  }
  void write_all(const char* data, std::size_t size) {
    while (size > 0) {
      ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error::system("cannot write " + path_, errno);
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  void commit_as(const fs::path& final_path) {
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw Error::system("cannot write " + path_, errno);
    }
    fd_ = -1;
    if (::rename(path_.c_str(), final_path.c_str()) != 0)
      throw Error::system("cannot rename " + path_ + " to " + final_path.string(), errno);
    released_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool released_ = false;
};

void gunzip(const fs::path& gz, const fs::path& target, std::uint64_t expected_size) {
  gzFile in = ::gzopen(gz.c_str(), "rb");
  if (in == nullptr) throw Error::system("cannot open " + gz.string(), errno);
  struct Closer {
    gzFile f;
    ~Closer() { ::gzclose(f); }
  } closer{in};

  TempFile out(target);
  std::vector<char> buf(1 << 20);
  std::uint64_t total = 0;
  for (;;) {
    int n = ::gzread(in, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int zerr = 0;
      const char* msg = ::gzerror(in, &zerr);
      throw Error(ExitCode::kBadInput, gz.string() + ": corrupt gzip data: " + msg);
    }
    if (n == 0) break;
    out.write_all(buf.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  if (total != expected_size)
    throw Error(ExitCode::kBadInput, gz.string() + ": truncated gzip data (" +
                                         std::to_string(total) + " of " +
                                         std::to_string(expected_size) + " bytes)");
  out.commit_as(target);
}

bool all_plain_files_in(const fs::path& dir) {
  for (const char* name : kFiles)
    if (!fs::is_regular_file(dir / name)) return false;
  return true;
}

Error not_found(const fs::path& file, const std::string& why) {
  return Error(ExitCode::kBadInput,
               "Fashion-MNIST not found: " + file.string() + " " + why +
                   " (install the Debian package dataset-fashion-mnist, or pass --data-dir DIR "
                   "holding the IDX files)");
}

}  // namespace

fs::path default_cache_dir(const std::string& xdg_cache_home) {
  if (!xdg_cache_home.empty()) return fs::path(xdg_cache_home) / "dtlaunch" / "fashion-mnist";
  return fs::path("/tmp") / ("dtlaunch-fashion-mnist-" + std::to_string(::getuid()));
}

void check_fashion_mnist(const fs::path& data_dir) {
  const bool plain = all_plain_files_in(data_dir);
  for (const char* name : kFiles) {
    const fs::path file = data_dir / (plain ? std::string(name) : std::string(name) + ".gz");
    if (!fs::is_regular_file(file)) throw not_found(file, "does not exist");
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw not_found(file, std::string("cannot be read: ") + std::strerror(errno));
    ::close(fd);
  }
}

fs::path prepare_fashion_mnist(const fs::path& data_dir, const fs::path& cache_dir) {
  if (all_plain_files_in(data_dir)) return data_dir;

  for (const char* name : kFiles) {
    fs::path gz = data_dir / (std::string(name) + ".gz");
    if (!fs::is_regular_file(gz)) throw not_found(gz, "does not exist");
  }

  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec)
    throw Error(ExitCode::kFailure,
                "cannot create cache directory " + cache_dir.string() + ": " + ec.message());

  for (const char* name : kFiles) {
    fs::path gz = data_dir / (std::string(name) + ".gz");
    fs::path target = cache_dir / name;
    std::uint64_t size = gzip_uncompressed_size(gz);
    std::error_code size_ec;
    if (fs::file_size(target, size_ec) == size && !size_ec) continue;
    gunzip(gz, target, size);
  }
  return cache_dir;
}

}  // namespace dtlaunch::train
