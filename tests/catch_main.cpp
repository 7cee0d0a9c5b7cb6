// Catch2 v2's runner, compiled once for every test binary (v3 brings its own: Catch2WithMain).
#define CATCH_CONFIG_MAIN
#include "dtlaunch_catch.hpp"
