# volshard_library(<name> [CONVERSION] SOURCES <file>...): what every library
# of the tree shares, in one place (as abseil's absl_cc_library): the target
# volshard_<name>, its alias volshard::<name> and export name <name> (what
# find_package(volshard) consumers link), its public headers in this folder's
# include/, C++17 and our warnings (-Wconversion with CONVERSION). What
# differs (link libraries, definitions, private include folders) stays beside
# the call.
function(volshard_library name)
  cmake_parse_arguments(L "CONVERSION" "" "SOURCES" ${ARGN})
  set(target volshard_${name})
  add_library(${target} ${L_SOURCES})
  add_library(volshard::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_17)
  if(L_CONVERSION)
    volshard_set_warnings(${target} CONVERSION)
  else()
    volshard_set_warnings(${target})
  endif()
endfunction()

# volshard_precompile_torch(<target>): the target's sources that include
# <torch/torch.h> take it precompiled, once per target; the others are built as
# they are, so that none leans on a header it does not include. Parsing
# torch.h is about 36 of a trainer source's 50-60 seconds (-O2 -g, one core:
# docs/platform.md); the precompiled header costs about 50 seconds and 0.9 GB
# once. A source that starts including it after CMake ran is built without
# (slower, the same object) until CMake runs again. VOLSHARD_PRECOMPILE_TORCH
# OFF builds every source plainly.
option(VOLSHARD_PRECOMPILE_TORCH "Precompile <torch/torch.h> for the sources that include it" ON)
function(volshard_precompile_torch target)
  if(NOT VOLSHARD_PRECOMPILE_TORCH)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  set(including 0)
  foreach(source IN LISTS sources)
    get_filename_component(path ${source} ABSOLUTE)
    file(STRINGS ${path} includes REGEX "^#include <torch/torch\\.h>")
    if(includes)
      math(EXPR including "${including} + 1")
    else()
      set_source_files_properties(${source} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
  if(including GREATER 1)  # one source gains nothing from a header of its own
    target_precompile_headers(${target} PRIVATE <torch/torch.h>)
  endif()
endfunction()
