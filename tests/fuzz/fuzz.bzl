"""meshflow_fuzz_target: a libFuzzer target plus its seed-corpus replay test (tests/fuzz/)."""

load("//:build_defs.bzl", "mf_cc_binary", "mf_cc_library", "mf_cc_test")

def meshflow_fuzz_target(name, deps, size = "small"):
    """Declares <name>_fuzz_lib, <name>_fuzz_test and <name>_fuzzer.

    Args:
      name: the target's name; its source is <name>_fuzzer.cc and its seeds corpus/<name>/.
      deps: libraries the fuzzer source uses.
      size: size of the replay test.
    """
    mf_cc_library(
        name = name + "_fuzz_lib",
        testonly = True,
        srcs = [name + "_fuzzer.cc"],
        deps = deps + [":fuzz_input"],
        alwayslink = True,
    )
    mf_cc_test(
        name = name + "_fuzz_test",
        size = size,
        args = ["tests/fuzz/corpus/" + name],
        data = native.glob(["corpus/" + name + "/**"]),
        deps = [
            ":" + name + "_fuzz_lib",
            ":replay_main",
        ],
    )
    # Built only on request (run_fuzzers.sh names it): in the default config it is the same link
    # as the _fuzz_test above.
    mf_cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        tags = ["manual"],
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = [":" + name + "_fuzz_lib"] + select({
            ":fuzzing": [],
            "//conditions:default": [":replay_main"],
        }),
    )
