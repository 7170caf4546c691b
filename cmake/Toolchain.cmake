# Compiler cache and fast linker, each used only when present.
find_program(VOLSHARD_CCACHE ccache)
if(VOLSHARD_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${VOLSHARD_CCACHE})
endif()

include(CheckLinkerFlag)
check_linker_flag(CXX "-fuse-ld=lld" VOLSHARD_HAVE_LLD)
if(VOLSHARD_HAVE_LLD)
  add_link_options(-fuse-ld=lld)
endif()
