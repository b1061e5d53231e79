# cmake -P script: install kevo to WORK_DIR/prefix and build examples/embed against it.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install "${KEVO_BINARY_DIR}" --prefix "${WORK_DIR}/prefix")
if(NOT EXISTS "${WORK_DIR}/prefix/lib/cmake/kevo/kevoConfig.cmake")
  message(FATAL_ERROR "installed package lacks lib/cmake/kevo/kevoConfig.cmake")
endif()
if(NOT EXISTS "${WORK_DIR}/prefix/bin/kevo")
  message(FATAL_ERROR "installed package lacks bin/kevo")
endif()
run(${CMAKE_COMMAND} -S "${KEVO_SOURCE_DIR}/examples/embed" -B "${WORK_DIR}/build" -G Ninja
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
    "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/embed")
if(NOT LAST_OUT MATCHES "best schedule: ")
  message(FATAL_ERROR "embed printed no best schedule:\n${LAST_OUT}")
endif()
message(STATUS "embed output:\n${LAST_OUT}")

# examples/extend: a user-written search strategy against the installed package. Run once with a
# checkpoint directory, then again on it: the second run resumes the finished run and must report
# the same history.
run(${CMAKE_COMMAND} -S "${KEVO_SOURCE_DIR}/examples/extend" -B "${WORK_DIR}/extend" -G Ninja
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
    "-DCMAKE_CXX_FLAGS=${EXTRA_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/extend")
run("${WORK_DIR}/extend/strategy" "${WORK_DIR}/extend-run")
if(NOT LAST_OUT MATCHES "strategy one_plus_lambda: 4000 evaluations \\(0 replayed\\), best [0-9.]+, sigma [0-9.]+, history ([0-9a-f]+)")
  message(FATAL_ERROR "the strategy example printed no result:\n${LAST_OUT}")
endif()
set(first_history "${CMAKE_MATCH_1}")
run("${WORK_DIR}/extend/strategy" "${WORK_DIR}/extend-run")
if(NOT LAST_OUT MATCHES "history ${first_history}")
  message(FATAL_ERROR "the resumed strategy example reported another history (first ${first_history}):\n${LAST_OUT}")
endif()
message(STATUS "extend/strategy output:\n${LAST_OUT}")
# A user-written runner (a cost model) and a user-written operator, against the installed package.
run("${WORK_DIR}/extend/runner")
if(NOT LAST_OUT MATCHES "runner example:cost-model-v1: 160 evaluations, best [0-9.]+ us under the model, verified by")
  message(FATAL_ERROR "the runner example printed no verified winner:\n${LAST_OUT}")
endif()
run("${WORK_DIR}/extend/operator")
if(NOT LAST_OUT MATCHES "operator elite_graft +proposals +[1-9][0-9]* +evaluated +[1-9]")
  message(FATAL_ERROR "the operator example's operator took no part:\n${LAST_OUT}")
endif()
message(STATUS "extend/runner and extend/operator output:\n${LAST_OUT}")
# A user problem over continuous (log-scaled) and permutation genes, outside kernels.
run("${WORK_DIR}/extend/problem")
if(NOT LAST_OUT MATCHES "problem oscillator_fit: 20000 evaluations, rms error [0-9.e-]+, .*passes detrend,window,normalise")
  message(FATAL_ERROR "the problem example did not fit its oscillator:\n${LAST_OUT}")
endif()
message(STATUS "extend/problem output:\n${LAST_OUT}")
# A user's own target, written by a program as JSON: loaded, a misspelt field rejected with its
# location, the search follows its SBUF, and trn2's winner is invalid on it.
run("${WORK_DIR}/extend/target" "${WORK_DIR}/extend-target")
if(NOT LAST_OUT MATCHES "target trn2-small-sbuf: loaded from .*SBUF 48 KiB per partition")
  message(FATAL_ERROR "the target example did not load its target:\n${LAST_OUT}")
endif()
if(NOT LAST_OUT MATCHES "a misspelt field: bad.json:[0-9]+:[0-9]+: unknown field 'psum_bankz'")
  message(FATAL_ERROR "the target example's misspelt field was not a located error:\n${LAST_OUT}")
endif()
if(NOT LAST_OUT MATCHES "best on trn2-small-sbuf: [0-9.]+ us" OR NOT LAST_OUT MATCHES "trn2's winner on trn2-small-sbuf: invalid, sbuf_overflow")
  message(FATAL_ERROR "the target example's search did not follow the target's SBUF:\n${LAST_OUT}")
endif()
message(STATUS "extend/target output:\n${LAST_OUT}")
# A user-written LLM client (an offline editing "model") driving kevo's LLM operator.
run("${WORK_DIR}/extend/llm_client")
if(NOT LAST_OUT MATCHES "llm_client llm:editing-model: [1-9][0-9]* calls, [0-9]+ candidates, [1-9][0-9]* accepted")
  message(FATAL_ERROR "the LLM client example's operator accepted nothing:\n${LAST_OUT}")
endif()
message(STATUS "extend/llm_client output:\n${LAST_OUT}")

# The C API from the prefix: the C example compiled as C against include/kevo/kevo.h and libkevo_c.
if(NOT EXISTS "${WORK_DIR}/prefix/include/kevo/kevo.h")
  message(FATAL_ERROR "installed package lacks include/kevo/kevo.h")
endif()
file(GLOB kevo_c_lib "${WORK_DIR}/prefix/lib/libkevo_c.so*")
if(NOT kevo_c_lib)
  message(FATAL_ERROR "installed package lacks lib/libkevo_c.so")
endif()
if(C_COMPILER)
  run(${C_COMPILER} -std=c11 -Wall -Wextra -Werror ${EXTRA_FLAGS} "${KEVO_SOURCE_DIR}/examples/c/search.c"
      "-I${WORK_DIR}/prefix/include" "-L${WORK_DIR}/prefix/lib" -lkevo_c "-Wl,-rpath,${WORK_DIR}/prefix/lib"
      -o "${WORK_DIR}/c_search")
  run("${WORK_DIR}/c_search" "matmul:M=256,N=256,K=256,dtype=bf16" 40)
  if(NOT LAST_OUT MATCHES "verified")
    message(FATAL_ERROR "the C example printed no verified winner:\n${LAST_OUT}")
  endif()
endif()

# The Python module from the prefix, as README documents it (skipped under sanitizers: the
# interpreter would need their runtimes preloaded).
if(PYTHON AND NOT EXTRA_FLAGS)
  set(ENV{PYTHONPATH} "${WORK_DIR}/prefix/lib/python3/dist-packages")
  # (a newline, not "; ", between the statements: run() would split the argument at a semicolon)
  run(${PYTHON} -c "import kevo\nprint(kevo.search(kevo.workload('matmul:M=512,N=512,K=512,dtype=bf16'), target='trn2', budget=200).best.fraction_of_peak)")
  if(NOT LAST_OUT MATCHES "^0\\.[0-9]+")
    message(FATAL_ERROR "the Python one-liner printed no fraction of peak:\n${LAST_OUT}")
  endif()
  message(STATUS "python from the prefix: ${LAST_OUT}")
endif()
