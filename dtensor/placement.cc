#include "meshflow/dtensor/placement.h"

#include <cctype>
#include <charconv>

namespace meshflow {
namespace {

std::string StripSpaces(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!std::isspace(static_cast<unsigned char>(c))) out += c;
  }
  return out;
}

Status BadPlacement(std::string_view text, std::string_view why) {
  return InvalidArgumentError("bad placement '" + std::string(text) + "': " + std::string(why) +
                              "; expected one of S(<dim>), R, P, P(sum|avg|max|min)");
}

}  // namespace

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

StatusOr<ReduceOp> ParseReduceOp(std::string_view s) {
  if (s == "sum") return ReduceOp::kSum;
  if (s == "avg" || s == "mean") return ReduceOp::kAvg;
  if (s == "max") return ReduceOp::kMax;
  if (s == "min") return ReduceOp::kMin;
  return InvalidArgumentError("unknown reduce op '" + std::string(s) + "'; expected one of sum, avg, max, min");
}

std::string ToString(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return "S(" + std::to_string(s->dim) + ")";
  if (IsReplicate(p)) return "R";
  return "P(" + std::string(ReduceOpName(std::get<Partial>(p).op)) + ")";
}

std::string ToString(std::span<const Placement> ps) {
  std::string out;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i) out += ",";
    out += ToString(ps[i]);
  }
  return out;
}

StatusOr<Placement> ParsePlacement(std::string_view text) {
  const std::string s = StripSpaces(text);
  if (s.empty()) return BadPlacement(text, "empty");
  if (s == "R") return Placement(Replicate{});
  if (s == "P") return Placement(Partial{ReduceOp::kSum});
  const char kind = s[0];
  if ((kind != 'S' && kind != 'P') || s.size() < 3 || s[1] != '(' || s.back() != ')') {
    return BadPlacement(text, "unknown form");
  }
  const std::string_view inner(s.data() + 2, s.size() - 3);
  if (kind == 'P') {
    auto op = ParseReduceOp(inner);
    if (!op.ok()) {  // the reduce op's message lists the valid ops
      return InvalidArgumentError("bad placement '" + std::string(text) + "': " + op.status().message());
    }
    return Placement(Partial{*op});
  }
  int dim = 0;
  auto [ptr, ec] = std::from_chars(inner.data(), inner.data() + inner.size(), dim);
  if (inner.empty() || ec != std::errc() || ptr != inner.data() + inner.size()) {
    return BadPlacement(text, "shard dim is not an integer");
  }
  if (dim < 0) return BadPlacement(text, "shard dim is negative");
  return Placement(Shard{dim});
}

StatusOr<Placements> ParsePlacements(std::string_view text) {
  Placements out;
  const std::string s = StripSpaces(text);
  if (s.empty()) return InvalidArgumentError("empty placements list");
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && s[i] == '(') ++depth;
    if (i < s.size() && s[i] == ')') --depth;
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      MF_ASSIGN_OR_RETURN(Placement p, ParsePlacement(std::string_view(s).substr(start, i - start)));
      out.push_back(p);
      start = i + 1;
    }
  }
  return out;
}

}  // namespace meshflow
