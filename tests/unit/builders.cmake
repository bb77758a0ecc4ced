wsync_add_unit_test(wsync_builders_test ${CMAKE_CURRENT_LIST_DIR}/builders_test.cc)
