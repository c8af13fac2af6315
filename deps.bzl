"""meshflow_dependencies(): every external repository meshflow needs, for a consumer's WORKSPACE.

A consumer workspace (see README.md, "Use meshflow in your project", and examples/consumer/):

    local_repository(name = "meshflow", path = "/path/to/meshflow")   # or http_archive
    load("@meshflow//:deps.bzl", "meshflow_dependencies")
    meshflow_dependencies()

Nothing here downloads. It declares:
  * offline stand-ins for rules_cc, rules_java and remote_coverage_tools, which Bazel 4.2.3 would
    otherwise fetch from the network for any C++ build or test;
  * the Debian-installed libraries as system repositories: gtest, benchmark (tests and benches
    only), eigen (benches only: the Eigen GEMM baseline), openblas (the CPU matmul; OpenBLAS's
    pthread build, which picks its kernels for the CPU at run time), mpi (the MPI backend only;
    OpenMPI must be installed to build it);
  * local_cuda: the CUDA toolkit at $CUDA_PATH or /usr/local/cuda, or an empty stand-in without
    one (then CUDA targets are not declared; MESHFLOW_DISABLE_CUDA=1 forces that).
Repositories are fetched lazily: a consumer that never builds an MPI target needs no OpenMPI.
A repository the consumer declared earlier under the same name is kept (e.g. its own eigen).
"""

load("//third_party:repositories.bzl", "cuda_configure", "local_dir_repo", "system_repo")

_LIB = "/usr/lib/x86_64-linux-gnu"

def _maybe(rule, name, **kwargs):
    if not native.existing_rule(name):
        rule(name = name, **kwargs)

def meshflow_dependencies():
    """Declares the repositories above (each only where the workspace does not have it yet)."""

    # Bazel 4.2.3 itself loads these three repositories; local stand-ins keep it offline.
    _maybe(local_dir_repo, "rules_cc", marker = Label("//third_party/rules_cc:WORKSPACE"))
    _maybe(local_dir_repo, "rules_java", marker = Label("//third_party/rules_java:WORKSPACE"))
    _maybe(
        local_dir_repo,
        "remote_coverage_tools",
        marker = Label("//third_party/remote_coverage_tools:WORKSPACE"),
    )

    _maybe(
        system_repo,
        "gtest",
        build_file = Label("//third_party:gtest.BUILD"),
        install_hint = "apt-get install libgtest-dev libgmock-dev",
        links = {
            "include/gtest": "/usr/include/gtest",
            "include/gmock": "/usr/include/gmock",
            "lib/libgtest.a": _LIB + "/libgtest.a",
            "lib/libgmock.a": _LIB + "/libgmock.a",
        },
    )
    _maybe(
        system_repo,
        "benchmark",
        build_file = Label("//third_party:benchmark.BUILD"),
        install_hint = "apt-get install libbenchmark-dev",
        links = {
            "include/benchmark": "/usr/include/benchmark",
            "lib/libbenchmark.so": _LIB + "/libbenchmark.so",
        },
    )
    _maybe(
        system_repo,
        "eigen",
        build_file = Label("//third_party:eigen.BUILD"),
        install_hint = "apt-get install libeigen3-dev",
        links = {
            "include/Eigen": "/usr/include/eigen3/Eigen",
            "include/unsupported": "/usr/include/eigen3/unsupported",
        },
    )
    _maybe(
        system_repo,
        "openblas",
        build_file = Label("//third_party:openblas.BUILD"),
        install_hint = "apt-get install libopenblas-pthread-dev",
        links = {
            "include/cblas.h": "/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h",
            "include/openblas_config.h": "/usr/include/x86_64-linux-gnu/openblas-pthread/openblas_config.h",
            "lib/libopenblas.so": _LIB + "/openblas-pthread/libopenblas.so",
        },
    )
    _maybe(
        system_repo,
        "mpi",
        build_file = Label("//third_party:mpi.BUILD"),
        install_hint = "apt-get install libopenmpi-dev openmpi-bin",
        links = {
            "include": _LIB + "/openmpi/include",
            "lib": _LIB + "/openmpi/lib",
        },
    )
    _maybe(cuda_configure, "local_cuda", build_file = Label("//third_party:cuda.BUILD"))
