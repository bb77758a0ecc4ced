# Dynamic membership on threads of one process (leave, dropped connection, join).
wsync_add_unit_test(wsync_membership_test ${CMAKE_CURRENT_LIST_DIR}/membership_test.cc)
target_link_libraries(wsync_membership_test PRIVATE wsync_demo_policy wsync)
# Trainer restart on threads of one process (a joined replica after the restart, the default that
# fails the job, the restart timeout).
wsync_add_unit_test(wsync_trainer_restart_job_test ${CMAKE_CURRENT_LIST_DIR}/trainer_restart_job_test.cc)
target_link_libraries(wsync_trainer_restart_job_test PRIVATE wsync_demo_policy wsync)
