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

# volshard_precompile_torch(<target>): LibTorch's heaviest header, precompiled
# once per target for the sources that include it: <torch/torch.h> where two or
# more of the target's sources include it, else <ATen/ATen.h> where three or
# more do. The others are built as they are, so that none leans on a header it
# does not include. Parsing the header is most of such a source's time, and
# full debug info (-g) of the types it declares most of the rest (docs/platform.md,
# trap 10): with -O2 -g1 a transforms source takes 10-13 s plainly and 3-4 s with
# <ATen/ATen.h> precompiled, which costs 23 s once; a trainer source with
# <torch/torch.h> about half. A source that starts including the header after
# CMake ran is built without (slower, the same object) until CMake runs again.
# VOLSHARD_PRECOMPILE_TORCH OFF builds every source plainly.
option(VOLSHARD_PRECOMPILE_TORCH
  "Precompile LibTorch's heaviest header for the sources that include it" ON)
function(volshard_precompile_torch target)
  if(NOT VOLSHARD_PRECOMPILE_TORCH)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  set(torch_sources)
  set(aten_sources)
  foreach(source IN LISTS sources)
    get_filename_component(path ${source} ABSOLUTE)
    # A source with options of its own (-ffp-contract=off, -mavx2) keeps them for every line it
    # compiles, the header's included.
    get_source_file_property(own_options ${source} TARGET_DIRECTORY ${target} COMPILE_OPTIONS)
    if(NOT path MATCHES "\\.cpp$" OR own_options)
      continue()
    endif()
    file(STRINGS ${path} includes REGEX "^#include <(torch/torch|ATen/ATen)\\.h>")
    if(includes MATCHES "torch/torch")
      list(APPEND torch_sources ${source})
    elseif(includes)
      list(APPEND aten_sources ${source})
    endif()
  endforeach()
  list(LENGTH torch_sources torch_count)
  list(LENGTH aten_sources aten_count)
  # One header a target (CMake's limit); a source or two gain nothing from a header of their own.
  if(torch_count GREATER 1)
    set(header <torch/torch.h>)
    set(taking ${torch_sources})
  elseif(aten_count GREATER 2)
    set(header <ATen/ATen.h>)
    set(taking ${aten_sources})
  else()
    return()
  endif()
  foreach(source IN LISTS sources)
    if(NOT source IN_LIST taking)
      set_source_files_properties(${source} TARGET_DIRECTORY ${target}
        PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
  target_precompile_headers(${target} PRIVATE ${header})
endfunction()
