# The CMake counterparts of the Bazel rules our BUILD files use; tools/bazel_to_cmake.py writes
# calls to these. Targets are named after their label: //worker/rank:optimizer is
# worker_rank_optimizer, a cc_binary keeps its own name, a test's executable keeps its own name
# in its package's build folder and its CTest name is the label (worker/rank:dist_parity_test).

# Options shared by the library, test and binary rules:
#   SRCS files (headers too), DEPS targets, DEFINES private macros,
#   TORCH: needs LibTorch (compiled with the precompiled LibTorch header, DHP_TORCH_PCH),
#   CUDA: DHP_WITH_CUDA and torch_cuda where LibTorch has CUDA (DHP_TORCH_HAS_CUDA),
#   NCCL: USE_C10D_NCCL and nccl.h where NCCL support is on (DHP_COMM_NCCL).
# With DHP_LIBTORCH_ONLY=ON (tools/test.sh, after Bazel has built and tested everything) the
# targets without TORCH are left out of `all` and their tests are not registered: only the
# LibTorch targets, and what they link, are built (the LibTorch-free code is the same code built
# by the same compiler against the same system libraries as Bazel's build).
# Macros stay private to the target, so that every LibTorch target compiles with the same ones
# and can reuse the one precompiled header.
set(DHP_RULE_FLAGS TORCH CUDA NCCL)
set(DHP_RULE_ONE NAME SCRIPT TIMEOUT SHARDS)
set(DHP_RULE_MULTI SRCS DEPS DEFINES ARGS)

# The TORCH, CUDA and NCCL flags of `target`; `link` is PUBLIC, PRIVATE or INTERFACE.
function(dhp_torch_switches target link)
  cmake_parse_arguments(ARG "${DHP_RULE_FLAGS}" "" "" ${ARGN})
  if(DHP_LIBTORCH_ONLY AND NOT ARG_TORCH AND NOT link STREQUAL "INTERFACE")
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
  endif()
  set(private PRIVATE)
  if(link STREQUAL "INTERFACE")
    set(private INTERFACE)
  elseif(ARG_TORCH AND DHP_TORCH_PCH)
    target_precompile_headers(${target} REUSE_FROM dhp_torch_pch)
  endif()
  if(ARG_CUDA AND DHP_TORCH_HAS_CUDA)
    target_compile_definitions(${target} ${private} DHP_WITH_CUDA=1)
    target_link_libraries(${target} ${link} third_party_torch)
  endif()
  if(ARG_NCCL AND DHP_COMM_NCCL)
    target_compile_definitions(${target} ${private} USE_C10D_NCCL)
    target_include_directories(${target} ${private} ${DHP_NCCL_INCLUDE_DIR})
  endif()
endfunction()

# dhp_cc_library(target SRCS ... DEPS ...): a static library, or an interface library when it
# has no .cc file (header-only).
function(dhp_cc_library target)
  cmake_parse_arguments(ARG "${DHP_RULE_FLAGS}" "${DHP_RULE_ONE}" "${DHP_RULE_MULTI}" ${ARGN})
  set(cc ${ARG_SRCS})
  list(FILTER cc INCLUDE REGEX "\\.cc$")
  if(cc)
    add_library(${target} STATIC ${ARG_SRCS})
    target_link_libraries(${target} PUBLIC ${ARG_DEPS})
    target_compile_definitions(${target} PRIVATE ${ARG_DEFINES})
    dhp_torch_switches(${target} PUBLIC ${ARGN})
  else()
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${ARG_DEPS})
    dhp_torch_switches(${target} INTERFACE ${ARGN})
  endif()
  set_property(GLOBAL APPEND PROPERTY DHP_LIBRARIES ${target})
endfunction()

function(dhp_cc_binary target)
  cmake_parse_arguments(ARG "${DHP_RULE_FLAGS}" "${DHP_RULE_ONE}" "${DHP_RULE_MULTI}" ${ARGN})
  add_executable(${target} ${ARG_SRCS})
  target_link_libraries(${target} PRIVATE ${ARG_DEPS})
  target_compile_definitions(${target} PRIVATE ${ARG_DEFINES})
  dhp_torch_switches(${target} PRIVATE ${ARGN})
  set_property(GLOBAL APPEND PROPERTY DHP_BINARIES ${target})
endfunction()

# The label a CTest test is registered under: worker/rank:dist_parity_test.
function(dhp_test_label name out)
  file(RELATIVE_PATH pkg ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  set(${out} "${pkg}:${name}" PARENT_SCOPE)
endfunction()

# dhp_cc_test(target NAME n SRCS ... DEPS ... TIMEOUT s [SHARDS k]): a GoogleTest binary run
# from the source root (where its data files are), as k CTest tests when sharded like Bazel.
function(dhp_cc_test target)
  cmake_parse_arguments(ARG "${DHP_RULE_FLAGS}" "${DHP_RULE_ONE}" "${DHP_RULE_MULTI}" ${ARGN})
  add_executable(${target} ${ARG_SRCS})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${ARG_NAME})
  target_link_libraries(${target} PRIVATE ${ARG_DEPS})
  target_compile_definitions(${target} PRIVATE ${ARG_DEFINES})
  dhp_torch_switches(${target} PRIVATE ${ARGN})
  dhp_test_label(${ARG_NAME} label)
  if(DHP_LIBTORCH_ONLY AND NOT ARG_TORCH)
    return()
  endif()
  if(NOT ARG_SHARDS)
    set(ARG_SHARDS 1)
  endif()
  math(EXPR last "${ARG_SHARDS} - 1")
  foreach(i RANGE ${last})
    set(test ${label})
    if(ARG_SHARDS GREATER 1)
      set(test "${label}/shard${i}")
    endif()
    add_test(NAME ${test} COMMAND ${target} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(${test} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${ARG_SHARDS};GTEST_SHARD_INDEX=${i}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY DHP_TESTS ${target})
endfunction()

# dhp_sh_test(target [TORCH] NAME n SCRIPT s.sh [ARGS ...] TIMEOUT s): a shell script test
# (TORCH: a binary it runs needs LibTorch).
function(dhp_sh_test target)
  cmake_parse_arguments(ARG "${DHP_RULE_FLAGS}" "${DHP_RULE_ONE}" "${DHP_RULE_MULTI}" ${ARGN})
  if(DHP_LIBTORCH_ONLY AND NOT ARG_TORCH)
    return()
  endif()
  dhp_test_label(${ARG_NAME} label)
  add_test(NAME ${label} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/${ARG_SCRIPT} ${ARG_ARGS}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${label} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
endfunction()
