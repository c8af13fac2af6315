// Helpers shared by data/ tests: a fresh temporary directory per test, file byte surgery.
//
//   std::string dir = testing::FreshTempDir();   // under $TEST_TMPDIR, unique per test
#ifndef MESHFLOW_DATA_TEST_UTIL_H_
#define MESHFLOW_DATA_TEST_UTIL_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace meshflow::testing {

inline std::string FreshTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path root = base != nullptr ? std::filesystem::path(base) : std::filesystem::temp_directory_path();
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path dir = root / (std::string("mf_data_") + info->test_suite_name() + "_" + info->name());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  return dir.string();
}

inline std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace meshflow::testing

#endif  // MESHFLOW_DATA_TEST_UTIL_H_
