// The init methods of torch.distributed.init_process_group: env:// (torchrun
// and SLURM variables), tcp://, file://.
#include "volshard/trainer/rendezvous.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

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

// torch 2.x's torchrun serves the TCP store from its agent: the ranks join it as
// clients, under "/worker/attempt_<restart count>" (torch.distributed's
// _create_c10d_store).
TEST(RendezvousTest, TorchrunsAgentStoreIsJoinedUnderItsAttemptPrefix) {
  std::map<std::string, std::string> vars{{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", "29400"},
                                          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                          {"TORCHELASTIC_RESTART_COUNT", "3"}};
  Rendezvous r = parse_rendezvous("env://", -1, -1, env_of(vars));
  EXPECT_TRUE(r.launcher_hosts_store);
  EXPECT_EQ(r.store_prefix, "/worker/attempt_3");
  EXPECT_THAT(r.source, HasSubstr("agent store"));
  vars["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  r = parse_rendezvous("env://", -1, -1, env_of(vars));
  EXPECT_FALSE(r.launcher_hosts_store);
  EXPECT_EQ(r.store_prefix, "");
}

// Kubeflow's PyTorchJob: RANK and WORLD_SIZE count pods, PET_* are torchrun's
// flags, so volshard is the launcher; a worker (GROUP_RANK) is not.
TEST(RendezvousTest, PetVariablesMakeThisProcessTheLauncher) {
  std::map<std::string, std::string> vars{
      {"PET_NPROC_PER_NODE", "4"}, {"PET_NNODES", "2"},      {"RANK", "1"},
      {"WORLD_SIZE", "2"},         {"MASTER_ADDR", "pod-0"}, {"MASTER_PORT", "23456"}};
  PetLaunch p = pet_launch(env_of(vars));
  EXPECT_TRUE(p.present);
  EXPECT_EQ(p.nproc_per_node, 4);
  EXPECT_EQ(p.nnodes, 2);
  EXPECT_EQ(p.node_rank, 1);  // RANK, without PET_NODE_RANK
  EXPECT_EQ(p.master_addr, "pod-0");
  EXPECT_EQ(p.master_port, 23456);
  EXPECT_FALSE(launched_by_launcher(env_of(vars)));
  vars["PET_NODE_RANK"] = "0";
  vars["PET_MASTER_ADDR"] = "head";
  p = pet_launch(env_of(vars));
  EXPECT_EQ(p.node_rank, 0);
  EXPECT_EQ(p.master_addr, "head");
  vars["GROUP_RANK"] = "0";
  EXPECT_FALSE(pet_launch(env_of(vars)).present);
  EXPECT_TRUE(launched_by_launcher(env_of(vars)));
  vars.erase("GROUP_RANK");
  vars["PET_NNODES"] = "1:4";
  try {
    pet_launch(env_of(vars));
    FAIL() << "an elastic range was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("PET_NNODES='1:4'"));
  }
}

TEST(RendezvousTest, ARequeuedSlurmJobResumesItsRunOnlyWhenOneIsThere) {
  const std::string dir = ::testing::TempDir() + "volshard_requeue_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto requeued = env_of({{"SLURM_RESTART_COUNT", "1"}});
  EXPECT_EQ(requeued_run(dir, false, false, requeued), "");  // nothing to resume yet
  std::ofstream(dir + "/checkpoint.pt") << "x";
  EXPECT_EQ(requeued_run(dir, false, false, requeued), dir);
  EXPECT_EQ(requeued_run(dir, true, false, requeued), "");  // --resume given
  EXPECT_EQ(requeued_run(dir, false, true, requeued), "");  // --overwrite given
  EXPECT_EQ(requeued_run(dir, false, false, env_of({{"SLURM_RESTART_COUNT", "0"}})), "");
  EXPECT_EQ(requeued_run(dir, false, false, env_of({})), "");
  std::filesystem::remove_all(dir);
}

TEST(RendezvousTest, TheInterfaceTowardsTheMasterIsTheOneThatRoutesThere) {
  EXPECT_EQ(local_address_towards("127.0.0.1", 29500), "127.0.0.1");
  EXPECT_EQ(local_address_towards("no-such-host.invalid", 29500), "");
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
