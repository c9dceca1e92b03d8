# The manylinux_2_28 aarch64 wheel's toolchain (scripts/build_wheels.sh): Zig's clang from PyPI
# (`ziglang`) through scripts/zig/aarch64-linux-gnu.2.28-c++, so the op library needs no glibc
# symbol newer than 2.28 and carries its C++ runtime (Zig's libc++, always linked statically)
# inside, whatever distribution builds it. Why Zig and not a Debian cross toolchain: Debian's
# compilers link against this machine's glibc (2.36+), and no manylinux image runs without Docker.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER "${CMAKE_CURRENT_LIST_DIR}/zig/aarch64-linux-gnu.2.28-c++")
# customops/ort/CMakeLists.txt: no -static-libstdc++ (zig links its libc++ statically already).
set(BITNET_ONNX_ZIG_TOOLCHAIN ON)
# Reproducible bytes (scripts/build_wheels.sh builds twice and compares): no source or build path
# in the output (-ffile-prefix-map), and every symbol table and debug section stripped at link time
# (Zig's libc++ comes with debug info; lld writes no build-id note unless asked). Stripping here,
# not by CMake's install --strip, because the host's binutils strip may not know the target.
get_filename_component(_bitnet_source "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(CMAKE_CXX_FLAGS_INIT "-ffile-prefix-map=${_bitnet_source}=.")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,--strip-all")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
