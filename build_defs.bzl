"""C++ rules for meshflow's own targets: every header reads `meshflow/<folder>/<file>.h`.

Every cc_library, cc_test and cc_binary of the project is declared through these wrappers so that

  * headers are exposed under the `meshflow/` include prefix (a consumer's own `base/status.h`
    can never shadow `meshflow/base/status.h`);
  * C++20 and the project's warning flags come with the targets themselves: a consumer's default
    toolchain flags suffice to build them (no --cxxopt in the consumer's .bazelrc).

`-Werror` is not part of MESHFLOW_COPTS: the project's own .bazelrc adds it to project code, so
that a consumer on another compiler version gets warnings, not a failed build.

Code of a consumer that includes meshflow headers is C++20 too; MESHFLOW_COPTS (or just
"-std=c++20") serves for its own targets:

    load("@meshflow//:build_defs.bzl", "MESHFLOW_COPTS")
    cc_binary(name = "app", srcs = ["app.cc"], copts = MESHFLOW_COPTS, deps = ["@meshflow"])
"""

MESHFLOW_COPTS = ["-std=c++20", "-Wall", "-Wextra", "-Wno-unused-parameter"]

# meshflow's libraries optimize themselves in a fastbuild (Bazel's default, -O0): at -O0 one eager
# training step ran 38x slower than with -c opt (every Tensor access a call, every loop scalar),
# so a consumer who builds with no flags would measure the library at its worst. -O1 costs little
# compile time and brings the step within 1.2x of -c opt (bench/README.md, "A consumer's
# default build"). `-c opt` and `-c dbg` keep their own levels (nothing added), and
# `--define=meshflow_optimize=off` turns it off in a fastbuild, for stepping through meshflow in a
# debugger. GCC 12 reports false -Wmaybe-uninitialized through std::optional (StatusOr) at -O1.
def _optimize_copts():
    return select({
        str(Label("//:fastbuild_optimize_off")): [],
        str(Label("//:fastbuild")): ["-O1", "-Wno-maybe-uninitialized"],
        "//conditions:default": [],
    })

def vectorize_copts():
    """Loop vectorization at any -O level above -O0, for the kernel targets. GCC 12's -O2 cost
    model ("very cheap") leaves every loop that needs an epilogue or an alias check scalar;
    `-fvect-cost-model=dynamic` lifts that. Clang vectorizes such loops already and rejects the
    flag."""
    return select({
        str(Label("//:compiler_clang")): ["-ftree-vectorize"],
        "//conditions:default": ["-ftree-vectorize", "-fvect-cost-model=dynamic"],
    })

def mf_cc_library(name, copts = [], **kwargs):
    """cc_library whose headers read `meshflow/<package>/<file>.h`, with the project's copts
    (and, in a fastbuild, -O1: see _optimize_copts)."""

    # Bazel strips the package path from headers when only include_prefix is given, so the
    # prefix names the package again.
    package = native.package_name()

    # Every header starts with MESHFLOW_CHECK_INCLUDE_PATH() (base/include_check.h).
    deps = kwargs.pop("deps", [])
    if not (package == "base" and name == "include_check"):
        deps = deps + [str(Label("//base:include_check"))]
    native.cc_library(
        name = name,
        copts = MESHFLOW_COPTS + copts + _optimize_copts(),
        include_prefix = "meshflow/" + package if package else "meshflow",
        deps = deps,
        **kwargs
    )

def mf_cc_test(name, copts = [], **kwargs):
    """cc_test with the project's copts."""
    native.cc_test(name = name, copts = MESHFLOW_COPTS + copts, **kwargs)

def mf_cc_binary(name, copts = [], **kwargs):
    """cc_binary with the project's copts."""
    native.cc_binary(name = name, copts = MESHFLOW_COPTS + copts, **kwargs)
