wsync_add_unit_test(wsync_control_test
  ${CMAKE_CURRENT_LIST_DIR}/control_test.cc)
