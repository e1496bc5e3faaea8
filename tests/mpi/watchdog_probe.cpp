// A program that goes wrong on purpose, for check_watchdog.sh: the watchdog must end the job
// with a message naming the operation, the group and the rank that did not arrive.
//   watchdog_probe mismatch  - the last rank waits in a recv while the others all-reduce
//   watchdog_probe dead      - rank 1 is killed (SIGKILL) before the all-reduce
#include "comm/mpi_runtime.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

int main(int argc, char** argv) {
  using namespace tidal::comm;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "mismatch" && mode != "dead") {
    fmt::print(stderr, "usage: watchdog_probe mismatch|dead\n");
    return 2;
  }
  MpiRuntime runtime(&argc, &argv);
  auto world = runtime.world(Seconds(3));
  const int last = world->size() - 1;
  tidal::Tensor x = tidal::Tensor::full({1000}, 1.0f);
  world->all_reduce(x)->wait();  // everyone is up
  if (mode == "dead" && world->rank() == 1) std::raise(SIGKILL);
  if (mode == "mismatch" && world->rank() == last) {
    world->recv(x, 0)->wait();
  } else {
    world->all_reduce(x)->wait();
  }
  fmt::print(stderr, "rank {}: the faulty step completed; the watchdog did not fire\n", world->rank());
  return 0;
}
