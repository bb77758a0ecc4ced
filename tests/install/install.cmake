# The shipped library as its users get it (label unit; no MPI job):
#  - wsync_exports: libwsync.so exports exactly the functions the public headers declare, nothing
#    of its internals, and keeps MPI, UCX (and CUDA) as dynamic dependencies;
#  - wsync_install: `cmake --install` into a fresh prefix under the build tree, then a C program
#    outside the tree (consumer/) built against that prefix with find_package(wsync) and with
#    pkg-config, and run.
find_program(WSYNC_NM NAMES ${CMAKE_NM} nm REQUIRED)
find_program(WSYNC_READELF NAMES ${CMAKE_READELF} readelf REQUIRED)
find_program(WSYNC_PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)

add_test(NAME wsync_exports
  COMMAND ${CMAKE_COMMAND} -DLIBRARY=$<TARGET_FILE:wsync>
          -DHEADER_DIR=${PROJECT_SOURCE_DIR}/include/wsync -DNM=${WSYNC_NM}
          -DREADELF=${WSYNC_READELF} -DWITH_CUDA=${WSYNC_HAVE_CUDA}
          -P ${CMAKE_CURRENT_LIST_DIR}/scripts/check_exports.cmake)
set_tests_properties(wsync_exports PROPERTIES LABELS unit TIMEOUT 60)

add_test(NAME wsync_install
  COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${PROJECT_BINARY_DIR}
          -DWORK_DIR=${PROJECT_BINARY_DIR}/install_test -DCONSUMER_DIR=${CMAKE_CURRENT_LIST_DIR}/consumer
          -DGENERATOR=${CMAKE_GENERATOR} -DC_COMPILER=${CMAKE_C_COMPILER}
          -DPKG_CONFIG=${WSYNC_PKG_CONFIG} -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
          -DINCLUDEDIR=${CMAKE_INSTALL_INCLUDEDIR} -DVERSION=${PROJECT_VERSION}
          -DVERSION_MAJOR=${PROJECT_VERSION_MAJOR} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -P ${CMAKE_CURRENT_LIST_DIR}/scripts/install_and_consume.cmake)
set_tests_properties(wsync_install PROPERTIES LABELS unit TIMEOUT 300 RUN_SERIAL ON)
