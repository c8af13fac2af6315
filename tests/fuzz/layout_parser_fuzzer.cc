// Fuzz target: the text forms parsed by dtensor/, planner/, data/ and tools/dtplan.
//
// The first byte picks a parser ('0'..'6' -> 0..6, any byte mod 7), the rest is its text:
//   0  ParsePlacements        "S(0),R,P(sum)"        (OK -> printing and parsing round-trip)
//   1  ParsePlacement         "P(avg)"               (OK -> round-trip)
//   2  ParseShardOrder        "0:[1,0];2:[0,2]"      (OK -> tensor dims <= 64, entries as parsed)
//   3  ParseTopology          "intra=1;bw_inter=25"  (OK -> ToString parses back to the same value)
//   4  mesh spec              "2x2x2|dp,tp,cp"       (dtplan's --mesh and --names; OK -> coordinates
//                                                      and ranks round-trip, groups have the dim size)
//   5  layout spec            "2x2|8,6|S(0),S(0)|0:[1,0]"  (mesh | shape | placements | order, as
//                                                      dtplan builds --from; OK -> every local box
//                                                      lies inside the shape, PlacementsString
//                                                      parses back, DrawLayout does not crash)
//   6  small names           ParseDType, ParseReduceOp, ParsePlannerKind, LoaderState::Parse
// Every error must be a non-OK Status with a non-empty message; nothing may crash, hang or trip a
// sanitizer. Seeds: tests/fuzz/corpus/layout_parser/.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "meshflow/base/parse.h"
#include "meshflow/runtime/redistribute.h"
#include "meshflow/data/loader.h"
#include "meshflow/dtensor/dtype.h"
#include "meshflow/dtensor/layout.h"
#include "meshflow/dtensor/placement.h"
#include "meshflow/mesh/device_mesh.h"
#include "meshflow/planner/cost_model.h"
#include "meshflow/planner/plan_format.h"
#include "meshflow/tests/fuzz/fuzz_input.h"

namespace meshflow::fuzz {
namespace {

template <typename T>
void CheckError(const StatusOr<T>& s, const char* what) {
  if (!s.ok()) {
    FUZZ_CHECK(!s.status().message().empty(), what << ": error without a message");
    FUZZ_CHECK(s.status().code() != StatusCode::kInternal, what << ": internal error " << s.status());
  }
}

std::vector<std::string> SplitOn(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.emplace_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}


// DeviceMesh::Create allocates one int per rank and accepts up to 2^30 ranks; the fuzzer skips
// valid shapes above 2^16 ranks so that it measures parsing, not the allocator.
bool MeshTooLargeToBuild(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s < 1) return false;  // Create rejects it without allocating
    if (s > (int64_t{1} << 31) / n) return false;  // too large: rejected without allocating
    n *= s;
  }
  return n > (int64_t{1} << 16) && n <= (int64_t{1} << 30);
}

StatusOr<DeviceMesh> ParseMesh(std::string_view mesh_text, const std::string* names_text) {
  MF_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseIntList(std::string(mesh_text), 'x', "mesh"));
  std::vector<std::string> names;
  if (names_text != nullptr) names = SplitOn(*names_text, ',');
  if (MeshTooLargeToBuild(shape)) return InvalidArgumentError("skipped: mesh too large for the fuzzer");
  return DeviceMesh::Create(shape, names);
}

void CheckMesh(const DeviceMesh& mesh) {
  FUZZ_CHECK(mesh.size() >= 1, "empty mesh");
  const int probes[] = {0, mesh.size() / 2, mesh.size() - 1};
  for (int idx : probes) {
    const int r = mesh.ranks()[idx];
    auto coord = mesh.Coordinate(r);
    FUZZ_CHECK(coord.ok(), "Coordinate(" << r << "): " << coord.status());
    auto back = mesh.RankAt(*coord);
    FUZZ_CHECK(back.ok() && *back == r, "RankAt(Coordinate(" << r << "))");
    for (int d = 0; d < mesh.ndim(); ++d) {
      if (mesh.dim_size(d) > 4096) continue;
      auto g = mesh.Group(r, d);
      FUZZ_CHECK(g.ok() && static_cast<int64_t>(g->size()) == mesh.dim_size(d), "Group(" << r << ", " << d << ")");
    }
  }
  (void)mesh.ToString();
}

void FuzzPlacements(std::string_view text) {
  auto p = ParsePlacements(text);
  CheckError(p, "ParsePlacements");
  if (!p.ok()) return;
  FUZZ_CHECK(!p->empty(), "ParsePlacements returned no placements for '" << text << "'");
  const std::string printed = ToString(std::span<const Placement>(*p));
  auto again = ParsePlacements(printed);
  FUZZ_CHECK(again.ok() && *again == *p, "round trip of '" << text << "' via '" << printed << "'");
}

void FuzzPlacement(std::string_view text) {
  auto p = ParsePlacement(text);
  CheckError(p, "ParsePlacement");
  if (!p.ok()) return;
  auto again = ParsePlacement(ToString(*p));
  FUZZ_CHECK(again.ok() && *again == *p, "round trip of '" << text << "' via '" << ToString(*p) << "'");
}

void FuzzShardOrder(std::string_view text) {
  auto o = ParseShardOrder(text);
  CheckError(o, "ParseShardOrder");
  if (!o.ok()) return;
  FUZZ_CHECK(o->size() <= 65, "shard order with " << o->size() << " tensor dims from '" << text << "'");
}

void FuzzTopology(std::string_view text) {
  auto t = ParseTopology(text);
  CheckError(t, "ParseTopology");
  if (!t.ok()) return;
  const std::string printed = t->ToString();
  auto again = ParseTopology(printed);
  FUZZ_CHECK(again.ok() && *again == *t, "topology round trip of '" << text << "' via '" << printed << "'");
  for (int d = 0; d < 4; ++d) {
    FUZZ_CHECK(t->BandwidthGBps(d) > 0 && t->LatencyUs(d) >= 0, "bad topology constants from '" << text << "'");
  }
}

void FuzzMeshSpec(std::string_view text) {
  const size_t bar = text.find('|');
  const std::string names = bar == std::string_view::npos ? "" : std::string(text.substr(bar + 1));
  auto mesh = ParseMesh(text.substr(0, bar), bar == std::string_view::npos ? nullptr : &names);
  CheckError(mesh, "mesh spec");
  if (mesh.ok()) CheckMesh(*mesh);
}

void FuzzLayoutSpec(std::string_view text) {
  const std::vector<std::string> parts = SplitOn(text, '|');
  if (parts.size() < 3) return;
  auto mesh = ParseMesh(parts[0], nullptr);
  CheckError(mesh, "mesh");
  auto shape = ParseIntList(parts[1], ',', "shape");
  CheckError(shape, "shape");
  auto placements = ParsePlacements(parts[2]);
  CheckError(placements, "placements");
  auto order = ParseShardOrder(parts.size() > 3 ? parts[3] : "");
  CheckError(order, "order");
  if (!mesh.ok() || !shape.ok() || !placements.ok() || !order.ok()) return;
  auto layout = Layout::Create(*shape, *mesh, *placements, *order);
  CheckError(layout, "Layout::Create");
  if (!layout.ok() || mesh->size() > 64) return;
  const std::vector<Box> boxes = layout->AllLocalBoxes();
  for (const Box& b : boxes) {
    FUZZ_CHECK(b.rank() == layout->tensor_rank(), "box rank");
    for (int d = 0; d < b.rank(); ++d) {
      FUZZ_CHECK(b.offset[d] >= 0 && b.shape[d] >= 0 && b.shape[d] <= (*shape)[d] &&
                     b.offset[d] <= (*shape)[d] - b.shape[d],
                 "box " << b.ToString() << " outside shape of " << layout->ToString());
    }
  }
  const std::string printed = layout->PlacementsString();
  auto again = ParsePlacements(printed.substr(0, printed.find(" order")));
  FUZZ_CHECK(again.ok() && *again == *placements, "PlacementsString round trip: " << printed);
  if (layout->tensor_rank() <= 2) (void)DrawLayout(*layout);
}

void FuzzNames(std::string_view text) {
  CheckError(ParseDType(text), "ParseDType");
  CheckError(ParseReduceOp(text), "ParseReduceOp");
  CheckError(ParsePlannerKind(text), "ParsePlannerKind");
  auto st = LoaderState::Parse(text);
  CheckError(st, "LoaderState::Parse");
  if (st.ok()) {
    auto again = LoaderState::Parse(st->ToString());
    FUZZ_CHECK(again.ok() && *again == *st, "LoaderState round trip of '" << text << "'");
  }
}

}  // namespace
}  // namespace meshflow::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  meshflow::fuzz::FuzzInput in(data, size);
  // '0'..'6' select the modes, so seed files are plain text ("0S(0),R,P(sum)").
  const int mode = static_cast<uint8_t>(in.Byte() - '0') % 7;
  const std::string_view text = in.Rest();
  switch (mode) {
    case 0: meshflow::fuzz::FuzzPlacements(text); break;
    case 1: meshflow::fuzz::FuzzPlacement(text); break;
    case 2: meshflow::fuzz::FuzzShardOrder(text); break;
    case 3: meshflow::fuzz::FuzzTopology(text); break;
    case 4: meshflow::fuzz::FuzzMeshSpec(text); break;
    case 5: meshflow::fuzz::FuzzLayoutSpec(text); break;
    default: meshflow::fuzz::FuzzNames(text); break;
  }
  return 0;
}
