// Internal to checkpoint/: the agreement step of the collective save and load protocols: every
// rank learns whether any rank failed, and all return the first failure.
#ifndef MESHFLOW_CHECKPOINT_AGREE_H_
#define MESHFLOW_CHECKPOINT_AGREE_H_

#include "meshflow/base/include_check.h"
MESHFLOW_CHECK_INCLUDE_PATH();

#include "meshflow/base/status.h"
#include "meshflow/collectives/communicator.h"

namespace meshflow::checkpoint_internal {

// OK when every rank's `local` is OK; else the first failing rank's status (in communicator
// order) with context "rank r", on every rank. `comm_failed` (optional) is set when the agreement
// itself failed (a communication error); `local` (or that error) is then returned.
Status AgreeStatus(Communicator& comm, const Status& local, bool* comm_failed = nullptr);

}  // namespace meshflow::checkpoint_internal

#endif  // MESHFLOW_CHECKPOINT_AGREE_H_
