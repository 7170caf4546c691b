# nifti_clib without its CMake package: Debian 12's NIFTIConfig (libnifti2-dev
# 3.0.1-9) points its imported targets at /usr/lib instead of the multiarch
# directory. Defines volshard::nifti (niftiio + nifti2 + znz) when found.
find_path(VOLSHARD_NIFTI_INCLUDE_DIR nifti1_io.h PATH_SUFFIXES nifti)
find_library(VOLSHARD_NIFTIIO_LIBRARY niftiio)
find_library(VOLSHARD_NIFTI2_LIBRARY nifti2)
find_library(VOLSHARD_ZNZ_LIBRARY NAMES znz libznz.so.3)
find_package(ZLIB REQUIRED)
if(VOLSHARD_NIFTI_INCLUDE_DIR AND VOLSHARD_NIFTIIO_LIBRARY AND VOLSHARD_NIFTI2_LIBRARY AND VOLSHARD_ZNZ_LIBRARY)
  add_library(volshard_nifti INTERFACE)
  add_library(volshard::nifti ALIAS volshard_nifti)
  target_include_directories(volshard_nifti SYSTEM INTERFACE ${VOLSHARD_NIFTI_INCLUDE_DIR})
  target_link_libraries(volshard_nifti INTERFACE
    ${VOLSHARD_NIFTI2_LIBRARY} ${VOLSHARD_NIFTIIO_LIBRARY} ${VOLSHARD_ZNZ_LIBRARY} ZLIB::ZLIB m)
  set(VolshardNifti_FOUND TRUE)
else()
  set(VolshardNifti_FOUND FALSE)
endif()
