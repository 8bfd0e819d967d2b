# Sanitizers (docs/reliability.md; scripts/sanitize.sh).
if(NOT PDSERVE_SANITIZE OR PDSERVE_SANITIZE STREQUAL "OFF")
  # The normal tree: each test configures, builds and runs its own sanitized tree
  # (build-asan/, build-tsan/ next to build/). Labels asan/tsan: part of `ctest -LE gpu`
  # (scripts/test.sh); leave them out of a quick run with `ctest -LE 'gpu|asan|tsan'`.
  add_test(NAME asan_test COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/sanitize.sh address)
  add_test(NAME tsan_test COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/sanitize.sh thread)
  # PDSERVE_SANITIZE_PRUNE=1: each deletes its tree (but the logs) when done, so CI's disk
  # holds one sanitized tree at a time.
  set_tests_properties(asan_test PROPERTIES LABELS asan TIMEOUT 3000 RUN_SERIAL TRUE
                       ENVIRONMENT PDSERVE_SANITIZE_PRUNE=1)
  set_tests_properties(tsan_test PROPERTIES LABELS tsan TIMEOUT 3000 RUN_SERIAL TRUE
                       ENVIRONMENT PDSERVE_SANITIZE_PRUNE=1)
elseif(PDSERVE_SANITIZE STREQUAL "address")
  # In build-asan/: the chaos suite at a size an ASan build can serve in CI
  # (PDSERVE_SANITIZE_CHAOS_N, set by scripts/sanitize.sh; 0 leaves it out). Its RSS bound
  # is off here (--rss-limit 100): ASan's quarantine and allocator caches grow RSS by
  # design (router +123%, decode +36% at N=100); leaks are LeakSanitizer's job in this tree,
  # and the 10% bound is checked by chaos_tiny_test in the normal tree.
  set(PDSERVE_SANITIZE_CHAOS_N 100 CACHE STRING "chaos requests of the ASan run (0: none)")
  if(PDSERVE_SANITIZE_CHAOS_N GREATER 0 AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/chaos/chaos.py)
    add_test(NAME chaos_asan_test
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/chaos/chaos.py --build ${PROJECT_BINARY_DIR}
                     --config ${PROJECT_SOURCE_DIR}/configs/tiny.json --n ${PDSERVE_SANITIZE_CHAOS_N} --seed 1 --rss-limit 100)
    set_tests_properties(chaos_asan_test PROPERTIES LABELS asan_chaos TIMEOUT 1800 RUN_SERIAL TRUE)
  endif()
endif()

if(PDSERVE_SANITIZE STREQUAL "thread")
  # Debian's abseil is not TSan-instrumented: make absl::Mutex visible to TSan in the
  # binaries scripts/sanitize.sh thread runs (see sanitizers/absl_tsan_shim.cc).
  add_library(pdserve_absl_tsan_shim OBJECT sanitizers/absl_tsan_shim.cc)
  target_link_libraries(pdserve_absl_tsan_shim PUBLIC absl::synchronization absl::time)
  foreach(t worker_pool_test admission_queue_test router_service_test kv_transfer_test batch_scheduler_test
            spin_pool_test http_server_test openai_http_test metrics_test client_disconnect_test)
    if(TARGET ${t})
      target_link_libraries(${t} PRIVATE pdserve_absl_tsan_shim ${CMAKE_DL_LIBS})
      target_link_options(${t} PRIVATE -rdynamic)
    endif()
  endforeach()
endif()
