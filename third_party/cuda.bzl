"""Macros for CUDA targets: declared only where @local_cuda found a toolkit.

@local_cuda (third_party/repositories.bzl) writes defs.bzl with CUDA_AVAILABLE and CUDA_ROOT. On a
machine without /usr/local/cuda (or with --repo_env=MESHFLOW_DISABLE_CUDA=1) these macros declare
nothing, so `bazel test //...` builds and tests everything else; with a toolkit they declare the
targets and `bazel test //...` builds them (tests that need a GPU skip when none is present).

    load("//third_party:cuda.bzl", "cuda_object", "cuda_cc_library", "cuda_cc_test", "if_cuda")
    cuda_object(name = "kernels_o", src = "kernels.cu", hdrs = ["kernels_launch.h"])
    cuda_cc_library(name = "kernels", srcs = [":kernels_o", "kernels.cc"], ...)

nvcc is called from CUDA_ROOT/bin (an absolute path: nvcc locates cicc/ptxas relative to its real
install directory, which a symlinked repository would hide) with the host gcc, -Xcompiler -fPIC
(the object ends up in shared libraries of tests) and code for sm_90 (H100/H200) plus compute_90
PTX (JIT for newer GPUs). One fixed architecture keeps compile time small; edit NVCC_ARCH_FLAGS
to add one.
"""

load("@local_cuda//:defs.bzl", "CUDA_AVAILABLE", "CUDA_ROOT")
load("//:build_defs.bzl", "mf_cc_binary", "mf_cc_library", "mf_cc_test")

NVCC_ARCH_FLAGS = "-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90"

# -fmad=false: no multiply-add contraction, so device reductions round like the CPU ones.
NVCC_FLAGS = "-O2 -std=c++17 -Xcompiler -fPIC -fmad=false --expt-relaxed-constexpr -Werror all-warnings"

def if_cuda(if_true, if_false = []):
    """if_true where CUDA was detected, else if_false."""
    return if_true if CUDA_AVAILABLE else if_false

def cuda_object(name, src, hdrs = [], **kwargs):
    """Compiles one .cu file with nvcc into `<name>.o` (put the target in a cc_library's srcs)."""
    if not CUDA_AVAILABLE:
        return
    # Sources include project headers as "meshflow/<folder>/<file>.h": nvcc gets a temporary
    # include directory whose `meshflow` entry is this repository's root in the execroot ("." in
    # meshflow's own workspace, external/<name> when a consumer builds it).
    repo = native.repository_name()
    root = "." if repo == "@" else "external/" + repo[1:]
    native.genrule(
        name = name,
        srcs = [src] + hdrs + [str(Label("//base:include_check.h"))],
        outs = [name + ".o"],
        cmd = ("INC=$$(mktemp -d); trap 'rm -rf \"$$INC\"' EXIT; ln -s \"$$PWD/%s\" \"$$INC/meshflow\"; " +
               "%s/bin/nvcc -c %s %s -I\"$$INC\" $(location %s) -o $@") %
              (root, CUDA_ROOT, NVCC_FLAGS, NVCC_ARCH_FLAGS, src),
        message = "nvcc %s" % src,
        **kwargs
    )

def cuda_cc_library(**kwargs):
    if CUDA_AVAILABLE:
        mf_cc_library(**kwargs)

def cuda_cc_binary(**kwargs):
    if CUDA_AVAILABLE:
        mf_cc_binary(**kwargs)

def cuda_cc_test(**kwargs):
    if CUDA_AVAILABLE:
        mf_cc_test(**kwargs)

def cuda_sh_test(**kwargs):
    if CUDA_AVAILABLE:
        native.sh_test(**kwargs)
