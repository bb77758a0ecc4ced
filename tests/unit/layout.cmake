wsync_add_unit_test(wsync_layout_test
  ${CMAKE_CURRENT_LIST_DIR}/dtype_box_test.cc)
