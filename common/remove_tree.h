// RemoveTree: rm -rf of a directory (or a file), with POSIX nftw. Not std::filesystem::remove_all:
// in a binary linked with the PyPI wheel's LibTorch, that symbol binds to the copy libtorch.so
// exports, which crashes (a call through a null pointer; seen with torch 2.11.0+cu130). Plain
// C++, no LibTorch. Best effort: what cannot be removed stays; a missing path is not an error.
#ifndef DHP_COMMON_REMOVE_TREE_H_
#define DHP_COMMON_REMOVE_TREE_H_

#include <string>

namespace dhp {

void RemoveTree(const std::string& path);

}  // namespace dhp

#endif  // DHP_COMMON_REMOVE_TREE_H_
