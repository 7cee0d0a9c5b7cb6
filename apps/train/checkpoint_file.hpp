// The file around a checkpoint, without Torch: a one-line header carrying the payload's size and
// CRC-32, then the payload (LibTorch's zip archive, whose own CRCs LibTorch does not check). A
// reader verifies both before it parses a byte, so a flipped bit is reported as corruption, not
// trained on or misread as another run's shape. The writer replaces the file atomically and
// never follows a symbolic link or writes into a FIFO or a device. Policy: docs/example.md.
#pragma once

#include <cstddef>
#include <string>

namespace dtlaunch::train {

// The header line a sealed checkpoint starts with: "dtlaunch-train checkpoint 2 size N crc32 X".
std::string seal_checkpoint(const std::string& payload);

// The payload of `bytes`, read from `path`, after checking the header, the size and the CRC-32.
// Throws Error (exit status 2) naming the path: "... is corrupt (...)" or "... not a
// dtlaunch-train checkpoint (...)".
std::string unseal_checkpoint(const std::string& path, const std::string& bytes);

// Throws Error (exit status 2) when `path` exists and is not a regular file: a symbolic link, a
// FIFO, a device, a socket or a directory. What a checkpoint path may name (docs/example.md).
void refuse_unless_regular_or_absent(const std::string& what, const std::string& path);

// The whole file at `path`, opened without following a symbolic link and without blocking (a
// FIFO fails instead of hanging the rank), at most max_bytes. Throws Error: status 2 for a path
// that is not a regular file or too large, 1 for a failed system call.
std::string read_regular_file(const std::string& path, std::size_t max_bytes);

// Writes `bytes` to `path` through a temporary file in the same directory, flushed to disk and
// renamed over `path`. On failure the temporary file is removed, `path` is left as it was, and
// Error (status 1) says "cannot write checkpoint PATH: <strerror>"; a target that is not a regular
// file is refused with status 2 before anything is written.
// With keep_previous, the file `path` held until now stays as previous_checkpoint(path): a hard
// link made once the new bytes are safely on disk, just before the rename (a copy where the file
// system has no hard links), so there is no moment without a checkpoint at `path`.
void replace_file(const std::string& path, const std::string& bytes, bool keep_previous = false);

// Where the checkpoint before `path`'s newest is kept: PATH.prev.
std::string previous_checkpoint(const std::string& path);

}  // namespace dtlaunch::train
