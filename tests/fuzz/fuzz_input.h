// FuzzInput and FUZZ_CHECK: shared helpers of the fuzz targets in tests/fuzz/.
//
// FuzzInput hands out the fuzzer's bytes one small decision at a time and returns 0 once they
// are used up, so every input (including the empty one) decodes to some case. It is a tiny
// stand-in for libFuzzer's FuzzedDataProvider, which is not available to the gcc build that
// replays the corpus as a regular test.
//
//   meshflow::fuzz::FuzzInput in(data, size);
//   const int ndim = 1 + in.Byte() % 3;
//   FUZZ_CHECK(status.ok() || !status.message().empty(), "error without a message: " << status);
//
// FUZZ_CHECK prints the failed condition and the message to stderr and aborts, which libFuzzer
// reports as a crash (and the replay test as a failed test).
#ifndef MESHFLOW_TESTS_FUZZ_FUZZ_INPUT_H_
#define MESHFLOW_TESTS_FUZZ_FUZZ_INPUT_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

namespace meshflow::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // The next byte, or 0 when the input is used up.
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // A value in [0, n) (n >= 1).
  int Below(int n) { return n <= 1 ? 0 : Byte() % n; }
  // The rest of the input as text.
  std::string_view Rest() {
    std::string_view s(reinterpret_cast<const char*>(data_) + pos_, size_ - pos_);
    pos_ = size_;
    return s;
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace meshflow::fuzz

#define FUZZ_CHECK(cond, msg)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::cerr << __FILE__ << ":" << __LINE__ << ": FUZZ_CHECK(" #cond ") failed: " << msg \
                << std::endl;                                                              \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

#endif  // MESHFLOW_TESTS_FUZZ_FUZZ_INPUT_H_
