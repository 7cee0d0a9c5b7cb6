#pragma once

#include <cstddef>

namespace dtlaunch::proc {

// Hands back the pages of this process's code that are resident now: every private, read-only,
// executable file mapping without modified pages. A long-lived, mostly idle parent (dtlaunch
// --watch) calls it once its start-up has run: what it executes later is faulted back in from
// the page cache, without I/O. Returns the bytes of mappings released (0 where /proc is
// unreadable).
std::size_t release_code_pages();

}  // namespace dtlaunch::proc
