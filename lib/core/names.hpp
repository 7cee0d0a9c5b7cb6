// An enum's names as one table per enum, instead of a switch per direction: the name of a value
// for messages and reports, the value of a name for parsing. Unlike a switch, a table gets no
// -Wswitch warning when an enumerator is added: add its name with it (a value missing from its
// table reads as `unknown`). Names written as string literals end in NUL, so `.data()` of one is
// a C string.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace dtlaunch::core {

template <typename Enum>
struct Named {
  Enum value;
  std::string_view name;
};

template <typename Enum, std::size_t N>
constexpr std::string_view name_of(Enum value, const Named<Enum> (&names)[N],
                                   std::string_view unknown = "?") {
  for (const Named<Enum>& n : names)
    if (n.value == value) return n.name;
  return unknown;
}

template <typename Enum, std::size_t N>
constexpr std::optional<Enum> value_of(std::string_view name, const Named<Enum> (&names)[N]) {
  for (const Named<Enum>& n : names)
    if (n.name == name) return n.value;
  return std::nullopt;
}

}  // namespace dtlaunch::core
