# The C API's config rules through libwsync.so alone (no internals, no MPI job): layouts of older
# headers, field validation, the version call.
add_executable(wsync_capi_config_test ${CMAKE_CURRENT_LIST_DIR}/capi_config_test.cc)
target_link_libraries(wsync_capi_config_test PRIVATE wsync GTest::gtest GTest::gtest_main)
target_compile_definitions(wsync_capi_config_test PRIVATE
                           WSYNC_EXPECTED_VERSION="${PROJECT_VERSION}")
gtest_discover_tests(wsync_capi_config_test DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS unit TIMEOUT 120)
