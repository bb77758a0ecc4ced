wsync_add_unit_test(wsync_landing_ranges_test
  ${CMAKE_CURRENT_LIST_DIR}/landing_ranges_test.cc)
