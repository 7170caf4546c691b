# volshard_set_warnings(<target> [CONVERSION]): our warning set for our own
# code only; third-party headers come in as system includes and stay quiet.
function(volshard_set_warnings target)
  cmake_parse_arguments(W "CONVERSION" "" "" ${ARGN})
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow)
  if(W_CONVERSION)
    target_compile_options(${target} PRIVATE -Wconversion -Wsign-conversion)
  endif()
  if(VOLSHARD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
