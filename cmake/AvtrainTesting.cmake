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
