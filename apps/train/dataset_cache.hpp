// Debian's dataset-fashion-mnist ships the IDX files gzipped; LibTorch's MNIST reader only reads
// them plain. This unpacks them once into a cache directory that every rank of every run shares.
#pragma once

#include <filesystem>
#include <string>

namespace dtlaunch::train {

// Where Debian's dataset-fashion-mnist package puts the gzipped IDX files.
inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

// $XDG_CACHE_HOME/dtlaunch/fashion-mnist if XDG_CACHE_HOME is set, otherwise
// /tmp/dtlaunch-fashion-mnist-<uid>. The caller passes the value of XDG_CACHE_HOME (empty if
// unset) so that this stays a pure function.
std::filesystem::path default_cache_dir(const std::string& xdg_cache_home);

// Makes sure cache_dir holds the four uncompressed IDX files of data_dir and returns cache_dir.
// data_dir may hold them gzipped (train-images-idx3-ubyte.gz, ...) or already plain, in which
// case it is returned as is. Each file is written under a unique temporary name and renamed
// into place, so ranks that start together never read a half-written file; a file already in
// the cache is reused when its size matches the size recorded in the gzip trailer.
// Throws dtlaunch::train::Error (exit status 2) naming the path and the Debian package when the
// dataset is missing, and (status 1) when the cache cannot be written.
// The start-up check of every rank, before any communication: data_dir holds the four IDX files,
// plain or gzipped, and this process can read them. Throws dtlaunch::train::Error (exit status 2)
// naming the first missing or unreadable file and the Debian package.
void check_fashion_mnist(const std::filesystem::path& data_dir);

std::filesystem::path prepare_fashion_mnist(const std::filesystem::path& data_dir,
                                            const std::filesystem::path& cache_dir);

}  // namespace dtlaunch::train
