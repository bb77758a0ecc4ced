# cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -DC_COMPILER=...
#       -DPKG_CONFIG=... -DLIBDIR=lib -DINCLUDEDIR=include -DVERSION=x.y.z -DVERSION_MAJOR=x
#       -DSOURCE_DIR=... -P install_and_consume.cmake
# Installs BUILD_DIR into a fresh prefix (WORK_DIR/prefix), checks what landed there, then builds
# the consumer program against that prefix twice, as a separate project with find_package(wsync)
# and by hand with the flags pkg-config gives, and runs both builds.
cmake_minimum_required(VERSION 3.25)

function(run)
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()

function(capture out_var)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
  message(STATUS "${ARGN}\n  -> ${out}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# ---- what the prefix holds ----
set(cmakedir ${prefix}/${LIBDIR}/cmake/wsync)
foreach(file ${INCLUDEDIR}/wsync/wsync.h ${INCLUDEDIR}/wsync/wsync_types.h
             ${LIBDIR}/libwsync.so.${VERSION} ${LIBDIR}/cmake/wsync/wsyncConfig.cmake
             ${LIBDIR}/cmake/wsync/wsyncConfigVersion.cmake ${LIBDIR}/cmake/wsync/wsyncTargets.cmake
             ${LIBDIR}/pkgconfig/wsync.pc)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "not installed: ${file}")
  endif()
endforeach()
foreach(link libwsync.so libwsync.so.${VERSION_MAJOR})
  if(NOT IS_SYMLINK ${prefix}/${LIBDIR}/${link})
    message(FATAL_ERROR "${LIBDIR}/${link} is not a symbolic link to the library")
  endif()
endforeach()
file(GLOB_RECURSE package_files ${cmakedir}/*.cmake)
foreach(file IN LISTS package_files)
  file(READ ${file} text)
  foreach(word wsync_core MPI:: ucx:: CUDA:: Eigen ${SOURCE_DIR} ${BUILD_DIR})
    string(FIND "${text}" "${word}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${file} refers to '${word}': the package must name libwsync only")
    endif()
  endforeach()
endforeach()

# ---- consumer 1: a CMake project using find_package(wsync CONFIG) ----
set(cmake_consumer ${WORK_DIR}/cmake-consumer)
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${cmake_consumer} -G ${GENERATOR}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DWSYNC_EXPECTED_VERSION=${VERSION})
file(STRINGS ${cmake_consumer}/CMakeCache.txt found_dir REGEX "^wsync_DIR:")
if(NOT found_dir STREQUAL "wsync_DIR:PATH=${cmakedir}")
  message(FATAL_ERROR "the consumer found another wsync: ${found_dir}")
endif()
run(${CMAKE_COMMAND} --build ${cmake_consumer})
run(${cmake_consumer}/wsync_consumer)

# ---- consumer 2: compiled by hand with pkg-config's flags ----
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
capture(modversion ${PKG_CONFIG} --modversion wsync)
if(NOT modversion STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config says wsync ${modversion}, the build is ${VERSION}")
endif()
capture(cflags ${PKG_CONFIG} --cflags wsync)
capture(libs ${PKG_CONFIG} --libs wsync)
capture(libdir ${PKG_CONFIG} --variable=libdir wsync)
file(REAL_PATH ${libdir} libdir)
if(NOT libdir STREQUAL "${prefix}/${LIBDIR}")
  message(FATAL_ERROR "wsync.pc's libdir ${libdir} is not the prefix's ${prefix}/${LIBDIR}")
endif()
separate_arguments(cflags UNIX_COMMAND "${cflags}")
separate_arguments(libs UNIX_COMMAND "${libs}")
set(pc_consumer ${WORK_DIR}/pkg-config-consumer)
run(${C_COMPILER} -std=c11 -Wall -Wextra -Werror -pedantic ${cflags}
    "-DWSYNC_EXPECTED_VERSION=\"${VERSION}\"" ${CONSUMER_DIR}/consumer.c -o ${pc_consumer} ${libs}
    -Wl,-rpath,${libdir})
run(${pc_consumer})
message(STATUS "installed into ${prefix}; both consumers built and passed")
