# `cmake --install build --prefix P`: headers, static libraries, the tools and
# P/lib/cmake/volshard/ (volshardConfig.cmake, its version file and two export
# sets: the std-only libraries, and those that need LibTorch, so that
# find_package(volshard COMPONENTS sampler) works on a machine without it).
include(CMakePackageConfigHelpers)
set(VOLSHARD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/volshard)

install(TARGETS volshard_core volshard_sampler volshard_volume_io EXPORT volshardStdTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT volshardStdTargets NAMESPACE volshard:: DESTINATION ${VOLSHARD_CMAKE_DIR})
install(DIRECTORY core/include/ sampler/include/ volume_io/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(VOLSHARD_HAVE_TORCH)
  install(TARGETS volshard_transforms volshard_datasets volshard_trainer EXPORT volshardTorchTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT volshardTorchTargets NAMESPACE volshard:: DESTINATION ${VOLSHARD_CMAKE_DIR})
  install(DIRECTORY transforms/include/ datasets/include/ trainer/include/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
foreach(tool volshard volshard-torch sampler-inspect)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

set(VOLSHARD_INSTALLED_WITH_TORCH ${VOLSHARD_HAVE_TORCH})
configure_package_config_file(cmake/volshardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/volshardConfig.cmake INSTALL_DESTINATION ${VOLSHARD_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/volshardConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/volshardConfig.cmake
  ${PROJECT_BINARY_DIR}/volshardConfigVersion.cmake DESTINATION ${VOLSHARD_CMAKE_DIR})
