// A tiny program for black-box tests: prints its argv and its environment, one "NAME=value" per
// line sorted by name, so that a test sees exactly what dtlaunch exec'd it with.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

extern char** environ;

int main(int argc, char** argv) {
  std::printf("PID=%d\n", static_cast<int>(::getpid()));
  for (int i = 0; i < argc; ++i) std::printf("ARGV[%d]=%s\n", i, argv[i]);
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) vars.emplace_back(*e);
  std::sort(vars.begin(), vars.end());
  for (const std::string& v : vars) std::printf("%s\n", v.c_str());
  return 0;
}
