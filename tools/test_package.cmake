# ctest package_external_project: install the build at BUILD_DIR into a
# scratch prefix, then configure, build and test examples/external against
# it, as a kernel project would (find_package(attnkit) +
# attnkit_add_check), and, when PYTHON is given, import the installed
# Python package from PYTHON_DIR under the prefix and run a small check.
# Any step failing fails the test with its output.
set(work ${BUILD_DIR}/package_test)
file(REMOVE_RECURSE ${work})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "package test: `${cmd}` failed (${rc}):\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()
step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/external -B ${work}/build
  -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${work}/prefix
  -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${work}/build)
step(${CMAKE_COMMAND} -E chdir ${work}/build ctest --output-on-failure)
if(NOT EXISTS ${work}/build/my_kernel_check.xml)
  message(FATAL_ERROR "package test: the check wrote no JUnit report")
endif()
if(PYTHON)
  step(${CMAKE_COMMAND} -E env PYTHONPATH=${work}/prefix/${PYTHON_DIR}
    PYTHONDONTWRITEBYTECODE=1 ${PYTHON} -c
    # (lines, not semicolons: a semicolon would split the CMake argument)
    "import attnkit, numpy as np\nassert attnkit.__file__.startswith('${work}/prefix'), attnkit.__file__\nq = np.ones((1, 2, 3, 8), np.float32)\nassert attnkit.reference.attention(q, q, q).shape == q.shape\nprint('installed', attnkit.__version__, attnkit.__file__)")
endif()
