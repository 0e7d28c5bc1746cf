# Fails when the library (-DLIBRARY=...) resolves a libpython among its shared-library dependencies.
execute_process(COMMAND ldd "${LIBRARY}" OUTPUT_VARIABLE deps RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ldd ${LIBRARY} failed")
endif()
if(deps MATCHES "libpython")
  message(FATAL_ERROR "${LIBRARY} depends on libpython:\n${deps}")
endif()
message(STATUS "${LIBRARY}: no libpython dependency")
