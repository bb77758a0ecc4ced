# The demo policy's Llama-3-8B preset, its layouts and checks (trainer_integration/demo_policy.h),
# and the demo job's summary (trainer_integration/demo_report.h).
wsync_add_unit_test(wsync_demo_policy_test ${CMAKE_CURRENT_LIST_DIR}/demo_policy_test.cc
                    ${CMAKE_CURRENT_LIST_DIR}/demo_policy_report_test.cc)
target_link_libraries(wsync_demo_policy_test PRIVATE wsync_demo_policy wsync)
