# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test([=[test_roundtrip]=] "/work/main/build/tests/test_roundtrip" "/work/main/models/sample_cnn.onnx" "/work/main/build/tests/roundtrip_work")
set_tests_properties([=[test_roundtrip]=] PROPERTIES  ENVIRONMENT "KILN_SOURCE_DIR=/work/main" LABELS "unit" TIMEOUT "300" WORKING_DIRECTORY "/work/main/build/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;28;add_test;/work/main/tests/CMakeLists.txt;34;kiln_add_unit_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[test_engine_format]=] "/work/main/build/tests/test_engine_format")
set_tests_properties([=[test_engine_format]=] PROPERTIES  ENVIRONMENT "KILN_SOURCE_DIR=/work/main" LABELS "unit;badinput" TIMEOUT "300" WORKING_DIRECTORY "/work/main/build/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;28;add_test;/work/main/tests/CMakeLists.txt;36;kiln_add_unit_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[test_protobuf]=] "/work/main/build/tests/test_protobuf")
set_tests_properties([=[test_protobuf]=] PROPERTIES  ENVIRONMENT "KILN_SOURCE_DIR=/work/main" LABELS "unit;badinput" TIMEOUT "300" WORKING_DIRECTORY "/work/main/build/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;28;add_test;/work/main/tests/CMakeLists.txt;38;kiln_add_unit_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[test_onnx_import]=] "/work/main/build/tests/test_onnx_import" "/work/main/tests/data")
set_tests_properties([=[test_onnx_import]=] PROPERTIES  ENVIRONMENT "KILN_SOURCE_DIR=/work/main" LABELS "unit;badinput" TIMEOUT "300" WORKING_DIRECTORY "/work/main/build/tests" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;28;add_test;/work/main/tests/CMakeLists.txt;39;kiln_add_unit_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[kiln_conformance]=] "/work/main/build/tests/kiln_conformance" "/work/main/build/onnx_cases" "--required" "/work/main/tests/conformance/required_ops.txt")
set_tests_properties([=[kiln_conformance]=] PROPERTIES  LABELS "conformance" SKIP_RETURN_CODE "77" TIMEOUT "1800" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;47;add_test;/work/main/tests/CMakeLists.txt;0;")
