// DTensor operations that communicate: Redistribute and FullTensor.
//
// They live in collectives/ (not dtensor/) because they need the planner and a Communicator;
// the dependency direction mesh <- dtensor <- planner <- collectives stays one way.
//
//   MF_ASSIGN_OR_RETURN(MeshComms comms, MeshComms::Create(world_comm, mesh));
//   MF_ASSIGN_OR_RETURN(DTensor y, Redistribute(x, target_layout, comms));   // optimal plan
//   MF_ASSIGN_OR_RETURN(Tensor full, FullTensor(y, comms));                  // every rank
//
// Plans come from a process-wide PlanCache keyed on (layouts, shape, dtype, topology), so the
// steady-state cost of Redistribute is one cache lookup plus the collectives.
#ifndef MESHFLOW_COLLECTIVES_DTENSOR_API_H_
#define MESHFLOW_COLLECTIVES_DTENSOR_API_H_

#include <memory>
#include <string>

#include "base/status.h"
#include "collectives/mesh_comms.h"
#include "dtensor/dtensor.h"
#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/plan_cache.h"

namespace meshflow {

enum class PlannerKind { kOptimal, kGreedy, kDirect };

std::string_view PlannerKindName(PlannerKind kind);  // "optimal", "greedy", "direct"
StatusOr<PlannerKind> ParsePlannerKind(std::string_view s);

struct RedistributeOptions {
  Topology topology;                        // cost model constants (documented defaults)
  PlannerKind planner = PlannerKind::kOptimal;
  PlanCache* cache = nullptr;               // nullptr: the process-wide cache (optimal only)
};

// The plan for from -> to (cached for the optimal planner). Errors: see PlanRedistribution.
StatusOr<std::shared_ptr<const Plan>> PlanFor(const Layout& from, const Layout& to, DType dtype,
                                              const RedistributeOptions& options = {});

// Collective: every rank of the mesh calls it with its part of the same DTensor. Errors: target
// on another mesh or shape; planner errors (e.g. Partial -> other Partial); communicator errors.
StatusOr<DTensor> Redistribute(const DTensor& x, const Layout& target, MeshComms& comms,
                               const RedistributeOptions& options = {});

// Collective: the whole global tensor on every rank (Partial values reduced).
StatusOr<Tensor> FullTensor(const DTensor& x, MeshComms& comms);

}  // namespace meshflow

#endif  // MESHFLOW_COLLECTIVES_DTENSOR_API_H_
