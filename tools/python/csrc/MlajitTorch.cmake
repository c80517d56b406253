# libmlajit_torch.so: the PyTorch custom ops in C++ (tools/python/csrc/mlajit_torch.cpp), built against the
# torch that the Python interpreter imports (Python3_EXECUTABLE; scikit-build-core sets it to the pip build's
# interpreter, so `pip install --no-build-isolation .` with torch installed builds it into the wheel).
# MLAJIT_TORCH_OPS: AUTO builds it when that interpreter imports torch with CUDA, ON requires it, OFF skips it.
# torch's own CMake package (TorchConfig.cmake) is not used: with a CUDA torch it looks for a full CUDA toolkit
# (nvcc, cudart), more than this one C++ file needs. Its headers and libraries are found from the package
# folder instead, and the build records torch.__version__ in the library (the loader refuses a mismatch).
set(_mlajit_torch_required OFF)
if(MLAJIT_TORCH_OPS STREQUAL "ON")
  set(_mlajit_torch_required ON)
endif()

function(_mlajit_torch_skip why)
  if(_mlajit_torch_required)
    message(FATAL_ERROR "MLAJIT_TORCH_OPS=ON but ${why}: install torch for ${Python3_EXECUTABLE} "
                        "(or point -DPython3_EXECUTABLE at an interpreter that has it), or use MLAJIT_TORCH_OPS=AUTO/OFF")
  endif()
  message(STATUS "mlajit: libmlajit_torch.so not built (${why}); the Python package keeps its Python-defined ops")
endfunction()

find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Python3_Interpreter_FOUND)
  _mlajit_torch_skip("no Python 3 interpreter found")
  return()
endif()
execute_process(
  COMMAND ${Python3_EXECUTABLE} -c
    "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.version.cuda or '')"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  _mlajit_torch_skip("${Python3_EXECUTABLE} cannot import torch")
  return()
endif()
string(REPLACE "\n" ";" _out "${_out}")
list(LENGTH _out _n)
if(_n LESS 3)
  _mlajit_torch_skip("could not read torch's version and folder from ${Python3_EXECUTABLE}")
  return()
endif()
list(GET _out 0 MLAJIT_TORCH_VERSION)
list(GET _out 1 _torch_dir)
list(GET _out 2 _torch_abi)
set(_torch_cuda "")
if(_n GREATER 3)
  list(GET _out 3 _torch_cuda)
endif()
set(_torch_libs c10 torch_cpu torch c10_cuda)
foreach(l ${_torch_libs})
  if(NOT EXISTS "${_torch_dir}/lib/lib${l}.so")
    _mlajit_torch_skip("torch ${MLAJIT_TORCH_VERSION} at ${_torch_dir} has no lib/lib${l}.so (a CPU-only torch?)")
    return()
  endif()
endforeach()
if(NOT EXISTS "${_torch_dir}/include/torch/library.h")
  _mlajit_torch_skip("torch ${MLAJIT_TORCH_VERSION} at ${_torch_dir} ships no C++ headers")
  return()
endif()
message(STATUS "mlajit: building libmlajit_torch.so against torch ${MLAJIT_TORCH_VERSION} (CUDA ${_torch_cuda}) at ${_torch_dir}")

add_library(mlajit_torch SHARED ${CMAKE_SOURCE_DIR}/tools/python/csrc/mlajit_torch.cpp)
target_include_directories(mlajit_torch PRIVATE ${CMAKE_SOURCE_DIR}/include)
target_include_directories(mlajit_torch SYSTEM PRIVATE ${_torch_dir}/include ${_torch_dir}/include/torch/csrc/api/include
                           ${MLAJIT_CUDA_HOME}/include)
target_compile_definitions(mlajit_torch PRIVATE _GLIBCXX_USE_CXX11_ABI=${_torch_abi}
                           MLAJIT_TORCH_VERSION="${MLAJIT_TORCH_VERSION}")
target_compile_options(mlajit_torch PRIVATE ${MLAJIT_WARNINGS})
set(_torch_link)
foreach(l ${_torch_libs})
  list(APPEND _torch_link "${_torch_dir}/lib/lib${l}.so")
endforeach()
# torch's libraries are already loaded when Python loads this one (import torch); the rpath to libmlajit is
# $ORIGIN: both lie in the build folder, or in the installed package's lib/ folder.
target_link_libraries(mlajit_torch PRIVATE mlajit ${_torch_link})
set_target_properties(mlajit_torch PROPERTIES BUILD_RPATH "$ORIGIN;${_torch_dir}/lib" INSTALL_RPATH "$ORIGIN")
if(DEFINED SKBUILD)
  install(TARGETS mlajit_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
endif()
