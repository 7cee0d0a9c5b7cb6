#include "doctor/software.hpp"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "contract/settings.hpp"
#include "core/fd.hpp"
#include "core/file.hpp"
#include "core/text.hpp"
#include "doctor/probe.hpp"
#include "proc/fd.hpp"

namespace dtlaunch::doctor {
namespace {

using Clock = std::chrono::steady_clock;

// The families of variables compared across nodes, declared as "NCCL_*" and so on.
constexpr std::array<const contract::Setting*, 5> kComparedFamilies = {
    &contract::setting::kDoctorNcclVars, &contract::setting::kDoctorGlooVars,
    &contract::setting::kDoctorCudaVars, &contract::setting::kDoctorTorchVars,
    &contract::setting::kDoctorOmpVars};
static_assert(std::all_of(kComparedFamilies.begin(), kComparedFamilies.end(),
                          [](const contract::Setting* family) {
                            return family->name.ends_with('*');
                          }));
constexpr std::size_t kMaxListing = 1 << 20;  // a listing of thousands of libraries fits

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

std::string basename_of(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` looked up in a PATH value, as execvp does; "" when not found.
std::string search_path(const std::string& name, std::string_view path_variable) {
  if (name.find('/') != std::string::npos) return name;
  while (true) {
    const std::size_t colon = path_variable.find(':');
    std::string dir(path_variable.substr(0, colon));
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string_view::npos) return {};
    path_variable.remove_prefix(colon + 1);
  }
}

// Only a system dynamic loader is run, never whatever path a program names as its interpreter:
// with --list a loader maps the libraries and runs none of their code; another file would run.
bool looks_like_system_loader(const std::string& path) {
  const std::string name = basename_of(path);
  return path.starts_with("/") && (name.starts_with("ld-linux") || name.starts_with("ld64.so") ||
                                   name.starts_with("ld-musl") || name.starts_with("ld.so"));
}

// Runs `loader --list program` with LD_LIBRARY_PATH alone in its environment; its output, or
// nullopt (with `why`) when it failed or ran past `budget`.
std::optional<std::string> run_loader_listing(const std::string& loader, const std::string& program,
                                              const std::string& ld_library_path,
                                              std::chrono::milliseconds budget, std::string& why) {
  proc::Pipe out = proc::make_pipe();
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  ::posix_spawn_file_actions_adddup2(&actions, out.write.get(), 1);
  ::posix_spawn_file_actions_adddup2(&actions, out.write.get(), 2);
  const std::string library_path =
      std::string(contract::setting::kDoctorLibraryPath.name) + "=" + ld_library_path;
  std::vector<char*> argv = {const_cast<char*>(loader.c_str()), const_cast<char*>("--list"),
                             const_cast<char*>(program.c_str()), nullptr};
  std::vector<char*> envp;
  if (!ld_library_path.empty()) envp.push_back(const_cast<char*>(library_path.c_str()));
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, loader.c_str(), &actions, nullptr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  out.write.reset();
  if (rc != 0) {
    why = "cannot run " + loader + ": " + std::strerror(rc);
    return std::nullopt;
  }
  const auto deadline = Clock::now() + budget;
  std::string text;
  bool complete = false;
  while (Clock::now() < deadline && text.size() < kMaxListing) {
    pollfd p{out.read.get(), POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left, 1))) <= 0) continue;
    char buffer[8192];
    const ssize_t n = ::read(out.read.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      complete = true;
      break;
    }
    text.append(buffer, static_cast<std::size_t>(n));
  }
  if (!complete) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!complete) {
    why = loader + " --list did not finish within " + core::duration_text(budget);
    return std::nullopt;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    why = loader + " --list failed: " + std::string(core::first_line(text));
    return std::nullopt;
  }
  return text;
}

}  // namespace

bool is_compared_variable(std::string_view name) {
  return name == contract::setting::kDoctorLibraryPath.name ||
         std::any_of(kComparedFamilies.begin(), kComparedFamilies.end(),
                     [&](const contract::Setting* family) {
                       return name.starts_with(family->name.substr(0, family->name.size() - 1));
                     });
}

std::vector<std::pair<std::string, std::string>> compared_env(
    const std::map<std::string, std::string, std::less<>>& vars,
    const std::vector<std::string_view>& set_by_contract) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : vars)
    if (is_compared_variable(name) &&
        std::find(set_by_contract.begin(), set_by_contract.end(), name) == set_by_contract.end())
      out.emplace_back(name, value);
  return out;
}

std::optional<std::string> elf_interpreter(const std::string& path) {
  core::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) return std::nullopt;
  auto read_at = [&](void* into, std::size_t size, std::uint64_t offset) {
    return ::pread(fd.get(), into, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
  };
  Elf64_Ehdr header{};
  if (!read_at(&header, sizeof header, 0) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_phentsize != sizeof(Elf64_Phdr) ||
      header.e_phnum > 4096)
    return std::nullopt;
  for (std::uint16_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!read_at(&ph, sizeof ph, header.e_phoff + std::uint64_t{i} * sizeof ph))
      return std::nullopt;
    if (ph.p_type != PT_INTERP) continue;
    if (ph.p_filesz == 0 || ph.p_filesz > 4096) return std::nullopt;
    std::string interpreter(ph.p_filesz, '\0');
    if (!read_at(interpreter.data(), interpreter.size(), ph.p_offset)) return std::nullopt;
    interpreter.resize(std::strlen(interpreter.c_str()));
    return interpreter;
  }
  return std::string();
}

std::optional<Shebang> parse_shebang(std::string_view head) {
  if (!head.starts_with("#!")) return std::nullopt;
  std::string_view line = head.substr(
      2, head.find('\n') == std::string_view::npos ? std::string_view::npos : head.find('\n') - 2);
  line = trim(line);
  const std::size_t blank = line.find_first_of(" \t");
  Shebang s;
  s.interpreter = std::string(line.substr(0, blank));
  if (blank != std::string_view::npos) s.argument = std::string(trim(line.substr(blank)));
  return s;
}

std::vector<std::pair<std::string, std::string>> parse_loader_listing(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    std::string_view line = trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const std::size_t address = line.rfind(" (0x");
    if (address != std::string_view::npos) line = trim(line.substr(0, address));
    if (line.empty()) continue;
    const std::size_t arrow = line.find(" => ");
    if (arrow != std::string_view::npos) {
      std::string_view path = trim(line.substr(arrow + 4));
      if (path == "not found") path = {};
      out.emplace_back(std::string(line.substr(0, arrow)), std::string(path));
    } else if (line.starts_with("/")) {
      out.emplace_back(std::string(line), std::string(line));  // the interpreter itself
    }
    // else: the vDSO ("linux-vdso.so.1"), which no file backs
  }
  return out;
}

std::string parse_driver_version(std::string_view text) {
  const std::string_view line = core::first_line(text);
  const std::size_t at = line.find("Kernel Module");
  if (at == std::string_view::npos) return std::string(trim(line));
  // "Kernel Module  535.104.05  ..." or "Open Kernel Module for x86_64  550.54.15  ...": the
  // first word that is a dotted number.
  std::string_view rest = line.substr(at);
  while (!rest.empty()) {
    rest = trim(rest);
    const std::string_view word = rest.substr(0, rest.find_first_of(" \t"));
    if (!word.empty() && word.front() >= '0' && word.front() <= '9' &&
        word.find('.') != std::string_view::npos)
      return std::string(word);
    rest.remove_prefix(word.size());
  }
  return std::string(trim(line));
}

std::string parse_gpu_model(std::string_view text) {
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (line.starts_with("Model:")) return std::string(trim(line.substr(6)));
  }
  return {};
}

void probe_software(TaskReport& r, const std::string& ld_library_path,
                    const std::string& path_variable, std::chrono::milliseconds budget) {
  r.software.node_software = true;
  utsname name{};
  if (::uname(&name) == 0) r.software.kernel = name.release;
  if (auto version = core::read_file_head("/proc/driver/nvidia/version", 4096))
    r.software.driver_version = parse_driver_version(*version);
  if (DIR* dir = ::opendir("/proc/driver/nvidia/gpus")) {
    std::vector<std::string> buses;
    while (const dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') buses.emplace_back(entry->d_name);
    ::closedir(dir);
    std::sort(buses.begin(), buses.end());
    for (const std::string& bus : buses)
      if (auto info =
              core::read_file_head("/proc/driver/nvidia/gpus/" + bus + "/information", 4096))
        r.software.gpu_models.push_back(parse_gpu_model(*info));
  }

  // What the loader will load: for a script, its interpreter's libraries, and the interpreter.
  std::string elf = r.programs.program.path;
  if (elf.empty()) {
    r.software.libraries_note = "no program given";
    return;
  }
  // The kernel follows a chain of "#!" lines (a pyenv shim, then python): so do we, a few deep.
  for (int depth = 0; depth < 4; ++depth) {
    const auto head = core::read_file_head(elf, 512);
    if (!head || !head->starts_with("#!")) break;
    const Shebang s = *parse_shebang(*head);
    const std::string script = elf;
    elf = basename_of(s.interpreter) == "env" && !s.argument.empty() && !s.argument.starts_with("-")
              ? search_path(s.argument.substr(0, s.argument.find_first_of(" \t")), path_variable)
              : s.interpreter;
    if (elf.empty()) {
      r.software.libraries_note = "the interpreter of " + script + " is not on PATH";
      return;
    }
    r.software.libraries.push_back(
        {depth == 0 ? "#!" : "#!" + std::to_string(depth + 1), identify_file(elf)});
  }
  const auto interpreter = elf_interpreter(elf);
  if (!interpreter) {
    r.software.libraries_note = elf + " is not an ELF file this node can read";
    return;
  }
  if (interpreter->empty()) {
    r.software.libraries_note = elf + " is a static program";
    return;
  }
  if (!looks_like_system_loader(*interpreter)) {
    r.software.libraries_note =
        elf + " names " + *interpreter + " as its loader, which was not run";
    return;
  }
  std::string why;
  const auto listing = run_loader_listing(*interpreter, elf, ld_library_path, budget, why);
  if (!listing) {
    r.software.libraries_note = why;
    return;
  }
  for (const auto& [library, path] : parse_loader_listing(*listing)) {
    if (library.find('=') != std::string::npos || library.find('\n') != std::string::npos)
      continue;  // not a name the report's "lib.NAME" key can carry
    r.software.libraries.push_back({library, path.empty() ? FileIdentity{} : identify_file(path)});
  }
}

}  // namespace dtlaunch::doctor
