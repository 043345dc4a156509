# Dependencies that may come from build-deps/ (scripts/stage-deps.sh) instead of packages, on a
# machine with a LibTorch but no package registry (the core builds alone). Packages
# win when present.
set(DDPD_DEPS_DIR "${PROJECT_SOURCE_DIR}/build-deps" CACHE PATH "Staged headers and googletest")

function(ddpd_header_only_dependency package target header)
  find_package(${package} QUIET)
  if(TARGET ${target})
    return()
  endif()
  if(NOT EXISTS "${DDPD_DEPS_DIR}/include/${header}")
    message(FATAL_ERROR "${package} not found: install it (scripts/setup.sh) or stage it "
                        "(scripts/stage-deps.sh) into ${DDPD_DEPS_DIR}")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  target_include_directories(${target} INTERFACE "${DDPD_DEPS_DIR}/include")
  message(STATUS "${package}: staged headers in ${DDPD_DEPS_DIR}/include")
endfunction()

ddpd_header_only_dependency(nlohmann_json nlohmann_json::nlohmann_json nlohmann/json.hpp)
ddpd_header_only_dependency(CLI11 CLI11::CLI11 CLI/CLI.hpp)

# GoogleTest: the package, else its staged sources built here (with LibTorch's ABI flags,
# which the top level applies to every C++ target).
macro(ddpd_find_gtest)
  find_package(GTest QUIET)
  if(NOT TARGET GTest::gtest_main)
    if(NOT EXISTS "${DDPD_DEPS_DIR}/googletest/CMakeLists.txt")
      message(FATAL_ERROR "GoogleTest not found: install libgtest-dev (scripts/setup.sh) or "
                          "stage it (scripts/stage-deps.sh) into ${DDPD_DEPS_DIR}")
    endif()
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory("${DDPD_DEPS_DIR}/googletest" "${CMAKE_BINARY_DIR}/staged-googletest"
                     EXCLUDE_FROM_ALL)
    message(STATUS "GoogleTest: built from ${DDPD_DEPS_DIR}/googletest")
  endif()
endmacro()
