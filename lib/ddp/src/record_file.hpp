// A flight-recorder file on disk: DIR/<run>.a<attempt>.rank-<R>[.error].json, written to a
// temporary file and then named, so that a reader never sees half a record. Not installed.
#pragma once

#include <string>
#include <vector>

#include "flight/record.hpp"

namespace dtlaunch::ddp::detail {

// What a flight-recorder file is written for. An error's file is never replaced; the others
// (on demand, SIGUSR2, at exit) replace the previous one of the same rank and run.
enum class DumpKind { kError, kRequest, kSignal, kExit };
// "error", "request", "signal", "exit": the header's kind.
const char* kind_name(DumpKind kind);

// DIR/<run>.a<attempt>.rank-<R>, the name of a rank's files without the ending.
std::string record_stem(const std::string& dir, const std::string& run_id, int attempt, int rank);
// The file a dump of `kind` is written to (an error's when it is the first).
std::string record_path(const std::string& stem, DumpKind kind);

// Writes the record into `dir` (created if need be) at record_path(stem, kind), or for an error
// at the first free STEM.error.json, STEM.error-2.json, ... (up to 100). Returns the path
// written, or "" with `why` set and nothing left behind.
std::string write_record_file(const std::string& dir, const std::string& stem, DumpKind kind,
                              const flight::Header& head,
                              const std::vector<flight::Collective>& entries, std::string& why);

}  // namespace dtlaunch::ddp::detail
