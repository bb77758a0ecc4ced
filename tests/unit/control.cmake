wsync_add_unit_test(wsync_control_test
  ${CMAKE_CURRENT_LIST_DIR}/control_test.cc)
# Admission: per-peer and total handshake limits, idle handshakes, retries, refusal logging.
wsync_add_unit_test(wsync_control_admission_test
  ${CMAKE_CURRENT_LIST_DIR}/control_admission_test.cc)
# Busy polling (ControlOptions::spin_wait, FrameServer::spinUntil): frames, deadlines, shutdown.
wsync_add_unit_test(wsync_control_spin_test
  ${CMAKE_CURRENT_LIST_DIR}/control_spin_test.cc)
