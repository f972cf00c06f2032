# `cmake --install build [--prefix P]`: the engine as one library for its users' projects.
#
#   P/lib/libcann_train.a                 every area's objects (src/*), one archive
#   P/include/cann_train/<area>/*.h       the areas' headers, as the engine includes them
#   P/lib/cmake/cann_train/cann_trainConfig.cmake
#
# find_package(cann_train) then gives the target cann_train::cann_train: the archive, both
# include directories (so <cann_train/comm/group.h> works and so do the headers' own
# "core/status.h" includes), C++20, and the system libraries the engine links (OpenMP,
# OpenBLAS's OpenMP build, oneDNN, yaml-cpp, Gloo, hiredis, cpp-httplib, OpenSSL).
set(cann_area_libs cann_core cann_comm cann_kernels cann_model_spec cann_model cann_plan
  cann_optim cann_parallel cann_data cann_recsys cann_ckpt cann_monitor cann_debug cann_elastic
  cann_train)
set(cann_objects)
foreach(lib ${cann_area_libs})
  list(APPEND cann_objects $<TARGET_OBJECTS:${lib}>)
endforeach()
add_library(cann_engine STATIC ${cann_objects})
set_target_properties(cann_engine PROPERTIES OUTPUT_NAME cann_train LINKER_LANGUAGE CXX)
install(TARGETS cann_engine ARCHIVE DESTINATION lib)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/ DESTINATION include/cann_train
  FILES_MATCHING PATTERN "*.h" PATTERN "cli" EXCLUDE)

# The system libraries as this build found them, written into the package config.
find_library(CANN_HIREDIS_LIB hiredis REQUIRED)
find_library(CANN_IBVERBS_LIB ibverbs)
if(TARGET gloo)
  set(CANN_GLOO_LINK gloo)
  set(CANN_GLOO_FIND "find_dependency(Gloo CONFIG)")
else()
  set(CANN_GLOO_LINK /usr/lib/libgloo.so)
  set(CANN_GLOO_FIND "")
endif()
find_package(PkgConfig REQUIRED)
pkg_check_modules(CANN_HTTPLIB REQUIRED cpp-httplib)
set(CANN_EXTRA_LINK "${CANN_HTTPLIB_LINK_LIBRARIES}")
if(CANN_IBVERBS_LIB)
  list(APPEND CANN_EXTRA_LINK ${CANN_IBVERBS_LIB})
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/cann_trainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cann_trainConfig.cmake @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cann_trainConfig.cmake DESTINATION lib/cmake/cann_train)
