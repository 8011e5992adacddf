// dhpctl plan without a controller: the breakdown and the alternatives of the shipped configs,
// the verdict and exit code, and the errors of bad flags and bad specs.
#include "api/dhpctl/plan.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace dhp::dhpctl {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

PlanResult Plan(const std::string& path, const std::string& gpu = "h100-80gb", int per_node = 8) {
  PlanRequest req;
  req.spec_text = Read(path);
  req.source = path;
  req.gpu = gpu;
  req.gpus_per_node = per_node;
  return RunPlan(req);
}

bool HasLineStarting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

TEST(PlanTest, SevenBillionFitsAnH100) {
  const PlanResult r = Plan("configs/qwen2_5_vl_7b-sp4-tp4.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.rfind("qwen2_5_vl_7b-sp4-tp4: qwen2_5_vl_7b on 8 GPUs (vision sequence x4, "
                        "text tensor x4, dp 2, collocate)\n",
                        0),
            0u)
      << r.out;
  EXPECT_NE(r.out.find("\n8 vision+text ranks (world ranks 0-7)\nITEM "), std::string::npos);
  for (const char* item : {"vision parameters          1.26  ", "text parameters            3.55  ",
                           "text Adam moments          14.19 ", "runtime overhead", "total"}) {
    EXPECT_TRUE(HasLineStarting(r.out, item)) << item << "\n" << r.out;
  }
  EXPECT_NE(r.out.find("\n8 x h100-80gb (NVIDIA H100 80GB HBM3, 79.65 GiB each), 8 per node:\n"
                       "VISION       TEXT       DP  PLACEMENT  PEAK GIB  FITS  NOTE\n"
                       "sequence x4  tensor x4  2   collocate  66.64     yes   this spec\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\nx1           x1         8   collocate  199.07    no    needs 199.07 GiB "
                       "per GPU, has 79.65\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\n\nfits: the spec's layout needs 66.64 of the 79.65 GiB of each "
                       "h100-80gb (83%)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find(" \n"), std::string::npos) << "trailing spaces";
}

TEST(PlanTest, ALayoutThatDoesNotFitExitsOneAndSaysWhy) {
  PlanResult r = Plan("configs/qwen2_5_vl_7b-sp4-tp4.yaml", "a100-40gb");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(HasLineStarting(r.out, "does not fit: the spec's layout on a100-40gb: needs "))
      << r.out;
  r = Plan("configs/qwen2_5_vl_7b-sp4-tp4.yaml", "h100-80gb", 2);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(HasLineStarting(r.out,
                              "does not fit: the spec's layout on h100-80gb: a tensor-parallel "
                              "group of 4 ranks does not fit a node of 2 GPUs; "))
      << r.out;
  // The 32B layout: on an H200 it fits.
  EXPECT_EQ(Plan("configs/qwen2_5_vl_32b-sp8-tp8.yaml", "h200-141gb").exit_code, 0);
}

TEST(PlanTest, BadFlagsAndSpecsAreUsageErrors) {
  PlanResult r = Plan("configs/tiny-cpu.yaml", "h100");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "dhpctl: --gpu h100 is not a known GPU; use one of h100-80gb, h200-141gb, a100-40gb, "
            "a100-80gb, l40s-48gb\n");
  for (int n : {0, -1, kMaxGpusPerNode + 1}) {
    r = Plan("configs/tiny-cpu.yaml", "h100-80gb", n);
    EXPECT_EQ(r.exit_code, 2) << n;
    EXPECT_EQ(r.err, "dhpctl: --gpus-per-node " + std::to_string(n) + " must be in 1..256\n");
  }
  PlanRequest req;
  req.source = "bad.yaml";
  req.spec_text = Read("configs/tiny-cpu.yaml") + "vision: {degree: 3}\n";
  r = RunPlan(req);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml: "), std::string::npos) << r.err;
  req.spec_text =
      "name: x\nmodel: {preset: tiny}\nvision: {parallelism: sequence, degree: 3}\n"
      "training: {max_steps: 1}\ndata: {datasets: [s], registry: {s: {annotation_path: a}}}\n";
  r = RunPlan(req);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "dhpctl: bad.yaml: vision.degree: 3 does not divide the 4 attention heads of the tiny "
            "vision encoder\n");
  req.spec_text =
      "name: x\nmodel: {weights_path: hf}\n"
      "training: {max_steps: 1}\ndata: {datasets: [s], registry: {s: {annotation_path: a}}}\n";
  r = RunPlan(req);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "dhpctl: bad.yaml: model.weights_path: \"hf\" names the model, and this process cannot "
            "read model directories; add model.preset naming its architecture to plan it\n");
  for (const char* text : {"", "\x01\xff", "[1, 2", "name: 7\nmodel: []\n"}) {
    req.spec_text = text;
    r = RunPlan(req);
    EXPECT_EQ(r.exit_code, 2) << text;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace dhp::dhpctl
