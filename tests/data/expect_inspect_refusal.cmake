# cmake -DPROGRAM=avtrain-shards -DTARGET=PATH -DEXPECT=REGEX [-DOPTIONS=--check-values] -P expect_inspect_refusal.cmake
# Passes when `PROGRAM inspect OPTIONS TARGET` exits non-zero and says on stderr what EXPECT matches.
execute_process(COMMAND ${PROGRAM} inspect ${OPTIONS} ${TARGET} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "inspect accepted ${TARGET}:\n${out}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "inspect refused ${TARGET} (exit ${rc}) but stderr does not match '${EXPECT}':\n${err}")
endif()
message(STATUS "refused as expected: ${err}")
