// GoogleTest main for meshflow tests (Debian ships libgtest_main.a, but linking our own keeps the
// sanitizer configs free of uninstrumented startup code).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
