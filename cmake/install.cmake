# Install rules and the exported CMake package of the ops library (included
# from CMakeLists.txt when TCT_WITH_TORCH is on).
#
#   cmake --install build/main --prefix /opt/tct
#   -> /opt/tct/lib/libtorch_convtranspose.so
#      /opt/tct/lib/cmake/TorchConvTranspose/TorchConvTranspose{Config,ConfigVersion,Targets}.cmake
#
# A C++ application then does (with CMAKE_PREFIX_PATH holding /opt/tct and torch's
# `torch.utils.cmake_prefix_path`):
#   find_package(TorchConvTranspose REQUIRED)       # finds Torch as well
#   target_link_libraries(app PRIVATE TorchConvTranspose::ops)
#
# The installed library carries no RUNPATH (CMake drops the build tree's one on
# install; CMAKE_INSTALL_RPATH stays empty): it finds libtorch through the
# application, which links torch itself.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TCT_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/TorchConvTranspose"
  CACHE STRING "Where to install the TorchConvTranspose CMake package (relative to the prefix)")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/cmake/TorchConvTransposeConfig.cmake.in")

# The real library is exported as TorchConvTranspose::ops_library; the config
# file wraps it in TorchConvTranspose::ops, which adds what linking it needs.
set_target_properties(tct_ops PROPERTIES EXPORT_NAME ops_library)
install(TARGETS tct_ops EXPORT TorchConvTransposeTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(EXPORT TorchConvTransposeTargets
  NAMESPACE TorchConvTranspose::
  DESTINATION "${TCT_INSTALL_CMAKEDIR}")

# The torch this library was compiled against: the config file refuses another one
# (the C++ ABI of libtorch changes between releases).
set(TCT_TORCH_VERSION "${Torch_VERSION}")
configure_package_config_file(cmake/TorchConvTransposeConfig.cmake.in
  "${CMAKE_CURRENT_BINARY_DIR}/TorchConvTransposeConfig.cmake"
  INSTALL_DESTINATION "${TCT_INSTALL_CMAKEDIR}")
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/TorchConvTransposeConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/TorchConvTransposeConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/TorchConvTransposeConfigVersion.cmake"
  DESTINATION "${TCT_INSTALL_CMAKEDIR}")
