# The demo policy's Llama-3-8B preset and its layouts (trainer_integration/demo_policy.h).
wsync_add_unit_test(wsync_demo_policy_test ${CMAKE_CURRENT_LIST_DIR}/demo_policy_test.cc)
target_link_libraries(wsync_demo_policy_test PRIVATE wsync_demo_policy wsync)
