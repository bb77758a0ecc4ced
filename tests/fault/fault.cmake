# Fault injection with real processes (label fault): a standalone wsync-coordinator and
# explicit-bootstrap ranks (wsync-fault-rank) while versions stream. tests/fault/run_fault.sh runs
# any number of iterations by hand (e.g. 50).
if(TARGET wsync-coordinator AND TARGET wsync_demo_policy)
  add_executable(wsync-fault-rank ${CMAKE_CURRENT_LIST_DIR}/fault_rank.cc)
  target_link_libraries(wsync-fault-rank PRIVATE wsync_demo_policy wsync cxxopts::cxxopts)
  # wsync_add_fault_test(name scenario iterations)
  function(wsync_add_fault_test name scenario iterations)
    add_test(NAME ${name}
      COMMAND ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/run_fault.sh ${scenario} ${iterations}
              $<TARGET_FILE:wsync-coordinator> $<TARGET_FILE:wsync-fault-rank>
              ${MPIEXEC_EXECUTABLE})
    set_tests_properties(${name} PROPERTIES LABELS "fault;mp" TIMEOUT 600 PROCESSORS 2)
  endfunction()
  # kill -9 of a rollout rank during transfers, 10 times: the others stay bit-exact; the killed
  # rank's replacement rejoins by peer cold start and catches up bit-exact.
  wsync_add_fault_test(wsync_fault_kill_rollout kill 10)
  # SIGSTOP past the heartbeat timeout, SIGCONT: dropped, then joins again by peer cold start.
  wsync_add_fault_test(wsync_fault_stop_rollout stop 2)
  # SIGSTOP with the job's timeout below the heartbeat timeout: the replica is dropped as stalled
  # (the job never fails waiting on it); after SIGCONT its error says it was dropped.
  wsync_add_fault_test(wsync_fault_stall_rollout stall 3)
  # A replica joins while versions stream: its first version comes from a peer, bit-exact.
  wsync_add_fault_test(wsync_fault_join_replica join 3)
  # A replica joins while the trainers hold: it reads their last version, which only a peer has.
  wsync_add_fault_test(wsync_fault_cold_start coldstart 3)
  # The cold start's source replica is killed mid-fill: the fill fails over to another replica.
  wsync_add_fault_test(wsync_fault_cold_start_failover failover 2)
  # The cold start's source replica is stopped mid-fill: dropped as stalled past half the job's
  # timeout, the fill fails over to another replica (the joiner never fails).
  wsync_add_fault_test(wsync_fault_cold_start_stalled_source stallsource 2)
  # coordinator --trainer-restart: a trainer is killed; the rollouts serve their last version (its
  # age growing), a repeated version and a changed registration are refused, then restarted
  # trainers publish higher versions and every rollout reads them bit-exact.
  wsync_add_fault_test(wsync_fault_trainer_restart restart 3)
  # An elastic job (--rollouts 0), trainers under mpirun: replica 1 joins, replica 2 joins
  # (cold-filled from replica 1) and gets kill -9 mid-transfer, then rejoins by peer cold start;
  # every publish completes, replica 1 misses no version, every read is bit-exact, the summary
  # counts the lost replica.
  wsync_add_fault_test(wsync_fault_elastic_kill elastic 3)
endif()
