// Shared main for every test executable: honours MYRIAD_THREADS, then runs GoogleTest.
#include <gtest/gtest.h>

#include "core/threads.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  myriad::init_threads_from_env();
  return RUN_ALL_TESTS();
}
