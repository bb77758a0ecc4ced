wsync_add_unit_test(wsync_options_test
  ${CMAKE_CURRENT_LIST_DIR}/options_test.cc)
target_link_libraries(wsync_options_test PRIVATE wsync_options)
# The README whose "Environment variables" table must equal optionsMarkdownTable().
target_compile_definitions(wsync_options_test PRIVATE WSYNC_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# wsync-options itself: the table, and a bad value named (exit 2).
add_test(NAME wsync_options_tool_markdown COMMAND wsync-options --markdown)
set_tests_properties(wsync_options_tool_markdown PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "\\| `WSYNC_DEBUG_SEND_DELAY_MS` \\(debug\\) \\| int \\|")
add_test(NAME wsync_options_tool_bad_value
  COMMAND ${CMAKE_COMMAND} -E env WSYNC_DEVICE_TRANSPORT=nvlink $<TARGET_FILE:wsync-options>)
set_tests_properties(wsync_options_tool_bad_value PROPERTIES LABELS unit WILL_FAIL TRUE)
