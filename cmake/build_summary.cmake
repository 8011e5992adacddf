# What this configuration compiles, printed and written to <build>/dhp_build.txt, which
# tools/test.sh and tools/gpu-check.sh check (together with dhp-rank --build-info).
get_property(libs GLOBAL PROPERTY DHP_LIBRARIES)
get_property(bins GLOBAL PROPERTY DHP_BINARIES)
get_property(tests GLOBAL PROPERTY DHP_TESTS)
list(LENGTH libs n_libs)
list(LENGTH bins n_bins)
list(LENGTH tests n_tests)
if(NOT DHP_HAVE_TORCH)
  set(Torch_VERSION "none")
  set(DHP_GLOO_FROM "none")
endif()
set(summary "torch_version=${Torch_VERSION}
torch_prefix=${TORCH_INSTALL_PREFIX}
torch_cuda=${DHP_TORCH_HAS_CUDA}
nccl=${DHP_COMM_NCCL}
nccl_include=${DHP_NCCL_INCLUDE_DIR}
gloo=${DHP_GLOO_FROM}
tests_built=${DHP_BUILD_TESTS}
libtorch_only=${DHP_LIBTORCH_ONLY}
libraries=${n_libs}
binaries=${n_bins}
test_binaries=${n_tests}
")
file(WRITE ${PROJECT_BINARY_DIR}/dhp_build.txt "${summary}")
string(REPLACE "\n" "; " oneline "${summary}")
message(STATUS "dhp build: ${oneline}")
