# Compiler cache and fast linker, each used only when present.
find_program(VOLSHARD_CCACHE ccache)
if(VOLSHARD_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  # ccache caches sources built with a precompiled header (volshard_precompile_torch)
  # only with this sloppiness: the header's own macros and __TIME__ are not hashed.
  set(CMAKE_CXX_COMPILER_LAUNCHER
    ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros ${VOLSHARD_CCACHE})
endif()

include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=lld" VOLSHARD_HAVE_LLD)
if(VOLSHARD_HAVE_LLD)
  add_link_options(-fuse-ld=lld)
endif()

# RelWithDebInfo's debug info. "lines" (-g1, the default for volshard's own
# build): file:line and function names, what backtraces, perf and the
# sanitizers' reports need. "full" (-g): variables and types as well, for gdb.
# Full debug info of LibTorch's types is most of a source's compile time: a
# transforms source takes 33 s with -g and 11 s with -g1 (-O2, one core,
# docs/platform.md trap 10), and the cold build of every target about 1.6x as
# long. A consumer's add_subdirectory keeps its own flags.
set(VOLSHARD_DEBUG_INFO lines CACHE STRING
  "RelWithDebInfo's debug info: lines (-g1, backtraces and profiles) or full (-g, for gdb)")
set_property(CACHE VOLSHARD_DEBUG_INFO PROPERTY STRINGS lines full)
if(NOT VOLSHARD_DEBUG_INFO MATCHES "^(lines|full)$")
  message(FATAL_ERROR "VOLSHARD_DEBUG_INFO=${VOLSHARD_DEBUG_INFO}: must be lines or full")
endif()
if(VOLSHARD_TOP_LEVEL AND VOLSHARD_DEBUG_INFO STREQUAL "lines")
  string(REGEX REPLACE "(^| )-g( |$)" "\\1-g1\\2" CMAKE_CXX_FLAGS_RELWITHDEBINFO
    "${CMAKE_CXX_FLAGS_RELWITHDEBINFO}")
endif()
