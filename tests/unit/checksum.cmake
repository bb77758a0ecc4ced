# The shard checksum (src/checksum): host kinds against a reference, additivity, detection.
wsync_add_unit_test(wsync_checksum_test ${CMAKE_CURRENT_LIST_DIR}/checksum_test.cc)
# The version sequencer's checksum path: Verify, Ready after every rank verified, re-sends and
# their bound, driven by hand.
wsync_add_unit_test(wsync_checksum_sequencer_test ${CMAKE_CURRENT_LIST_DIR}/checksum_sequencer_test.cc)
# The checksum messages of the protocol: round trips, malformed input rejected.
wsync_add_unit_test(wsync_checksum_protocol_test ${CMAKE_CURRENT_LIST_DIR}/checksum_protocol_test.cc)
# The coordinator's metrics of checksummed versions (failures, re-sends, rejected replicas).
wsync_add_unit_test(wsync_checksum_metrics_test ${CMAKE_CURRENT_LIST_DIR}/checksum_metrics_test.cc)
