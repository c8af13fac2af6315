#!/usr/bin/env python3
"""Writes the hand-made seeds of tests/fuzz/corpus/ (run from the repository root).

layout_parser seeds are text: a mode digit ('0'..'6', see layout_parser_fuzzer.cc) then the text.
planner_executor seeds are bytes in the decoding order of planner_executor_fuzzer.cc; `case()`
below spells one out, `hops()` the structure-aware tail of further target layouts (a chain). Seeds found by libFuzzer (crashes turned regressions, merged corpus) live
next to these under other names and are not touched by this script.
"""
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

LAYOUT_SEEDS = {
    "placements_basic": "0S(0),R,P(sum)",
    "placements_spaces": "0 S( 1 ) , R ,P",
    "placements_all_ops": "0P(avg),P(max),P(min),P(mean)",
    "placements_nested_parens": "0S((0)),R",
    "placements_negative": "0S(-1)",
    "placements_huge_dim": "0S(99999999999999999999)",
    "placements_empty_item": "0S(0),,R",
    "placement_partial": "1P(avg)",
    "placement_bad_op": "1P(prod)",
    "placement_unbalanced": "1S(0",
    "order_basic": "20:[1,0];2:[0,2]",
    "order_twice": "20:[1];0:[0]",
    "order_big_dim": "265:[0]",
    "order_trailing_comma": "20:[1,]",
    "order_empty_list": "20:[]",
    "topology_full": "3intra=1,2;bw_intra=150;bw_inter=25;lat_intra=2;lat_inter=10",
    "topology_none_intra": "3intra=;bw_inter=12.5",
    "topology_all": "3intra=all",
    "topology_bad_number": "3bw_intra=1e999",
    "topology_zero_bw": "3bw_inter=0",
    "topology_repeat_dim": "3intra=1,1",
    "mesh_names": "42x2x2|dp,tp,cp",
    "mesh_zero": "42x0",
    "mesh_huge": "41073741824x2",
    "mesh_overflow": "49223372036854775807x9223372036854775807",
    "mesh_dup_names": "42x2|a,a",
    "mesh_bad_int": "42xx2",
    "layout_nested": "52x2|8,6|S(0),S(0)|0:[1,0]",
    "layout_uneven": "54|5|S(0)|",
    "layout_zero_size": "52x2|0,3|S(0),S(1)|",
    "layout_scalar_shard": "52||S(0)|",
    "layout_mixed_partial": "52x2|4,4|P(sum),P(max)|",
    "layout_bad_order": "52x2|8,6|S(0),S(1)|0:[1,0]",
    "layout_huge_shape": "52|9223372036854775807|S(0)|",
    "layout_huge_2d": "52x2|4611686018427387904,4611686018427387904|S(0),S(1)|",
    "layout_negative_shape": "52|-4|R|",
    "names_dtype": "6bf16",
    "names_loader_state": "6meshflow.data.LoaderState v1 seed=42 epoch=3 consumed=128 num_samples=1000",
    "names_loader_state_bad": "6meshflow.data.LoaderState v1 seed=42 epoch=-3 consumed=1 num_samples=1",
    "names_planner": "6greedy",
}

DTYPES = ["f32", "f64", "bf16", "i32", "i64"]
PLANNERS = ["optimal", "greedy", "direct"]
OPS = ["sum", "avg", "max", "min"]


def placements(ps):
    out = []
    for p in ps:
        if p == "R":
            out += [2]
        elif p.startswith("S"):
            out += [0, int(p[2:-1])]
        elif p == "P" or p == "P(sum)":
            out += [3]
        else:
            out += [4, OPS.index(p[2:-1])]
    return out


def case(mesh, shape, dtype, planner, src, dst, flag=0, bad_rank=0, src_order=(0,), dst_order=(0,)):
    """src_order / dst_order: raw order bytes ((0,) = default; (1, swaps...) = permutation)."""
    out = [len(mesh) - 1]
    prod = 1
    for s in mesh:
        assert s - 1 < 8 // prod, mesh
        out.append(s - 1)
        prod *= s
    out.append(len(shape))
    out += list(shape)
    out += [DTYPES.index(dtype), PLANNERS.index(planner), flag, bad_rank]
    out += placements(src) + list(src_order) + placements(dst) + list(dst_order)
    return bytes(out)


PLANNER_SEEDS = {
    "1d_gather": case([4], [5], "f32", "optimal", ["S(0)"], ["R"]),
    "1d_scatter_i32": case([3], [7, 2], "i32", "optimal", ["R"], ["S(1)"]),
    "1d_partial_sum_to_shard": case([4], [6], "f64", "optimal", ["P"], ["S(0)"]),
    "1d_partial_avg_reduce": case([2], [3, 3], "i64", "optimal", ["P(avg)"], ["R"]),
    "1d_partial_max_bf16": case([4], [5], "bf16", "optimal", ["P(max)"], ["S(0)"]),
    "1d_all_to_all_uneven": case([3], [5, 4], "f32", "optimal", ["S(0)"], ["S(1)"]),
    "2d_transpose": case([2, 2], [5, 6], "f32", "optimal", ["S(0)", "S(1)"], ["S(1)", "S(0)"]),
    "2d_nested_order": case([2, 2], [8, 6], "f32", "optimal", ["S(0)", "S(0)"], ["S(0)", "S(0)"],
                            dst_order=(1, 0)),
    "2d_greedy": case([2, 4], [8, 8], "f32", "greedy", ["S(0)", "S(1)"], ["R", "S(0)"]),
    "2d_direct": case([2, 2], [4, 5], "i32", "direct", ["S(0)", "R"], ["R", "S(1)"]),
    "2d_direct_partial_src": case([2, 2], [4], "f32", "direct", ["P", "R"], ["R", "R"]),
    "2d_r_to_partial": case([2, 2], [3, 3], "i32", "optimal", ["R", "R"], ["P", "S(0)"]),
    "2d_partial_to_other_partial": case([2, 2], [4], "f32", "optimal", ["P(sum)", "R"], ["P(max)", "R"]),
    "2d_mixed_ops_invalid": case([2, 2], [4], "f32", "optimal", ["P(sum)", "P(avg)"], ["R", "R"]),
    "3d_full": case([2, 2, 2], [4, 4, 4], "f32", "optimal", ["S(0)", "S(1)", "S(2)"], ["S(2)", "S(1)", "S(0)"]),
    "3d_zero_size": case([2, 2, 2], [0, 3, 2], "f64", "optimal", ["S(0)", "S(0)", "R"], ["R", "S(1)", "S(0)"]),
    "3d_partial_chain": case([2, 1, 2], [3, 5], "bf16", "optimal", ["P", "S(1)", "P"], ["S(0)", "R", "S(0)"]),
    "scalar_replicate_partial": case([4], [], "f32", "optimal", ["R"], ["P(avg)"]),
    "scalar_shard_invalid": case([2], [], "f32", "optimal", ["S(0)"], ["R"]),
    "shard_dim_out_of_range": case([2], [4], "f32", "optimal", ["S(1)"], ["R"]),
    "other_shape": case([2], [4], "f32", "optimal", ["S(0)"], ["R"], flag=1),
    "other_mesh": case([2, 4], [4, 4], "f32", "optimal", ["S(0)", "R"], ["R", "R"], flag=2),
    "bad_local_shape": case([2, 2], [4, 4], "f32", "optimal", ["S(0)", "S(1)"], ["R", "R"], flag=3, bad_rank=3),
    "bad_local_shape_noop_plan": case([4], [4], "f32", "optimal", ["S(0)"], ["S(0)"], flag=3, bad_rank=1),
    "bad_local_dtype": case([2], [4], "i64", "greedy", ["S(0)"], ["R"], flag=4, bad_rank=1),
    "inter_node": case([2, 4], [8, 8], "f32", "optimal", ["S(0)", "S(1)"], ["S(1)", "S(0)"], flag=5),
    "nonsense_order": case([2, 2], [4, 4], "f32", "optimal", ["S(0)", "S(0)"], ["R", "R"],
                           src_order=(2, 3, 2, 0, 1, 1, 3)),
    "eight_ranks_1d": case([8], [3, 5], "i32", "optimal", ["S(1)"], ["S(0)"]),
    "eight_ranks_greedy_partial": case([2, 4], [6], "f32", "greedy", ["P(min)", "S(0)"], ["R", "R"]),
    "single_rank": case([1], [2, 2], "f64", "optimal", ["S(0)"], ["P"]),
    "empty_input": b"",
}


def hops(*steps):
    """Structure-aware tail: more target layouts after the case, each (planner, placements[, order])."""
    out = []
    for step in steps:
        planner, ps = step[0], step[1]
        order = step[2] if len(step) > 2 else (0,)
        out += [PLANNERS.index(planner)] + placements(ps) + list(order)
    return bytes(out)


# Chains (from -> to -> hop1 -> ...): each hop is planned from the previous target and executed in
# the same Run. Partial and nested-order intermediates, all three planners, refused hops.
PLANNER_SEEDS.update({
    "chain_2d_round_trip": case([2, 2], [5, 6], "f32", "optimal", ["S(0)", "S(1)"], ["S(1)", "S(0)"])
    + hops(("optimal", ["R", "S(0)"]), ("greedy", ["S(0)", "R"]), ("optimal", ["S(0)", "S(1)"])),
    "chain_partial_middle": case([2, 2], [4, 4], "i32", "optimal", ["R", "R"], ["P", "S(0)"])
    + hops(("optimal", ["S(1)", "S(0)"]), ("direct", ["R", "R"]), ("optimal", ["P(avg)", "R"]),
           ("optimal", ["S(0)", "R"])),
    "chain_nested_orders": case([2, 2], [8, 6], "f64", "optimal", ["S(0)", "S(0)"], ["S(0)", "S(0)"], dst_order=(1, 0))
    + hops(("optimal", ["S(1)", "S(1)"], (1, 1)), ("optimal", ["S(0)", "S(1)"]), ("optimal", ["R", "R"])),
    "chain_3d_uneven": case([2, 2, 2], [3, 5, 2], "bf16", "optimal", ["S(0)", "S(1)", "S(2)"], ["R", "S(0)", "R"])
    + hops(("greedy", ["S(1)", "R", "S(0)"]), ("optimal", ["P(max)", "R", "R"]), ("optimal", ["S(2)", "S(1)", "S(0)"])),
    "chain_refused_hop": case([4], [6], "f32", "optimal", ["S(0)"], ["P(sum)"])
    + hops(("optimal", ["P(max)"]), ("optimal", ["R"])),
    "chain_eight_ranks": case([8], [9, 3], "i64", "optimal", ["S(0)"], ["S(1)"])
    + hops(("direct", ["S(0)"]), ("optimal", ["P(min)"]), ("greedy", ["R"]), ("optimal", ["S(1)"])),
})


def main():
    for target, seeds in (("layout_parser", LAYOUT_SEEDS), ("planner_executor", PLANNER_SEEDS)):
        d = os.path.join(ROOT, target)
        os.makedirs(d, exist_ok=True)
        for name, data in seeds.items():
            with open(os.path.join(d, "seed_" + name), "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)


if __name__ == "__main__":
    main()
