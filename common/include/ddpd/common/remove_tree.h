// Removes a directory tree (or a file), as `rm -rf` would, without following symbolic links.
// Written on nftw rather than std::filesystem::remove_all: a program that loads the CUDA torch
// wheel's libtorch.so binds remove_all to libtorch's own copy, which crashed (a call to address
// 0, under cuda-gdb on an H100 machine, 2026-11-26) where the system's works.
#pragma once

#include <string>
#include <system_error>

namespace ddpd {

// A path that does not exist is no error. Throws std::system_error naming the first path that
// cannot be removed.
void remove_tree(const std::string& path);
// The same; the first failure goes into `error` instead (cleared on success). Never throws.
void remove_tree(const std::string& path, std::error_code& error) noexcept;

}  // namespace ddpd
