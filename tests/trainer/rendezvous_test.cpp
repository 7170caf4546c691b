// The init methods of torch.distributed.init_process_group: env:// (torchrun
// and SLURM variables), tcp://, file://.
#include "volshard/trainer/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace volshard {
namespace {

using ::testing::HasSubstr;

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name, std::string* value) {
    auto it = vars.find(name);
    if (it == vars.end()) return false;
    *value = it->second;
    return true;
  };
}

TEST(RendezvousTest, EnvReadsTheTorchrunContract) {
  const auto env = env_of({{"RANK", "3"},
                           {"LOCAL_RANK", "1"},
                           {"WORLD_SIZE", "4"},
                           {"LOCAL_WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "10.0.0.1"},
                           {"MASTER_PORT", "29400"}});
  const Rendezvous r = parse_rendezvous("env://", -1, -1, env);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 2);
  EXPECT_EQ(r.host, "10.0.0.1");
  EXPECT_EQ(r.port, 29400);
  EXPECT_TRUE(launched_by_launcher(env));
}

TEST(RendezvousTest, EnvFallsBackToSlurmWhenOnlyItsVariablesAreSet) {
  const auto env = env_of({{"SLURM_PROCID", "5"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NTASKS", "8"},
                           {"SLURM_NTASKS_PER_NODE", "4"},
                           {"MASTER_ADDR", "node1"}});
  const Rendezvous r = parse_rendezvous("env://", -1, -1, env);
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.world_size, 8);
  EXPECT_EQ(r.local_rank, 1);
  EXPECT_EQ(r.local_world_size, 4);
  EXPECT_EQ(r.host, "node1");
  EXPECT_EQ(r.port, 29500);
  EXPECT_EQ(r.source, "SLURM");
  EXPECT_TRUE(launched_by_launcher(env));
}

TEST(RendezvousTest, TcpAndFileTakeRankAndWorldFromArguments) {
  const auto env = env_of({});
  const Rendezvous t = parse_rendezvous("tcp://127.0.0.1:23456", 1, 2, env);
  EXPECT_EQ(t.kind, Rendezvous::Kind::kTcp);
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 23456);
  EXPECT_EQ(t.rank, 1);
  const Rendezvous f = parse_rendezvous("file:///tmp/rdzv", 0, 2, env);
  EXPECT_EQ(f.kind, Rendezvous::Kind::kFile);
  EXPECT_EQ(f.path, "/tmp/rdzv");
  EXPECT_FALSE(launched_by_launcher(env));
}

TEST(RendezvousTest, ErrorsNameTheVariableOrTheUrlPart) {
  auto expect_error = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "expected an error naming " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  expect_error(
      [] {
        parse_rendezvous("env://", -1, -1, env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
      },
      "MASTER_ADDR");
  expect_error(
      [] {
        parse_rendezvous("env://", -1, -1, env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}}));
      },
      "RANK='x'");
  expect_error(
      [] {
        parse_rendezvous(
            "env://", -1, -1,
            env_of(
                {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}));
      },
      "rank=2");
  expect_error([] { parse_rendezvous("tcp://host", 0, 1, env_of({})); }, "tcp://host:port");
  expect_error([] { parse_rendezvous("tcp://host:99999", 0, 1, env_of({})); }, "99999");
  expect_error([] { parse_rendezvous("file://relative", 0, 1, env_of({})); }, "absolute");
  expect_error([] { parse_rendezvous("mpi://", 0, 1, env_of({})); }, "mpi://");
}

}  // namespace
}  // namespace volshard
