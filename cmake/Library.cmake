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
  # The header itself is given at the end of configuration (volshard_share_precompiled_headers),
  # when every target's flags are known.
  set_property(GLOBAL APPEND PROPERTY VOLSHARD_PCH_TARGETS ${target})
  set_property(TARGET ${target} PROPERTY VOLSHARD_PCH_HEADER ${header})
endfunction()

# Called once, at the end of the top-level CMakeLists.txt: each target that
# volshard_precompile_torch chose gets its header, built once for the targets
# that can share it. GCC takes a precompiled header only where it was built
# with the same -fPIC or -fPIE, debug info and -m options, and with no macro
# that the user does not define alike (a target's own macros, warnings and
# include folders it may add). So a group of targets with the same header and
# the same position-independence takes the header from a target of its own,
# volshard_pch_<group>, that has LibTorch's flags and macros alone: the tests'
# <ATen/ATen.h> is built once for transforms_tests, datasets_tests and
# bench_pipeline, and <torch/torch.h> once for volshard_trainer and
# trainer_tests (about 18 s and 36 s a build on this project's 2-core machine;
# docs/platform.md). A target alone in its group builds its own. -Winvalid-pch
# (which CMake adds) with -Werror fails a build whose header GCC refused.
function(volshard_share_precompiled_headers)
  get_property(targets GLOBAL PROPERTY VOLSHARD_PCH_TARGETS)
  set(groups)
  foreach(target IN LISTS targets)
    get_target_property(header ${target} VOLSHARD_PCH_HEADER)
    # What CMake passes: -fPIE to an executable, -fPIC to a library, or nothing.
    get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
    get_target_property(type ${target} TYPE)
    if(NOT pic)
      set(pic none)
    elseif(type STREQUAL "EXECUTABLE")
      set(pic pie)
    else()
      set(pic pic)
    endif()
    string(MAKE_C_IDENTIFIER "${header}_${pic}" group)
    list(APPEND groups ${group})
    list(APPEND members_${group} ${target})
    set(header_${group} ${header})
    set(pic_${group} ${pic})
  endforeach()
  list(REMOVE_DUPLICATES groups)
  foreach(group IN LISTS groups)
    # An OBJECT library compiles with -fPIC, never -fPIE: executables built position-independent
    # (-fPIE) each build their own header, as a target alone in its group does.
    list(LENGTH members_${group} count)
    if(count EQUAL 1 OR pic_${group} STREQUAL "pie")
      foreach(target IN LISTS members_${group})
        target_precompile_headers(${target} PRIVATE ${header_${group}})
      endforeach()
      continue()
    endif()
    set(owner volshard_pch_${group})
    set(source ${PROJECT_BINARY_DIR}/pch/${group}.cpp)
    file(CONFIGURE OUTPUT ${source} CONTENT
      "// ${header_${group}} precompiled once for ${members_${group}} (cmake/Library.cmake).\n")
    add_library(${owner} OBJECT ${source})
    target_link_libraries(${owner} PRIVATE torch)
    if(pic_${group} STREQUAL "none")
      set_target_properties(${owner} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    else()  # pic: -fPIC, as its libraries
      set_target_properties(${owner} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    endif()
    target_precompile_headers(${owner} PRIVATE ${header_${group}})
    foreach(target IN LISTS members_${group})
      target_precompile_headers(${target} REUSE_FROM ${owner})
    endforeach()
  endforeach()
endfunction()
