wsync_add_unit_test(wsync_fast_copy_test
  ${CMAKE_CURRENT_LIST_DIR}/fast_copy_test.cc)
