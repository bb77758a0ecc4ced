# Delta patches (src/delta): round trips over random changes, every chunk kind, in place, and
# malformed patches rejected before anything is written.
wsync_add_unit_test(wsync_delta_patch_test ${CMAKE_CURRENT_LIST_DIR}/delta_patch_test.cc)
