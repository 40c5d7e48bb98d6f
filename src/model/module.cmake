# src/model: where make-model looks for the shared tokenizer fixtures.
target_compile_definitions(${module} PRIVATE VPOD_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
