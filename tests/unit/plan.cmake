# The planner: unit tests on hand-built registrations and seeded property tests on the layout
# builders, both checked by the reference executor (tests/support/reference_executor.*).
add_library(wsync_reference_executor STATIC ${CMAKE_CURRENT_LIST_DIR}/../support/reference_executor.cc)
target_link_libraries(wsync_reference_executor PUBLIC wsync_core wsync_test_support)

wsync_add_unit_test(wsync_planner_test ${CMAKE_CURRENT_LIST_DIR}/planner_test.cc)
target_link_libraries(wsync_planner_test PRIVATE wsync_reference_executor)

wsync_add_unit_test(wsync_plan_property_test ${CMAKE_CURRENT_LIST_DIR}/plan_property_test.cc)
target_link_libraries(wsync_plan_property_test PRIVATE wsync_reference_executor)
