// The consumer's own base/status.h. Before meshflow's includes had the "meshflow/" prefix, a
// header with this name in the consumer's workspace shadowed meshflow's "base/status.h" (the
// consumer's root comes first on the quote-include path), and meshflow's headers failed to compile.
#ifndef CONSUMER_BASE_STATUS_H_
#define CONSUMER_BASE_STATUS_H_

#include <string>

namespace consumer {

// Deliberately unlike meshflow::Status: if meshflow's headers picked this file up, they would not
// find meshflow::Status and the build would fail.
struct Status {
  std::string what = "consumer status";
};

}  // namespace consumer

#endif  // CONSUMER_BASE_STATUS_H_
