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
