wsync_add_unit_test(wsync_codec_test
  ${CMAKE_CURRENT_LIST_DIR}/codec_test.cc)
