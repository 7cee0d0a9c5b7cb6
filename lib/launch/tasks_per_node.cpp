#include "launch/tasks_per_node.hpp"

#include <string>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::launch {

std::vector<std::uint32_t> parse_tasks_per_node(std::string_view variable, std::string_view text,
                                                std::size_t max_nodes) {
  auto fail = [&](const std::string& why) -> core::Error {
    return core::Error::bad_env(variable, text, why);
  };
  if (text.empty()) throw fail("empty; expected counts such as 8(x2),4");

  std::vector<std::uint32_t> counts;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    std::string where = " in item '" + core::excerpt(item) + "'";
    if (item.empty()) throw fail("empty item at offset " + std::to_string(pos));

    std::string_view count_text = item;
    std::uint64_t repeat = 1;
    if (std::size_t open = item.find('('); open != std::string_view::npos) {
      std::string_view rep = item.substr(open);
      if (rep.size() < 4 || rep.substr(0, 2) != "(x" || rep.back() != ')')
        throw fail("expected N(xM)" + where);
      auto r = core::parse_uint(rep.substr(2, rep.size() - 3), max_nodes);
      if (!r || *r == 0) throw fail("bad repeat count" + where);
      repeat = *r;
      count_text = item.substr(0, open);
    }
    auto count = core::parse_uint(count_text, UINT32_MAX);
    if (!count) throw fail("bad task count" + where);
    if (*count == 0) throw fail("a node with 0 tasks" + where);
    if (counts.size() + repeat > max_nodes)
      throw fail("more than " + std::to_string(max_nodes) + " nodes");
    counts.insert(counts.end(), repeat, static_cast<std::uint32_t>(*count));
    pos = comma + 1;
  }
  return counts;
}

}  // namespace dtlaunch::launch
