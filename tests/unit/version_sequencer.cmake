# The coordinator's version sequencer (coordinator/version_sequencer.h): versions, skips,
# staleness, readiness and membership changes, driven by hand with no sockets and no clock.
wsync_add_unit_test(wsync_version_sequencer_test ${CMAKE_CURRENT_LIST_DIR}/version_sequencer_test.cc)
# Trainer restart: the version in flight aborted (slots given back), versions continuing above it,
# the delivery gate abandoning the lost trainers' Delivered.
wsync_add_unit_test(wsync_trainer_restart_sequencer_test
  ${CMAKE_CURRENT_LIST_DIR}/trainer_restart_sequencer_test.cc)
# Prepare ahead: the next version's slot drained between versions, Go at once on its Publish.
wsync_add_unit_test(wsync_prepare_ahead_sequencer_test
  ${CMAKE_CURRENT_LIST_DIR}/prepare_ahead_sequencer_test.cc)
