#include "launch/port.hpp"

#include <set>

#include "core/error.hpp"
#include "dtlaunch_catch.hpp"

using namespace dtlaunch;
using namespace dtlaunch::launch;

TEST_CASE("port: deterministic and inside the range") {
  for (std::uint64_t job = 0; job < 2000; ++job) {
    auto p = master_port_for(job, 0, 0);
    CHECK(p >= kDefaultPortRange.lo);
    CHECK(p <= kDefaultPortRange.hi);
    CHECK(p == master_port_for(job, 0, 0));
  }
}

TEST_CASE("port: the steps of one job never collide") {
  std::set<std::uint16_t> ports;
  for (std::uint64_t step = 0; step < 1000; ++step) ports.insert(master_port_for(123456, step, 0));
  CHECK(ports.size() == 1000);
  // The batch and extern steps (0xfffffffe, 0xffffffff) are ordinary ids to the function.
  CHECK(master_port_for(123456, 0xfffffffeULL, 0) != master_port_for(123456, 0xffffffffULL, 0));
}

TEST_CASE("port: consecutive job ids do not alias the way job_id % N does") {
  // job % 1000 collides for 1000 and 2000; the mixer must not.
  CHECK(master_port_for(1000, 0, 0) != master_port_for(2000, 0, 0));
  // Over 20000 consecutive job ids, the ports spread over the range close to uniformly: the
  // number of distinct values is near the birthday expectation (range * (1 - e^(-n/range))).
  std::set<std::uint16_t> ports;
  for (std::uint64_t job = 5'000'000; job < 5'020'000; ++job)
    ports.insert(master_port_for(job, 0, 0));
  const double range = kDefaultPortRange.size();
  const double expected = range * (1 - std::exp(-20000.0 / range));
  CHECK(ports.size() > expected * 0.97);
}

TEST_CASE("port: the het job offset separates components") {
  CHECK(master_port_for(77, 0, 0) != master_port_for(77, 0, 1));
}

TEST_CASE("port range: parsing") {
  auto r = parse_port_range("DTLAUNCH_PORT_RANGE", "40000-40009");
  CHECK(r.lo == 40000);
  CHECK(r.hi == 40009);
  CHECK(r.size() == 10);
  for (int i = 0; i < 100; ++i) {
    auto p = master_port_for(i, 0, 0, r);
    CHECK((p >= 40000 && p <= 40009));
  }
  for (const char* bad :
       {"", "1", "1000-2000", "40000", "5-4", "30000-70000", "a-b", "2000-1999"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_port_range("DTLAUNCH_PORT_RANGE", bad), core::Error);
  }
}
