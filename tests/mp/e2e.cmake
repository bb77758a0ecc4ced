# End-to-end jobs under mpirun: the real examples (trainers : rollouts), every read checked.
if(TARGET wsync-trainer-demo AND TARGET wsync-rollout-demo)
  set(small_policy --layers 2 --hidden 256 --ffn 512 --vocab 1024)
  # wsync_add_e2e_test(name trainers rollouts trainer-args... -- rollout-args...)
  function(wsync_add_e2e_test name trainers rollouts)
    set(trainer_args)
    set(rollout_args)
    set(target trainer_args)
    foreach(arg ${ARGN})
      if(arg STREQUAL "--")
        set(target rollout_args)
      else()
        list(APPEND ${target} ${arg})
      endif()
    endforeach()
    add_test(NAME ${name}
      COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --mca btl self,vader
              -n ${trainers} $<TARGET_FILE:wsync-trainer-demo> ${trainer_args}
              : -n ${rollouts} $<TARGET_FILE:wsync-rollout-demo> ${rollout_args})
    set_tests_properties(${name} PROPERTIES LABELS "mp;e2e" TIMEOUT 600 PROCESSORS 2)
  endfunction()

  # 2 trainers (FSDP-like) -> 2 replicas of TP 2, 200 versions, fused qkv, bf16 conversion: both
  # broadcast groups (boxes that match) and one-sided writes (boxes that differ).
  wsync_add_e2e_test(wsync_e2e_mixed_200_versions 2 4
    --versions 200 --quiet ${small_policy} -- --replicas 2 --versions 200 --layout mixed ${small_policy})
  # Matching layouts only: every byte by host broadcast.
  wsync_add_e2e_test(wsync_e2e_match 2 4
    --versions 50 --quiet ${small_policy} -- --replicas 2 --versions 50 --layout match --dtype float32 ${small_policy})
  # Differing layouts only: every byte by UCX one-sided writes, float16 on the rollouts, 3 slots.
  wsync_add_e2e_test(wsync_e2e_differ 2 4
    --versions 50 --quiet ${small_policy} -- --replicas 2 --versions 50 --layout differ --dtype float16 --slots 3 ${small_policy})
  # Snapshot mode: publish returns after the copy and the next step overlaps the transfer.
  wsync_add_e2e_test(wsync_e2e_snapshot 3 2
    --versions 50 --snapshot --quiet ${small_policy} -- --replicas 1 --versions 50 ${small_policy})
endif()

if(TARGET wsync)
  add_executable(wsync_capi_errors_test ${CMAKE_CURRENT_LIST_DIR}/capi_errors_test.cc)
  target_link_libraries(wsync_capi_errors_test PRIVATE wsync wsync_test_support GTest::gtest wsync_mpi)
  wsync_add_mpi_test(wsync_capi_errors 3 wsync_capi_errors_test --gtest_filter=CapiErrors.*)
  wsync_add_mpi_test(wsync_capi_rank_never_arrives 3 wsync_capi_errors_test --gtest_filter=CapiTimeout.*)
endif()

if(TARGET wsync)
  add_executable(wsync_versioning_test ${CMAKE_CURRENT_LIST_DIR}/versioning_test.cc)
  target_link_libraries(wsync_versioning_test PRIVATE wsync wsync_test_support GTest::gtest wsync_mpi)
  wsync_add_mpi_test(wsync_versioning 2 wsync_versioning_test)
endif()

if(TARGET wsync-coordinator AND TARGET wsync-trainer-demo)
  # The coordinator as its own process (world rank 0 of the job).
  add_test(NAME wsync_e2e_coordinator_process
    COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --mca btl self,vader
            -n 1 $<TARGET_FILE:wsync-coordinator> --mpi --quiet
            : -n 2 $<TARGET_FILE:wsync-trainer-demo> --versions 30 --quiet ${small_policy}
            : -n 2 $<TARGET_FILE:wsync-rollout-demo> --replicas 1 --versions 30 ${small_policy})
  set_tests_properties(wsync_e2e_coordinator_process PROPERTIES LABELS "mp;e2e" TIMEOUT 600 PROCESSORS 2)
endif()

if(TARGET wsync-trainer-demo AND TARGET wsync-rollout-demo)
  # Copy flip on host memory: readers see the live parameters, one whole version at a time.
  wsync_add_e2e_test(wsync_e2e_copy_flip 2 2
    --versions 30 --memory host --quiet ${small_policy} -- --replicas 1 --versions 30 --memory host --copy-flip ${small_policy})

  # Device memory (label gpu): trainer and rollout processes on the same GPU(s), one-sided writes
  # through CUDA IPC. The demos exit 77 (skipped) without a usable GPU.
  function(wsync_add_gpu_e2e_test name)
    wsync_add_e2e_test(${name} ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS "gpu;mp;e2e" SKIP_RETURN_CODE 77)
  endfunction()
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_differ_100_versions 2 4
    --versions 100 --memory device --quiet ${small_policy}
    -- --replicas 2 --versions 100 --memory device --layout differ ${small_policy})
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_mixed_fused_bf16 2 4
    --versions 100 --memory device --quiet ${small_policy}
    -- --replicas 2 --versions 100 --memory device --layout mixed --dtype bfloat16 ${small_policy})
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_copy_flip 2 2
    --versions 50 --memory device --quiet ${small_policy}
    -- --replicas 1 --versions 50 --memory device --copy-flip --dtype float16 ${small_policy})
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_snapshot 2 2
    --versions 50 --memory device --snapshot --quiet ${small_policy}
    -- --replicas 2 --versions 50 --memory device ${small_policy})
  # The cross-node path, forced on one node: device slots behind UCX landing areas, device sources
  # staged through pinned chunks (WSYNC_DEVICE_TRANSPORT=staged).
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_staged_differ_100 2 4
    --versions 100 --memory device --quiet ${small_policy}
    -- --replicas 2 --versions 100 --memory device --layout differ ${small_policy})
  set_tests_properties(wsync_gpu_e2e_staged_differ_100 PROPERTIES
    ENVIRONMENT "WSYNC_DEVICE_TRANSPORT=staged")
  # Device trainers -> host rollouts: device-to-host writes through pinned chunks and UCX, with the
  # float32 -> bfloat16 conversion on the trainers' GPU.
  wsync_add_gpu_e2e_test(wsync_gpu_e2e_device_to_host 2 4
    --versions 50 --memory device --quiet ${small_policy}
    -- --replicas 2 --versions 50 --memory host --skip-without-gpu --layout mixed --dtype bfloat16
    ${small_policy})
endif()

if(TARGET wsync-trainer-demo AND TARGET wsync-rollout-demo)
  # Checksums (docs/checksums.md): every version verified on every rollout rank before it is
  # readable. With WSYNC_DEBUG_CORRUPT_EVERY=7 trainer 0 flips a byte of one write in flight in
  # versions 7, 14, ..., 56: each is caught, re-sent once, and never read corrupt (the rollouts
  # check every element of every version); the trainers' wsync_version_stats add up to 8 checksum
  # failures and 8 re-sends. Mixed layout: broadcasts and writes, bf16 conversion.
  wsync_add_e2e_test(wsync_e2e_checksums_corrupted 2 4
    --versions 60 --quiet --expect-checksum-failures 8 ${small_policy}
    -- --replicas 2 --versions 60 --layout mixed ${small_policy})
  set_tests_properties(wsync_e2e_checksums_corrupted PROPERTIES
    ENVIRONMENT "WSYNC_CHECKSUMS=1;WSYNC_DEBUG_CORRUPT_EVERY=7")
  # The same with nothing corrupted (writes only, float16 on the rollouts), checksums turned on by
  # trainer 0's config.checksums: 0 failures.
  wsync_add_e2e_test(wsync_e2e_checksums_clean 2 4
    --versions 40 --quiet --checksums --expect-checksum-failures 0 ${small_policy}
    -- --replicas 2 --versions 40 --layout differ --dtype float16 ${small_policy})
endif()

if(TARGET wsync)
  # A late Go per replica: a slow reader on one replica holds up no other replica's version.
  add_executable(wsync_late_go_test ${CMAKE_CURRENT_LIST_DIR}/late_go_test.cc)
  target_link_libraries(wsync_late_go_test PRIVATE wsync wsync_test_support GTest::gtest wsync_mpi)
  wsync_add_mpi_test(wsync_late_go 3 wsync_late_go_test)
endif()
