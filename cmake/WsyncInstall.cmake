# `cmake --install <build> [--prefix P]`: the public headers, libwsync.so with its SONAME links, a
# CMake package (find_package(wsync CONFIG) -> wsync::wsync) and a pkg-config file (wsync.pc).
# Only the shared library is installed: its internals are linked in privately, so the package
# names no internal target and no dependency of the internals.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(WSYNC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/wsync)

install(TARGETS wsync EXPORT wsyncTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/wsync DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(EXPORT wsyncTargets NAMESPACE wsync:: DESTINATION ${WSYNC_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/wsyncConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/wsyncConfig.cmake INSTALL_DESTINATION ${WSYNC_INSTALL_CMAKEDIR})
# 0.x: SONAME libwsync.so.0 for all of them, so any 0.y.z satisfies a request for 0.1.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/wsyncConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/wsyncConfig.cmake
              ${PROJECT_BINARY_DIR}/package/wsyncConfigVersion.cmake
  DESTINATION ${WSYNC_INSTALL_CMAKEDIR})

# wsync.pc finds its prefix from its own location (${pcfiledir}), so `--prefix` at install time
# and moving the tree afterwards both work.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "wsync.pc needs CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR relative "
                      "to the install prefix")
endif()
file(RELATIVE_PATH WSYNC_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" WSYNC_PC_TO_PREFIX "${WSYNC_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/wsync.pc.in ${PROJECT_BINARY_DIR}/package/wsync.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/wsync.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
