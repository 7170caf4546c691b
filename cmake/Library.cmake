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
