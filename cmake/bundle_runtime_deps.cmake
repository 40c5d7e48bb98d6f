# Copies the shared libraries an executable resolves to, except those every
# Linux machine with an NVIDIA driver provides (glibc, libstdc++, libgcc, the
# driver), into DEST. Run in script mode after linking build/vpod.
#   cmake -DEXECUTABLE=build/vpod -DDEST=build/lib -P bundle_runtime_deps.cmake
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${EXECUTABLE}
  RESOLVED_DEPENDENCIES_VAR resolved
  UNRESOLVED_DEPENDENCIES_VAR unresolved
  DIRECTORIES ${DEST}
  PRE_EXCLUDE_REGEXES
    "^ld-linux" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^libpthread\\.so" "^librt\\.so"
    "^libstdc\\+\\+\\.so" "^libgcc_s\\.so" "^libcuda\\.so" "^linux-vdso"
  POST_EXCLUDE_REGEXES "^/lib64/ld-linux")
if(unresolved)
  message(FATAL_ERROR "unresolved shared libraries of ${EXECUTABLE}: ${unresolved}")
endif()
file(MAKE_DIRECTORY ${DEST})
foreach(lib IN LISTS resolved)
  get_filename_component(dir ${lib} DIRECTORY)
  get_filename_component(real_dir ${DEST} REALPATH)
  if(dir STREQUAL real_dir)
    continue()  # our own libvpod.so already lives there
  endif()
  get_filename_component(name ${lib} NAME)
  file(COPY_FILE ${lib} ${DEST}/${name} ONLY_IF_DIFFERENT)
endforeach()
