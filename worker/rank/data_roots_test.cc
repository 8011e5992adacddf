#include "worker/rank/data_roots.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace dhp {
namespace {

class DataRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/dhp-data-roots-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    base_ = dir;
    root_ = base_ + "/data";
    outside_ = base_ + "/outside";
    models_ = base_ + "/models";
    for (const std::string& d : {root_, outside_, models_, root_ + "/shapes"}) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
    }
    std::ofstream(root_ + "/shapes/train.jsonl") << "{}\n";
    std::ofstream(outside_ + "/secret") << "x\n";
    ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/link").c_str()), 0);
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + base_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  v1::JobSpec Spec(const std::string& annotation, const std::string& weights = "") {
    v1::JobSpec spec;
    spec.mutable_model()->set_weights_path(weights);
    v1::DatasetSource& s = (*spec.mutable_data()->mutable_registry())["shapes"];
    s.set_annotation_path(annotation);
    s.set_image_root("shapes");
    return spec;
  }
  DataRootPolicy Policy() {
    DataRootPolicy p;
    p.data_root = root_;
    return p;
  }

  std::string base_, root_, outside_, models_;
};

TEST_F(DataRootsTest, PathsUnderTheDataRootAreAllowed) {
  EXPECT_TRUE(CheckSpecDataPaths(Spec("shapes/train.jsonl"), Policy()).ok());
  EXPECT_TRUE(CheckSpecDataPaths(Spec(root_ + "/shapes/train.jsonl"), Policy()).ok());
  EXPECT_TRUE(CheckSpecDataPaths(Spec("shapes/not-yet-there.jsonl"), Policy()).ok());
}

TEST_F(DataRootsTest, PathsThatLeaveTheRootsAreRefusedByField) {
  for (const std::string& path :
       {std::string("/etc/passwd"), std::string("../outside/secret"),
        std::string("shapes/../../outside/secret"), std::string("link/secret")}) {
    absl::Status s = CheckSpecDataPaths(Spec(path), Policy());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_NE(s.message().find("data.registry.shapes.annotation_path: \"" + path + "\""),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("outside this node's data roots (" + root_ + ")"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("--allow-data-root"), std::string::npos);
  }
  // A symbolic link inside the root that points out is shown resolved.
  absl::Status s = CheckSpecDataPaths(Spec("link/secret"), Policy());
  EXPECT_NE(s.message().find("resolves to " + outside_ + "/secret"), std::string::npos)
      << s.message();
  s = CheckSpecDataPaths(Spec("shapes/train.jsonl", models_ + "/qwen"), Policy());
  EXPECT_NE(s.message().find("model.weights_path"), std::string::npos) << s.message();
}

TEST_F(DataRootsTest, ExtraRootsAndAllowAnyWidenTheCheck) {
  DataRootPolicy p = Policy();
  p.extra_roots = {models_};
  EXPECT_TRUE(CheckSpecDataPaths(Spec("shapes/train.jsonl", models_ + "/qwen"), p).ok());
  EXPECT_FALSE(CheckSpecDataPaths(Spec(outside_ + "/secret", models_ + "/qwen"), p).ok());
  p.allow_any = true;
  EXPECT_TRUE(CheckSpecDataPaths(Spec("/etc/passwd"), p).ok());
}

}  // namespace
}  // namespace dhp
