# LibTorch, Gloo and NCCL as third_party_torch and third_party_gloo, and the switches the
# generated packages test: DHP_HAVE_TORCH, DHP_TORCH_HAS_CUDA, DHP_COMM_NCCL.
#
# Two LibTorch builds are supported: Debian's 1.13 (CPU only; Gloo is its own library,
# libgloo) and PyTorch's 2.x wheel (CUDA; Gloo is linked into libtorch_cpu and NCCL comes with
# the nvidia-nccl wheel). Neither ships Gloo's headers with the library, so both compile
# against Debian's libgloo-dev; ProcessGroupGloo.hpp of 2.x checks for the newer Gloo store API
# (GLOO_STORE_HAS_STORE_V2) and compiles without it.

# TorchConfig.cmake looks for libc10.so and libtorch.so with find_library, which searches the
# system folders before TORCH_INSTALL_PREFIX/lib: with Debian's libtorch-dev installed beside a
# PyTorch wheel it would mix the two. Point those lookups at the wheel's own files first.
foreach(p ${CMAKE_PREFIX_PATH} ${Torch_DIR}/../..)
  if(EXISTS ${p}/Torch/TorchConfig.cmake AND EXISTS ${p}/../../lib/libc10.so)
    get_filename_component(prefix ${p}/../.. ABSOLUTE)
    set(c10_LIBRARY ${prefix}/lib/libc10.so CACHE FILEPATH "LibTorch's c10" FORCE)
    set(TORCH_LIBRARY ${prefix}/lib/libtorch.so CACHE FILEPATH "LibTorch's torch" FORCE)
    break()
  endif()
endforeach()

if(DHP_REQUIRE_GPU_BUILD)
  find_package(Torch REQUIRED)
else()
  find_package(Torch QUIET)
endif()
if(NOT Torch_FOUND)
  set(DHP_HAVE_TORCH OFF)
  set(DHP_TORCH_HAS_CUDA OFF)
  set(DHP_COMM_NCCL OFF)
  message(STATUS "LibTorch not found: the worker's LibTorch targets are not built")
  return()
endif()
set(DHP_HAVE_TORCH ON)
foreach(lib ${TORCH_LIBRARY} ${c10_LIBRARY})
  if(NOT lib MATCHES "^${TORCH_INSTALL_PREFIX}/")
    message(FATAL_ERROR "LibTorch at ${TORCH_INSTALL_PREFIX} resolved ${lib} from elsewhere; "
            "delete the build folder's CMakeCache.txt and configure again")
  endif()
endforeach()
set(DHP_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda)
  set(DHP_TORCH_HAS_CUDA ON)
endif()

# PyTorch's include folder carries protobuf 3.13 headers (for ONNX) that would shadow Debian's
# 3.21, against which dhp's generated *.pb.h are compiled. Point the compiler at a copy of that
# folder made of links to everything but google/.
set(DHP_TORCH_INCLUDE_DIRS ${TORCH_INCLUDE_DIRS})
set(torch_include ${TORCH_INSTALL_PREFIX}/include)
# (Not for a LibTorch in /usr: mirroring the system include folder would break libstdc++.)
if(IS_DIRECTORY ${torch_include}/google AND
   NOT torch_include IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
  set(filtered ${PROJECT_BINARY_DIR}/torch_include)
  file(REMOVE_RECURSE ${filtered})
  file(MAKE_DIRECTORY ${filtered})
  file(GLOB entries RELATIVE ${torch_include} ${torch_include}/*)
  foreach(e ${entries})
    if(NOT e STREQUAL "google")
      file(CREATE_LINK ${torch_include}/${e} ${filtered}/${e} SYMBOLIC)
    endif()
  endforeach()
  string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" torch_include_re "${torch_include}")
  list(TRANSFORM DHP_TORCH_INCLUDE_DIRS REPLACE "^${torch_include_re}" "${filtered}")
  foreach(t torch torch_cpu torch_cuda c10 c10_cuda torch_library)
    if(TARGET ${t})
      get_target_property(dirs ${t} INTERFACE_INCLUDE_DIRECTORIES)
      if(dirs)
        list(FILTER dirs EXCLUDE REGEX "^${torch_include_re}")
        set_target_properties(${t} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
      endif()
    endif()
  endforeach()
endif()

add_library(third_party_torch INTERFACE)
target_link_libraries(third_party_torch INTERFACE ${TORCH_LIBRARIES} Threads::Threads)
target_include_directories(third_party_torch SYSTEM INTERFACE ${DHP_TORCH_INCLUDE_DIRS})
separate_arguments(torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(third_party_torch INTERFACE ${torch_flags})
# gRPC's pkg-config flags define NOMINMAX; define it for every LibTorch target so that all of
# them compile with the same macros as the precompiled header (below).
target_compile_definitions(third_party_torch INTERFACE NOMINMAX)

# Gloo: headers from libgloo-dev; the library is libgloo unless libtorch_cpu already has it.
find_path(DHP_GLOO_INCLUDE_DIR gloo/context.h REQUIRED)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_INCLUDES ${DHP_GLOO_INCLUDE_DIR})
set(CMAKE_REQUIRED_LIBRARIES ${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so)
check_cxx_source_compiles("#include <gloo/context.h>
int main() { gloo::Context c(0, 1); return c.size - 1; }" DHP_TORCH_BUNDLES_GLOO)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
add_library(third_party_gloo INTERFACE)
target_include_directories(third_party_gloo SYSTEM INTERFACE ${DHP_GLOO_INCLUDE_DIR})
if(DHP_TORCH_BUNDLES_GLOO)
  set(DHP_GLOO_FROM "libtorch_cpu")
else()
  find_library(DHP_GLOO_LIBRARY gloo REQUIRED)
  target_link_libraries(third_party_gloo INTERFACE ${DHP_GLOO_LIBRARY})
  set(DHP_GLOO_FROM "${DHP_GLOO_LIBRARY}")
endif()

# NCCL (ProcessGroupNCCL): with a CUDA LibTorch and nccl.h from the nvidia-nccl wheel beside
# torch/, NCCL_HOME or the CUDA toolkit.
set(DHP_COMM_NCCL OFF)
if(DHP_TORCH_HAS_CUDA)
  find_path(DHP_NCCL_INCLUDE_DIR nccl.h
            HINTS ${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include $ENV{NCCL_HOME}/include
                  ${TORCH_INSTALL_PREFIX}/../nvidia/cu13/include /usr/local/cuda/include)
  if(DHP_NCCL_INCLUDE_DIR)
    set(DHP_COMM_NCCL ON)
  endif()
endif()
if(DHP_REQUIRE_GPU_BUILD AND NOT (DHP_TORCH_HAS_CUDA AND DHP_COMM_NCCL))
  message(FATAL_ERROR "DHP_REQUIRE_GPU_BUILD: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}"
          " has CUDA: ${DHP_TORCH_HAS_CUDA}; nccl.h found: ${DHP_COMM_NCCL}. Configure with"
          " CMAKE_PREFIX_PATH from torch.utils.cmake_prefix_path of a CUDA build of PyTorch.")
endif()

# One precompiled header of the common LibTorch includes, reused by every target that needs
# LibTorch (the TORCH flag of the rules in dhp_rules.cmake).
option(DHP_TORCH_PCH "Precompile the common LibTorch headers once" ON)
if(DHP_TORCH_PCH)
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/torch_pch.cc  # rewritten only when it changes
       CONTENT "// builds the precompiled third_party/torch_pch.h\n")
  add_library(dhp_torch_pch STATIC ${PROJECT_BINARY_DIR}/torch_pch.cc)
  target_link_libraries(dhp_torch_pch PRIVATE third_party_torch)
  target_precompile_headers(dhp_torch_pch PRIVATE ${PROJECT_SOURCE_DIR}/third_party/torch_pch.h)
endif()
