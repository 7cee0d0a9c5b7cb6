#include "doctor/compare.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/text.hpp"
#include "hostlist/hostlist.hpp"

namespace dtlaunch::doctor {
namespace {

// More differences than this are summed up in one line: a node with another libtorch differs in
// a dozen libraries, and one line per library would bury the other problems.
constexpr std::size_t kMaxListed = 4;

// How the reports split on one value: the reference (most common; a tie goes to the value of
// the lowest rank) and the others, each with its reports, in order of first appearance.
struct Split {
  std::optional<std::string> reference;
  std::size_t reference_count = 0;
  std::vector<std::pair<std::optional<std::string>, std::vector<const TaskReport*>>> others;
};

Split split_by(const std::vector<const TaskReport*>& reports,
               const std::function<std::optional<std::string>(const TaskReport&)>& value_of) {
  std::vector<std::pair<std::optional<std::string>, std::vector<const TaskReport*>>> groups;
  std::map<std::optional<std::string>, std::size_t> index;
  for (const TaskReport* r : reports) {
    auto value = value_of(*r);
    auto [it, fresh] = index.try_emplace(value, groups.size());
    if (fresh) groups.push_back({std::move(value), {}});
    groups[it->second].second.push_back(r);
  }
  Split split;
  if (groups.empty()) return split;
  std::size_t best = 0;  // groups are in rank order of their first report: ties keep the first
  for (std::size_t i = 1; i < groups.size(); ++i)
    if (groups[i].second.size() > groups[best].second.size()) best = i;
  split.reference = groups[best].first;
  split.reference_count = groups[best].second.size();
  for (std::size_t i = 0; i < groups.size(); ++i)
    if (i != best) split.others.push_back(std::move(groups[i]));
  return split;
}

std::string quoted(const std::optional<std::string>& value, std::string_view absent) {
  return value ? "'" + core::excerpt(*value, 60) + "'" : std::string(absent);
}

std::string count_of(std::size_t n, std::string_view what) {
  std::string noun(what);
  if (n != 1) noun = noun.ends_with("y") ? noun.substr(0, noun.size() - 1) + "ies" : noun + "s";
  return std::to_string(n) + " " + noun;
}

// Adds one problem per differing value (at most kMaxListed in all, then one line for the rest).
struct Differences {
  Differences(std::vector<Problem>& into, std::string problem_kind, Severity level)
      : problems(into), kind(std::move(problem_kind)), severity(level) {}
  std::vector<Problem>& problems;
  std::string kind;
  Severity severity;
  std::size_t listed = 0;
  std::size_t unlisted = 0;
  std::vector<const TaskReport*> unlisted_reports;

  void add(const std::vector<const TaskReport*>& who, std::string message) {
    if (listed++ >= kMaxListed) {
      ++unlisted;
      for (const TaskReport* r : who)
        if (std::find(unlisted_reports.begin(), unlisted_reports.end(), r) ==
            unlisted_reports.end())
          unlisted_reports.push_back(r);
      return;
    }
    problems.push_back({kind, severity, ranks_of(who), unique_hosts(who), std::move(message)});
  }
  void finish(std::string_view what) {
    if (unlisted == 0) return;
    std::sort(unlisted_reports.begin(), unlisted_reports.end(),
              [](const TaskReport* a, const TaskReport* b) {
                return a->contract.rank < b->contract.rank;
              });
    problems.push_back({kind, severity, ranks_of(unlisted_reports), unique_hosts(unlisted_reports),
                        std::to_string(unlisted) + " more " +
                            count_of(unlisted, what).substr(std::to_string(unlisted).size() + 1) +
                            " differ on " + hosts_text(unique_hosts(unlisted_reports)) +
                            " (--format json lists them)"});
  }
};

void compare_env(const std::vector<const TaskReport*>& reports, std::vector<Problem>& problems) {
  std::set<std::string> names;
  for (const TaskReport* r : reports)
    for (const auto& [name, value] : r->software.env) names.insert(name);
  Differences env{problems, "env-differs", Severity::kError};
  for (const std::string& name : names) {
    const Split split = split_by(reports, [&](const TaskReport& r) -> std::optional<std::string> {
      for (const auto& [n, v] : r.software.env)
        if (n == name) return v;
      return std::nullopt;
    });
    for (const auto& [value, who] : split.others)
      env.add(who, core::excerpt(name, 60) + " is " + quoted(value, "unset") + " on " +
                       hosts_text(unique_hosts(who)) + " (" + count_of(who.size(), "rank") + ": " +
                       core::compact_ranges(ranks_of(who), 8) + ") but " +
                       quoted(split.reference, "unset") + " on " +
                       count_of(split.reference_count, "other rank") +
                       ": NCCL, Gloo and PyTorch would be configured differently there");
  }
  env.finish("variable");
}

std::string file_text(const FileIdentity& file) {
  if (file.path.empty()) return "not found";
  return core::excerpt(file.path, 100) + " (" + std::to_string(file.size) + " bytes, hash " +
         (file.hash.empty() ? "unreadable" : file.hash) + ")";
}

void compare_libraries(const std::vector<const TaskReport*>& nodes,
                       std::vector<Problem>& problems) {
  std::set<std::string> names;
  std::vector<const TaskReport*> listed;
  for (const TaskReport* r : nodes)
    if (!r->software.libraries.empty()) {
      listed.push_back(r);
      for (const LibraryIdentity& lib : r->software.libraries) names.insert(lib.name);
    }
  if (listed.size() < 2) return;
  Differences libraries{problems, "libraries-differ", Severity::kError};
  for (const std::string& name : names) {
    auto find = [&](const TaskReport& r) -> const LibraryIdentity* {
      for (const LibraryIdentity& lib : r.software.libraries)
        if (lib.name == name) return &lib;
      return nullptr;
    };
    // The contents decide: another path to the same bytes is the same library.
    const Split split = split_by(listed, [&](const TaskReport& r) -> std::optional<std::string> {
      const LibraryIdentity* lib = find(r);
      if (!lib) return std::nullopt;
      if (lib->file.path.empty()) return std::string("not found");
      return lib->file.hash + " " + std::to_string(lib->file.size);
    });
    if (split.others.empty()) continue;
    const TaskReport* reference_node = nullptr;
    for (const TaskReport* r : listed)
      if (std::none_of(split.others.begin(), split.others.end(), [&](const auto& group) {
            return std::find(group.second.begin(), group.second.end(), r) != group.second.end();
          })) {
        reference_node = r;
        break;
      }
    const LibraryIdentity* reference = reference_node ? find(*reference_node) : nullptr;
    for (const auto& [value, who] : split.others) {
      const LibraryIdentity* odd = find(*who.front());
      libraries.add(who, (name.starts_with("#!") ? "the script's interpreter (" + name + ")"
                                                 : core::excerpt(name, 80)) +
                             " differs on " + hosts_text(unique_hosts(who)) + ": " +
                             (odd ? file_text(odd->file) : std::string("not loaded")) + " there, " +
                             (reference ? file_text(reference->file) : std::string("not loaded")) +
                             " on " + count_of(split.reference_count, "other node") +
                             " (LD_LIBRARY_PATH, RPATH or another install on that node?)");
    }
  }
  libraries.finish("library");
}

void compare_driver(const std::vector<const TaskReport*>& nodes, std::vector<Problem>& problems) {
  const auto describe = [](const std::optional<std::string>& v) {
    return v && !v->empty() ? "'" + core::excerpt(*v, 80) + "'" : std::string("none");
  };
  const Split versions = split_by(nodes, [](const TaskReport& r) -> std::optional<std::string> {
    return r.software.driver_version;
  });
  Differences driver{problems, "driver-differs", Severity::kError};
  for (const auto& [value, who] : versions.others)
    driver.add(who, "the NVIDIA driver is " + describe(value) + " on " +
                        hosts_text(unique_hosts(who)) + " but " + describe(versions.reference) +
                        " on " + count_of(versions.reference_count, "other node") +
                        " (/proc/driver/nvidia/version)");
  driver.finish("driver version");
  const Split models = split_by(nodes, [](const TaskReport& r) -> std::optional<std::string> {
    std::string joined;
    for (const std::string& m : r.software.gpu_models) joined += (joined.empty() ? "" : ", ") + m;
    return joined;
  });
  Differences gpus{problems, "driver-differs", Severity::kWarning};
  for (const auto& [value, who] : models.others)
    gpus.add(who, "the GPUs are " + describe(value) + " on " + hosts_text(unique_hosts(who)) +
                      " but " + describe(models.reference) + " on " +
                      count_of(models.reference_count, "other node"));
  gpus.finish("GPU model list");
}

bool cured_by_exclusion(const Problem& p) {
  return p.severity == Severity::kError && p.kind != "world-mismatch" &&
         p.kind != "duplicate-rank" && p.kind != "gpu-shared";
}

// A name that can stand in a hostlist and on a terminal as it is: what Slurm's node names are
// made of (letters, digits, '-', '_', '.'). A reported name with anything else (a control byte
// that resets the terminal, a bracket, a comma) is quoted escaped in the table and kept off the
// exclude list, whose line is meant to be pasted into --exclude.
bool writable_host(const std::string& host) {
  if (host.empty() || host.size() > 255 ||
      !std::all_of(host.begin(), host.end(), [](unsigned char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '-' || c == '_' || c == '.';
      }))
    return false;
  try {
    hostlist::compress({host});
    return !host.empty();
  } catch (const core::Error&) {
    return false;
  }
}

}  // namespace

std::string hosts_text(const std::vector<std::string>& hosts) {
  if (std::all_of(hosts.begin(), hosts.end(), writable_host)) {
    const std::string expression = hostlist::compress(hosts);
    if (expression.size() <= 200) return expression;
  }
  std::string out;
  std::size_t shown = 0;
  for (const std::string& h : hosts) {
    if (shown++ == 8) return out + ", ... (" + std::to_string(hosts.size()) + " hosts)";
    out += (out.empty() ? "" : ", ") + core::excerpt(h, 60);
  }
  return out;
}

void compare_software(const std::vector<const TaskReport*>& reports,
                      std::vector<Problem>& problems) {
  compare_env(reports, problems);
  std::vector<const TaskReport*> nodes;
  for (const TaskReport* r : reports)
    if (r->software.node_software) nodes.push_back(r);
  compare_libraries(nodes, problems);
  compare_driver(nodes, problems);
}

std::string exclude_list(const Expectation& expected, const std::vector<Problem>& problems) {
  std::set<std::string> excluded;
  for (const Problem& p : problems)
    if (cured_by_exclusion(p))
      for (const std::string& host : p.hosts)
        if (writable_host(host)) excluded.insert(host);
  std::vector<std::string> ordered;
  for (const ExpectedRank& r : expected.ranks)
    if (excluded.erase(r.host)) ordered.push_back(r.host);
  ordered.insert(ordered.end(), excluded.begin(), excluded.end());
  return ordered.empty() ? std::string() : hostlist::compress(ordered);
}

}  // namespace dtlaunch::doctor
