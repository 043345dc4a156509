// remove_tree: a nested tree goes, a link's target stays, a missing path is no error, and a
// path that cannot be removed is named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ddpd/common/remove_tree.h"

namespace ddpd {
namespace {

namespace fs = std::filesystem;

TEST(RemoveTree, RemovesATreeButNotWhatItsLinksPointTo) {
  const fs::path root =
      fs::temp_directory_path() / ("ddpd-remove-tree-" + std::to_string(getpid()));
  const fs::path outside = root.string() + "-outside";
  fs::create_directories(root / "a" / "b");
  fs::create_directories(outside);
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(outside / "kept") << "y";
  fs::create_directory_symlink(outside, root / "a" / "link");
  remove_tree(root.string());
  EXPECT_FALSE(fs::exists(root));
  EXPECT_TRUE(fs::exists(outside / "kept"));    // the link went, not its target
  EXPECT_NO_THROW(remove_tree(root.string()));  // missing: nothing to do
  std::error_code error;
  remove_tree(outside.string(), error);
  EXPECT_FALSE(error);
  EXPECT_FALSE(fs::exists(outside));
}

// procfs refuses to unlink its entries, root included: a failure on every machine.
TEST(RemoveTree, NamesWhatItCannotRemove) {
  try {
    remove_tree("/proc/self/comm");
    ADD_FAILURE() << "a procfs entry was removed";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find("removing /proc/self/comm"), std::string::npos)
        << e.what();
  }
  std::error_code error;
  remove_tree("/proc/self/comm", error);
  EXPECT_TRUE(error);
}

}  // namespace
}  // namespace ddpd
