# Packaging checks, shell scripts run by ctest (included from CMakeLists.txt):
#   test_library_exports  libkvrouter.so exports exactly the public API
#   test_install          a real `cmake --install` into a temporary DESTDIR, the
#                         example gateway built against it with pkg-config
#   test_man_page         kvrouter(1) renders and names what the commands have
#   test_debian_metadata  debian/ has this version and the SONAME's package
set(kvr_pkg_tests ${CMAKE_SOURCE_DIR}/tests/package)
set(kvr_example_cflags "")
if(KVR_ASAN)
  set(kvr_example_cflags "-fsanitize=address,undefined")
endif()
add_test(NAME test_library_exports
         COMMAND sh ${kvr_pkg_tests}/test_library_exports.sh $<TARGET_FILE:kvrouter_shared>
                 ${CMAKE_SOURCE_DIR} ${KVR_GENERATED_INCLUDE})
add_test(NAME test_install
         COMMAND sh ${kvr_pkg_tests}/test_install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
                 "${kvr_example_cflags}")
add_test(NAME test_man_page
         COMMAND sh ${kvr_pkg_tests}/test_man_page.sh $<TARGET_FILE:kvrouter> ${CMAKE_SOURCE_DIR})
add_test(NAME test_debian_metadata
         COMMAND sh ${kvr_pkg_tests}/test_debian_metadata.sh ${CMAKE_SOURCE_DIR} ${PROJECT_VERSION}
                 $<TARGET_FILE:kvrouter_shared>)
set_tests_properties(test_library_exports test_install test_man_page test_debian_metadata
                     PROPERTIES TIMEOUT 300)
