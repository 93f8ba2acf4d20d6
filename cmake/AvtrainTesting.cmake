# avtrain_fixture_test(NAME LABEL label [SETUP fixture] [REQUIRES fixtures...] [TIMEOUT s] COMMAND ...):
# a CTest test run with the MPI environment of the project's tests, optionally setting up or
# requiring fixtures. Used by tests/e2e and validation/.
include_guard(GLOBAL)
function(avtrain_fixture_test name)
  cmake_parse_arguments(T "" "LABEL;SETUP;TIMEOUT" "REQUIRES;COMMAND" ${ARGN})
  add_test(NAME ${name} COMMAND ${T_COMMAND})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${AVTRAIN_MPI_ENV}")
  if(T_SETUP)
    set_tests_properties(${name} PROPERTIES FIXTURES_SETUP ${T_SETUP})
  endif()
  if(T_REQUIRES)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${T_REQUIRES}")
  endif()
endfunction()

# avtrain_watch_processes(): every test of the calling directory (call it at the end) carries the
# suite's mark in its environment and requires the fixture whose cleanup, the suite's last test,
# fails on any process still carrying the mark (tests/check_no_process_left.py): a killed mpirun's
# rank, a Slurm daemon or job left running.
function(avtrain_watch_processes)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS tests)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "AVTRAIN_TEST_SUITE=${PROJECT_BINARY_DIR}")
    set_property(TEST ${t} APPEND PROPERTY FIXTURES_REQUIRED avtrain_processes)
  endforeach()
endfunction()
