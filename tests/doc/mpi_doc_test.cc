// Every example in collectives/mpi/mpi_communicator.h is compiled here; keep them identical.
//
// The example is a program's main() for `mpirun -np 4 ./prog`: it is compiled and linked here as
// an ordinary function (at namespace scope, outside namespace meshflow, as in a user's program)
// but never called, since MPI_Init needs the mpirun launcher. The mpirun tests of
// //collectives/mpi run the same calls.
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/base/status.h"
#include "meshflow/collectives/mpi/mpi_communicator.h"

// collectives/mpi/mpi_communicator.h (main() renamed; main alone may omit its return statement).
int MpiHeaderExampleMain() {
  meshflow::MpiFinalizeGuard finalize;  // MPI_Finalize when main returns
  auto world = meshflow::MpiWorld();
  if (!world.ok()) meshflow::MpiAbort(world.status());
  std::vector<float> x(8, static_cast<float>((*world)->rank()));
  meshflow::Status s = (*world)->AllReduce(x.data(), x.data(), 8, meshflow::DType::kF32,
                                           meshflow::ReduceOp::kSum);
  if (!s.ok()) meshflow::MpiAbort(s);   // the other ranks must not wait for this one
  return 0;
}

namespace {

TEST(MpiDocTest, HeaderExampleCompilesAndLinks) {
  int (*example_main)() = &MpiHeaderExampleMain;
  EXPECT_NE(example_main, nullptr);
}

}  // namespace
