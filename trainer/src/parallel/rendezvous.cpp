#include "volshard/trainer/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace volshard {
namespace {

int64_t parse_int(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < lo || value > hi) {
    throw std::invalid_argument("rendezvous: " + what + "='" + text + "' must be an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return value;
}

// The first of `names` that is set, or `fallback` (nullptr: required).
std::string lookup(const EnvLookup& env, std::initializer_list<const char*> names,
                   const char* fallback, std::string* used) {
  std::string value;
  for (const char* name : names) {
    if (env(name, &value)) {
      *used = name;
      return value;
    }
  }
  if (fallback == nullptr) {
    std::string list;
    for (const char* name : names) list += (list.empty() ? "" : " or ") + std::string(name);
    throw std::invalid_argument("rendezvous: environment variable " + list + " is not set");
  }
  *used = *names.begin();
  return fallback;
}

int64_t env_int(const EnvLookup& env, std::initializer_list<const char*> names,
                const char* fallback, int64_t lo, int64_t hi) {
  std::string used;
  const std::string text = lookup(env, names, fallback, &used);
  return parse_int(text, used, lo, hi);
}

constexpr int64_t kMaxWorld = 1 << 20;

}  // namespace

void Rendezvous::validate() const {
  if (world_size < 1 || world_size > kMaxWorld)
    throw std::invalid_argument("rendezvous: world_size=" + std::to_string(world_size) +
                                " must be >= 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("rendezvous: rank=" + std::to_string(rank) +
                                " must be in [0, world_size=" + std::to_string(world_size) + ")");
  if (local_world_size < 1 || local_rank < 0 || local_rank >= local_world_size)
    throw std::invalid_argument(
        "rendezvous: local_rank=" + std::to_string(local_rank) +
        " must be in [0, local_world_size=" + std::to_string(local_world_size) + ")");
  if (kind == Kind::kTcp && (port < 1 || port > 65535))
    throw std::invalid_argument("rendezvous: port=" + std::to_string(port) +
                                " must be in [1, 65535]");
  if (kind == Kind::kTcp && host.empty()) throw std::invalid_argument("rendezvous: host is empty");
  if (kind == Kind::kFile && path.empty())
    throw std::invalid_argument("rendezvous: file path is empty");
}

EnvLookup process_environment() {
  return [](const char* name, std::string* value) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return false;
    *value = v;
    return true;
  };
}

bool launched_by_launcher(const EnvLookup& env) {
  std::string ignored;
  if (pet_launch(env).present) return false;
  return env("RANK", &ignored) || env("SLURM_PROCID", &ignored);
}

PetLaunch pet_launch(const EnvLookup& env) {
  PetLaunch p;
  std::string ignored;
  if (!env("PET_NPROC_PER_NODE", &ignored) || env("GROUP_RANK", &ignored)) return p;
  p.present = true;
  p.nproc_per_node = env_int(env, {"PET_NPROC_PER_NODE"}, nullptr, 1, kMaxWorld);
  p.nnodes = env_int(env, {"PET_NNODES"}, "1", 1, kMaxWorld);
  p.node_rank = env_int(env, {"PET_NODE_RANK", "RANK"}, "0", 0, kMaxWorld);
  std::string used;
  p.master_addr = lookup(env, {"PET_MASTER_ADDR", "MASTER_ADDR"}, "", &used);
  std::string port;
  if (env("PET_MASTER_PORT", &port) || env("MASTER_PORT", &port))
    p.master_port =
        static_cast<int>(env_int(env, {"PET_MASTER_PORT", "MASTER_PORT"}, nullptr, 1, 65535));
  return p;
}

std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return "";
  std::string address;
  for (const addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t size = sizeof local;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* in =
          local.ss_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, in, text, sizeof text) != nullptr) address = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return address;
}

std::string requeued_run(const std::string& out_dir, bool resume_given, bool overwrite,
                         const EnvLookup& env) {
  if (resume_given || overwrite || out_dir.empty()) return "";
  if (env_int(env, {"SLURM_RESTART_COUNT"}, "0", 0, kMaxWorld) < 1) return "";
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(out_dir) / "checkpoint.pt", ec) ? out_dir
                                                                                       : "";
}

Rendezvous parse_rendezvous(const std::string& init_method, int64_t rank, int64_t world_size,
                            const EnvLookup& env) {
  Rendezvous r;
  std::string ignored;
  const bool torchrun = env("RANK", &ignored) || env("WORLD_SIZE", &ignored);
  const bool slurm = !torchrun && env("SLURM_PROCID", &ignored);
  // Rank and world size: arguments first, then torchrun's variables, then SLURM's.
  if (rank < 0) {
    rank = slurm ? env_int(env, {"SLURM_PROCID"}, nullptr, 0, kMaxWorld)
                 : env_int(env, {"RANK"}, nullptr, 0, kMaxWorld);
  }
  if (world_size < 0) {
    world_size = slurm ? env_int(env, {"SLURM_NTASKS"}, nullptr, 1, kMaxWorld)
                       : env_int(env, {"WORLD_SIZE"}, nullptr, 1, kMaxWorld);
  }
  r.rank = rank;
  r.world_size = world_size;
  if (slurm) {
    r.local_rank = env_int(env, {"SLURM_LOCALID"}, "0", 0, kMaxWorld);
    std::string per_node;
    // SLURM_NTASKS_PER_NODE may read "4(x2)"; only a plain number is used.
    r.local_world_size =
        env("SLURM_NTASKS_PER_NODE", &per_node) && per_node.find('(') == std::string::npos
            ? parse_int(per_node, "SLURM_NTASKS_PER_NODE", 1, kMaxWorld)
            : std::max<int64_t>(r.local_rank + 1, 1);
    r.source = "SLURM";
  } else {
    r.local_rank = env_int(env, {"LOCAL_RANK"}, std::to_string(rank).c_str(), 0, kMaxWorld);
    r.local_world_size =
        env_int(env, {"LOCAL_WORLD_SIZE"}, std::to_string(world_size).c_str(), 1, kMaxWorld);
    r.source = torchrun ? "torchrun environment" : "arguments";
  }

  const std::string env_prefix = "env://", tcp_prefix = "tcp://", file_prefix = "file://";
  if (init_method.empty() || init_method == env_prefix) {
    std::string used;
    r.kind = Rendezvous::Kind::kTcp;
    r.host = lookup(env, {"MASTER_ADDR"}, slurm ? "127.0.0.1" : nullptr, &used);
    r.port = static_cast<int>(env_int(env, {"MASTER_PORT"}, slurm ? "29500" : nullptr, 1, 65535));
    // torch.distributed's _create_c10d_store: torchrun's agent serves the store.
    std::string agent;
    if (torchrun && env("TORCHELASTIC_USE_AGENT_STORE", &agent) && agent == "True") {
      r.launcher_hosts_store = true;
      r.store_prefix =
          "/worker/attempt_" +
          std::to_string(env_int(env, {"TORCHELASTIC_RESTART_COUNT"}, "0", 0, kMaxWorld));
      r.source += " (torchrun's agent store)";
    }
  } else if (init_method.rfind(tcp_prefix, 0) == 0) {
    const std::string rest = init_method.substr(tcp_prefix.size());
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw std::invalid_argument("rendezvous: init method '" + init_method +
                                  "' must be tcp://host:port");
    r.kind = Rendezvous::Kind::kTcp;
    r.host = rest.substr(0, colon);
    if (r.host.size() > 2 && r.host.front() == '[' && r.host.back() == ']')
      r.host = r.host.substr(1, r.host.size() - 2);
    r.port = static_cast<int>(
        parse_int(rest.substr(colon + 1), "port of '" + init_method + "'", 1, 65535));
  } else if (init_method.rfind(file_prefix, 0) == 0) {
    r.kind = Rendezvous::Kind::kFile;
    r.path = init_method.substr(file_prefix.size());
    if (r.path.empty() || r.path.front() != '/')
      throw std::invalid_argument("rendezvous: init method '" + init_method +
                                  "' must be file:///absolute/path");
  } else {
    throw std::invalid_argument("rendezvous: init method '" + init_method +
                                "' must start with env://, tcp:// or file://");
  }
  r.validate();
  return r;
}

}  // namespace volshard
