// Hand-written expressions compared with Debian's scontrol (Slurm 22.05): normal lists, the
// tricky corners of Slurm's parser, and invalid input. Where dtlaunch deliberately refuses what
// 22.05 accepts (docs/hostlist.md, "Deliberate differences"), the entry names the reason.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "hostlist/hostlist.hpp"

namespace dtlaunch::hostlist::test {

struct CorpusEntry {
  CorpusEntry(std::string_view e) : expr(e) {}  // NOLINT: the tables list plain strings
  CorpusEntry(std::string_view e, Reason r) : expr(e), refused_by_us(r) {}
  std::string_view expr;
  std::optional<Reason> refused_by_us;  // set: 22.05 accepts (or crashes), dtlaunch refuses
};

const std::vector<CorpusEntry>& corpus();

}  // namespace dtlaunch::hostlist::test
