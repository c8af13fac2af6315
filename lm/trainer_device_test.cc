// TrainLm on device ranks: the GPT trained on the fake GPU of runtime/fake_device.h (host memory
// behind asynchronous streams, the CUDA kernels' bodies run in host loops: ops/fake_device_op_kernels.h)
// logs the same losses as on the host, for every plan, with and without overlap, and resumes from
// a checkpoint written from device tensors. This is the path `train_lm --device cuda` takes
// (parameters made on the host and copied to the device, batches copied per step, the optimizer's
// update as device ops, the loss read back), checked on a machine without a GPU.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "meshflow/collectives/threads/threads_world.h"
#include "meshflow/data/token_file.h"
#include "meshflow/lm/trainer.h"
#include "meshflow/ops/fake_device_op_kernels.h"
#include "meshflow/runtime/fake_device.h"

namespace meshflow::lm {
namespace {

std::string Corpus() {
  static const std::string path = [] {
    const std::string p = std::string(::testing::TempDir()) + "/device_train.mftok";
    std::vector<uint32_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 7919 + i / 13) % 97 + 32);
    const Status s = WriteTokenFile(p, tokens, TokenWidth::kU16, 256);
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }();
  return path;
}

TrainLmOptions Options(const std::string& plan, bool device, bool overlap) {
  TrainLmOptions o;
  o.corpus = Corpus();
  o.plan = plan;
  o.steps = 4;
  o.batch_size = 8;
  o.model.seq_len = 16;
  o.model.dim = 32;
  o.model.heads = 2;
  o.model.layers = 2;
  o.model.mlp_hidden = 64;
  o.warmup_steps = 2;
  o.print_every = 0;
  o.overlap = overlap;
  o.bucket_mb = 0.01;
  if (device) o.device = Device::Cuda(0);
  return o;
}

// Runs TrainLm on `n` thread ranks, on the host or each rank on fake cuda:rank; the losses per step.
std::vector<double> Losses(const TrainLmOptions& o, int n, const std::string& csv) {
  std::unique_ptr<ThreadWorld> world = std::move(ThreadWorld::Create(n).value());
  TrainLmOptions opts = o;
  opts.log_csv = csv;
  const Status s = world->Run([&](Communicator& comm) -> Status {
    RankInfo me{.rank = comm.world_rank(), .size = n, .local_rank = comm.world_rank()};
    if (opts.device.is_host()) return TrainLm(comm, me, opts, nullptr).status();
    FakeDeviceCommunicator dev(comm, Device::Cuda(comm.world_rank()));
    return TrainLm(dev, me, opts, nullptr).status();
  });
  EXPECT_TRUE(s.ok()) << s;
  std::vector<double> losses;
  std::FILE* f = std::fopen(csv.c_str(), "r");
  if (f == nullptr) return losses;
  char line[512];
  if (std::fgets(line, sizeof(line), f) == nullptr) line[0] = 0;  // header
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    long long step = 0;
    double loss = 0;
    if (std::sscanf(line, "%lld,%lf", &step, &loss) == 2) losses.push_back(loss);
  }
  std::fclose(f);
  return losses;
}

class TrainerDeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InstallFakeCudaDevices());
    ASSERT_TRUE(InstallFakeCudaOpKernels());
  }
};

TEST_P(TrainerDeviceTest, DeviceRanksLogTheHostLosses) {
  const std::string plan = GetParam();
  const std::string dir = ::testing::TempDir();
  const std::vector<double> host = Losses(Options(plan, false, true), 2, dir + "/host-" + plan + ".csv");
  ASSERT_EQ(host.size(), 4u);
  for (bool overlap : {true, false}) {
    const std::vector<double> dev =
        Losses(Options(plan, true, overlap), 2, dir + "/dev-" + plan + (overlap ? "-on" : "-off") + ".csv");
    ASSERT_EQ(dev.size(), 4u) << "overlap " << overlap;
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_NEAR(dev[i], host[i], 1e-5) << plan << " step " << i << " overlap " << overlap;
    }
  }
}

// Checkpoints written from device tensors (copied to the host first, the async writer's snapshot
// included) and loaded back onto the device: a run stopped at step 3 and resumed ends with the
// losses of the uninterrupted run.
TEST_F(TrainerDeviceTest, ResumesFromACheckpointOfDeviceTensors) {
  const std::string dir = ::testing::TempDir();
  std::filesystem::remove_all(dir + "/ck-full");
  std::filesystem::remove_all(dir + "/ck-part");
  TrainLmOptions full = Options("fsdp", true, true);
  full.steps = 6;
  full.ckpt_every = 3;
  full.ckpt_dir = dir + "/ck-full";
  const std::vector<double> want = Losses(full, 2, dir + "/ck-full.csv");
  ASSERT_EQ(want.size(), 6u);
  TrainLmOptions part = full;
  part.ckpt_dir = dir + "/ck-part";
  part.steps = 3;
  ASSERT_EQ(Losses(part, 2, dir + "/ck-part-a.csv").size(), 3u);
  part.steps = 6;  // resumes from step 3; the CSV is rewritten to the steps the checkpoint holds
  const std::vector<double> got = Losses(part, 2, dir + "/ck-part-a.csv");
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "step " << i;
}

INSTANTIATE_TEST_SUITE_P(Plans, TrainerDeviceTest, ::testing::Values("ddp", "zero1", "fsdp", "tp", "fsdp+tp"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n) c = c == '+' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace meshflow::lm
