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

def mf_cc_library(name, copts = [], **kwargs):
    """cc_library whose headers read `meshflow/<package>/<file>.h`, with the project's copts."""

    # Bazel strips the package path from headers when only include_prefix is given, so the
    # prefix names the package again.
    package = native.package_name()
    native.cc_library(
        name = name,
        copts = MESHFLOW_COPTS + copts,
        include_prefix = "meshflow/" + package if package else "meshflow",
        **kwargs
    )

def mf_cc_test(name, copts = [], **kwargs):
    """cc_test with the project's copts."""
    native.cc_test(name = name, copts = MESHFLOW_COPTS + copts, **kwargs)

def mf_cc_binary(name, copts = [], **kwargs):
    """cc_binary with the project's copts."""
    native.cc_binary(name = name, copts = MESHFLOW_COPTS + copts, **kwargs)
