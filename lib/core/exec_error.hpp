// What a failed execve means, worded and numbered once for both modes: the Slurm path
// (proc/exec.cpp, which replaces dtlaunch) and local mode (proc/spawn.cpp, a worker's exec).
// The same failure must give the same status and line whichever mode the user ran.
#pragma once

#include <string>

#include "core/error.hpp"

namespace dtlaunch::core {

// The error for execve(program_path, ...) failing with errno_value, as a shell reports it:
//   127 "PATH: no such file"                       the program itself does not exist
//   126 "PATH: cannot execute: INTERP: bad interpreter: No such file or directory"
//                                                  its #! interpreter does not exist (ENOENT
//                                                  for a file that is there)
//   126 "PATH: cannot execute: Argument list too long", "...: Permission denied", etc.
//                                                  anything else (E2BIG, EACCES, ENOEXEC, ...)
// Reads the file's first line to name a #! interpreter; nothing else.
Error exec_error(const std::string& program_path, int errno_value);

}  // namespace dtlaunch::core
