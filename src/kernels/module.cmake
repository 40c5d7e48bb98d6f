# src/kernels: FlashInfer's paged attention kernels (the `--kv-cache paged`
# baseline), compiled from the pinned flashinfer-python wheel's headers
# (cmake/flashinfer.cmake) as C++17 object libraries, each for the
# architectures that run it:
#   FA3 prefill        sm_90a only
#   FA2 prefill        every architecture but sm_90a (sm_80)
#   FA2 decode, plans  every architecture
#   FA2 POD            every architecture (FlashInfer's POD wrapper, the paged
#                      baseline's --attention pod)
# Only head_dim 128, fp16/bf16, the masks vpod uses are instantiated.
include(${CMAKE_SOURCE_DIR}/cmake/flashinfer.cmake)

set(vpod_fi_dir ${CMAKE_SOURCE_DIR}/src/kernels/attention/flashinfer)
set(vpod_fi_fa3_archs "")
set(vpod_fi_fa2_prefill_archs "")
foreach(arch IN LISTS VPOD_CUDA_ARCHS)
  if(arch MATCHES "^90a")
    list(APPEND vpod_fi_fa3_archs ${arch})
  else()
    list(APPEND vpod_fi_fa2_prefill_archs ${arch})
  endif()
endforeach()

function(vpod_flashinfer_objects name archs)
  add_library(${name} OBJECT ${ARGN})
  set_target_properties(${name} PROPERTIES CUDA_ARCHITECTURES "${archs}" CUDA_STANDARD 17
    CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${name} BEFORE PRIVATE ${VPOD_FLASHINFER_CCCL_DIRS})
  target_include_directories(${name} SYSTEM PRIVATE ${VPOD_FLASHINFER_INCLUDE_DIRS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CUDAToolkit_INCLUDE_DIRS})
  # CUTLASS's defaulted host/device constructors (20012) and FlashInfer's
  # unused variables (177, 550) are theirs, not ours. -use_fast_math and the
  # extended sm_90 MMA shapes are what FlashInfer's JIT compiles its kernels
  # with (flashinfer/jit/core.py): without fast math its exp2f calls are not
  # ex2.approx.ftz, and its FA3 kernels ran 5-17% slower than FlashInfer ships
  # them (docs/attention.md).
  target_compile_options(${name} PRIVATE --expt-relaxed-constexpr -use_fast_math
    -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -diag-suppress=20012,177,550)
  target_sources(vpod_kernels PRIVATE $<TARGET_OBJECTS:${name}>)
endfunction()

vpod_flashinfer_objects(vpod_flashinfer_common "${VPOD_CUDA_ARCHS}"
  ${vpod_fi_dir}/fi_plan.cu ${vpod_fi_dir}/page_gather.cu ${vpod_fi_dir}/fa2_decode_f16.cu
  ${vpod_fi_dir}/fa2_decode_bf16.cu)
vpod_flashinfer_objects(vpod_flashinfer_pod "${VPOD_CUDA_ARCHS}"
  ${vpod_fi_dir}/fa2_pod_f16.cu ${vpod_fi_dir}/fa2_pod_bf16.cu)
# The version reports name (fi::paged_kernels_label); on the one file that
# says it, so a version bump recompiles no kernel.
set_property(SOURCE ${vpod_fi_dir}/paged_plan.cpp APPEND PROPERTY COMPILE_DEFINITIONS
  VPOD_FLASHINFER_VERSION_STRING="${VPOD_FLASHINFER_VERSION}")
if(vpod_fi_fa3_archs)
  vpod_flashinfer_objects(vpod_flashinfer_fa3 "${vpod_fi_fa3_archs}"
    ${vpod_fi_dir}/fa3_prefill_f16.cu ${vpod_fi_dir}/fa3_prefill_bf16.cu)
  target_compile_definitions(vpod_kernels PRIVATE VPOD_FLASHINFER_FA3=1)
endif()
if(vpod_fi_fa2_prefill_archs)
  vpod_flashinfer_objects(vpod_flashinfer_fa2_prefill "${vpod_fi_fa2_prefill_archs}"
    ${vpod_fi_dir}/fa2_prefill_f16.cu ${vpod_fi_dir}/fa2_prefill_bf16.cu)
  target_compile_definitions(vpod_kernels PRIVATE VPOD_FLASHINFER_FA2_PREFILL=1)
endif()
