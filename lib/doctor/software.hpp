// What software a node will run the program with, for the doctor's comparisons between nodes:
// the environment variables that steer NCCL, Gloo, CUDA, PyTorch and OpenMP, the shared
// libraries the dynamic loader will pick for the program, the NVIDIA driver and GPU models, the
// kernel. Probing is I/O (probe_software); the parsers are pure and tested on their own.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "doctor/report.hpp"

namespace dtlaunch::doctor {

// Whether a variable is compared between nodes: NCCL_*, GLOO_*, CUDA_*, TORCH_*, OMP_*,
// LD_LIBRARY_PATH.
bool is_compared_variable(std::string_view name);

// The compared variables of `vars` (an environment as the program will see it), without those
// named in `set_by_contract` (dtlaunch sets them per rank: CUDA_VISIBLE_DEVICES, ...).
std::vector<std::pair<std::string, std::string>> compared_env(
    const std::map<std::string, std::string, std::less<>>& vars,
    const std::vector<std::string_view>& set_by_contract);

// The ELF interpreter (PT_INTERP) of the file at `path`: "" for a static program, nullopt when
// it is not an ELF file this machine can read.
std::optional<std::string> elf_interpreter(const std::string& path);

// A script's "#!" line as the kernel reads it: the interpreter and its one optional argument;
// nullopt when the file does not start with "#!".
struct Shebang {
  std::string interpreter;
  std::string argument;
};
std::optional<Shebang> parse_shebang(std::string_view head);

// The lines of `ld.so --list PROGRAM`: (name, path) per object, path "" for "not found"; the
// vDSO (no file) is left out, and the interpreter's own line is named by its path.
std::vector<std::pair<std::string, std::string>> parse_loader_listing(std::string_view text);

// The driver version from /proc/driver/nvidia/version ("535.104.05"), or the first line when it
// has no "Kernel Module" field; the model from a /proc/driver/nvidia/gpus/*/information file.
std::string parse_driver_version(std::string_view text);
std::string parse_gpu_model(std::string_view text);

// Fills report.libraries (or libraries_note), driver_version, gpu_models and kernel, and sets
// node_software. The libraries are those the loader resolves for the program (or, for a
// script, its interpreter) with `ld_library_path` (the program's LD_LIBRARY_PATH, "" when
// unset) and the PATH a "#!/usr/bin/env NAME" is looked up in: listed by running the
// program's own ELF interpreter with --list, which maps nothing but the loader and runs none
// of the program's code, bounded by `budget`; each library hashed as the program is.
void probe_software(TaskReport& report, const std::string& ld_library_path,
                    const std::string& path_variable,
                    std::chrono::milliseconds budget = std::chrono::seconds(10));

}  // namespace dtlaunch::doctor
