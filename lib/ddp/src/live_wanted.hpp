// The records of a live recovery that say who is wanted where (live_wanted.cpp).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "core/hmac.hpp"
#include "dtlaunch/ddp.h"

namespace dtlaunch::ddp::detail {

// The record that wants a rank in generation `g`, sealed with the job's key when there is one.
std::string wanted_record(const std::optional<core::JobKey>& key, int g);

// The generation of a wanted_record, or -1 when it is not one (no valid seal, garbage).
int wanted_generation_of(const std::string& record, const std::optional<core::JobKey>& key);

// A replacement's place in the generation the survivors are forming without its rank named
// lost; marks it wanted. Returns the generation, or -1.
int claim_place(const c10::intrusive_ptr<c10d::Store>& store,
                const std::optional<core::JobKey>& key, const WorkerEnv& env, const std::string& me,
                int wanted_now);

// A replacement's error when no survivor wanted its rank within `wait`.
Error nobody_wanted(const std::string& me, const WorkerEnv& env, std::chrono::milliseconds wait);

// The loss `cause`, when no replacement for `lost` joined the re-form within `wait` (`e`).
Error no_replacement(const Error& cause, const std::vector<int>& lost,
                     std::chrono::milliseconds wait, const Error& e);

}  // namespace dtlaunch::ddp::detail
