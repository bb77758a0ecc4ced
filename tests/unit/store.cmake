wsync_add_unit_test(wsync_store_test
  ${CMAKE_CURRENT_LIST_DIR}/slot_store_test.cc)
