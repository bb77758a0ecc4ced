# The coordinator's version sequencer (coordinator/version_sequencer.h): versions, skips,
# staleness, readiness and membership changes, driven by hand with no sockets and no clock.
wsync_add_unit_test(wsync_version_sequencer_test ${CMAKE_CURRENT_LIST_DIR}/version_sequencer_test.cc)
