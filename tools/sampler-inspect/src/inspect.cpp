#include "volshard/inspect/inspect.h"

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "volshard/core/seed_streams.h"
#include "volshard/inspect/assignment_png.h"
#include "volshard/sampler/batching.h"
#include "volshard/sampler/shard_check.h"

namespace volshard::inspect {
namespace {

constexpr size_t kShownEachEnd = 8;  // a long list shows its first and last 8

struct EpochShards {
  int64_t epoch = 0;
  bool complete = false;  // every rank computed (needed for --verify and moves)
  std::vector<std::vector<int64_t>> by_rank;
};

std::vector<int64_t> shown_ranks(const InspectOptions& o) {
  if (o.rank) return {*o.rank};
  std::vector<int64_t> ranks(static_cast<size_t>(o.sampler.num_replicas));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int64_t>(r);
  return ranks;
}

int64_t start_of(const InspectOptions& o) { return o.resume ? o.resume->consumed : 0; }

EpochShards compute_epoch(const InspectOptions& o, int64_t epoch) {
  EpochShards e;
  e.epoch = epoch;
  e.complete = !o.rank || o.verify || !o.png_path.empty();
  if (e.complete) {
    e.by_rank = all_shards(o.sampler, epoch, start_of(o));
  } else {
    e.by_rank.resize(static_cast<size_t>(o.sampler.num_replicas));
    const auto r = static_cast<size_t>(*o.rank);
    if (o.resume) {
      e.by_rank[r] =
          DistributedSampler::restore(*o.resume, *o.rank, o.sampler.num_replicas).indices();
    } else {
      DistributedSamplerOptions one = o.sampler;
      one.rank = *o.rank;
      DistributedSampler sampler(one);
      sampler.set_epoch(epoch);
      e.by_rank[r] = sampler.indices().to_vector();
    }
  }
  return e;
}

std::string hex64(uint64_t v);

void print_seed_list(std::ostream& out, const SeedStreams& streams,
                     const std::vector<int64_t>& shard, int64_t epoch) {
  const size_t shown = std::min<size_t>(shard.size(), 4);
  for (size_t k = 0; k < shown; ++k)
    out << ' ' << shard[k] << ':' << hex64(streams.sample_seed(shard[k], epoch));
  if (shown < shard.size()) out << " ... (" << shard.size() - shown << " more)";
}

void print_list(std::ostream& out, const std::vector<int64_t>& v, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) out << (i == begin ? "" : " ") << v[i];
}

void print_elided(std::ostream& out, const std::vector<int64_t>& v) {
  if (v.size() <= 2 * kShownEachEnd + 2) {
    print_list(out, v, 0, v.size());
    return;
  }
  print_list(out, v, 0, kShownEachEnd);
  out << " ... (" << v.size() - 2 * kShownEachEnd << " more) ... ";
  print_list(out, v, v.size() - kShownEachEnd, v.size());
}

std::vector<std::vector<int64_t>> batches_of(const std::vector<int64_t>& shard,
                                             const InspectOptions& o) {
  std::vector<std::vector<int64_t>> batches;
  const int64_t steps =
      steps_per_epoch(static_cast<int64_t>(shard.size()), o.batch_size, o.drop_last_batch);
  for (int64_t b = 0; b < steps; ++b) {
    const auto begin = shard.begin() + b * o.batch_size;
    const auto end = shard.begin() +
                     std::min<int64_t>((b + 1) * o.batch_size, static_cast<int64_t>(shard.size()));
    batches.emplace_back(begin, end);
  }
  return batches;
}

std::string hex64(uint64_t v) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << v;
  return os.str();
}

std::string verdict_line(const InspectOptions& o, const EpochCheck& c) {
  std::ostringstream os;
  os << "verify epoch " << c.epoch << ": ";
  if (!c.ok()) {
    os << "FAIL:";
    for (const auto& f : c.failures) os << ' ' << f << ';';
    return os.str();
  }
  const ShardLayout layout = ShardLayout::make(o.sampler.dataset_size, o.sampler.num_replicas,
                                               o.sampler.mode, start_of(o));
  os << "OK  " << to_string(o.sampler.mode) << ": ";
  if (layout.start > 0) os << layout.start << " consumed before + ";
  os << layout.total_size << " positions over " << layout.num_replicas << " ranks";
  switch (o.sampler.mode) {
    case PartitionMode::kPad:
      os << ", every sample present, " << c.padded << " padded by repetition";
      break;
    case PartitionMode::kDropLast:
      os << ", no repeats, " << c.dropped << " dropped";
      break;
    case PartitionMode::kUneven:
      os << ", every sample exactly once, shards " << layout.num_samples(0) << ".."
         << layout.num_samples(layout.num_replicas - 1);
      break;
  }
  if (c.changed_rank >= 0) {
    os << "; " << c.changed_rank << " of " << layout.dataset_size
       << " samples changed rank since epoch " << c.epoch - 1;
  }
  return os.str();
}

int verify(const InspectOptions& o, const EpochShards& e, const EpochShards* previous,
           std::ostream& out) {
  const EpochCheck c = check_epoch(o.sampler, e.epoch, e.by_rank,
                                   previous ? &previous->by_rank : nullptr, start_of(o));
  out << verdict_line(o, c) << '\n';
  return c.ok() ? 0 : 1;
}

void print_table_header(const InspectOptions& o, std::ostream& out) {
  if (o.resume) {
    out << "resuming epoch " << o.resume->epoch << ": " << o.resume->consumed << " of "
        << o.resume->dataset_size << " samples consumed at world_size=" << o.resume->world_size
        << "; the rest split over " << o.sampler.num_replicas << " ranks\n";
  }
  const ShardLayout layout = ShardLayout::make(o.sampler.dataset_size, o.sampler.num_replicas,
                                               o.sampler.mode, start_of(o));
  out << "size=" << layout.dataset_size << " world_size=" << layout.num_replicas
      << " seed=" << o.sampler.seed << " shuffle=" << (o.sampler.shuffle ? "true" : "false")
      << " mode=" << to_string(o.sampler.mode) << "  total_size=" << layout.total_size
      << " samples/rank=" << layout.num_samples(0);
  if (o.sampler.mode == PartitionMode::kUneven &&
      layout.num_samples(layout.num_replicas - 1) != layout.num_samples(0)) {
    out << ".." << layout.num_samples(layout.num_replicas - 1);
  }
  if (o.batch_size > 0) {
    out << "  batch=" << o.batch_size << (o.drop_last_batch ? " (drop last)" : "")
        << " steps/epoch=" << max_steps_per_epoch(layout, o.batch_size, o.drop_last_batch);
  }
  out << '\n';
}

void print_table_epoch(const InspectOptions& o, const EpochShards& e, const EpochShards* previous,
                       std::ostream& out) {
  out << "\nepoch " << e.epoch;
  if (o.sampler.shuffle) out << "  (generator seed " << epoch_seed(o.sampler.seed, e.epoch) << ")";
  out << '\n';
  const auto ranks = shown_ranks(o);
  for (int64_t r : ranks) {
    const auto& shard = e.by_rank[static_cast<size_t>(r)];
    out << "  rank " << std::setw(2) << r << "  " << std::setw(3) << shard.size() << " samples: ";
    print_elided(out, shard);
    out << '\n';
  }
  if (o.batch_size > 0) {
    for (int64_t r : ranks) {
      const auto batches = batches_of(e.by_rank[static_cast<size_t>(r)], o);
      out << "  rank " << std::setw(2) << r << "  " << batches.size() << " batches:";
      const size_t shown = std::min<size_t>(batches.size(), 2 * kShownEachEnd);
      for (size_t b = 0; b < shown; ++b) {
        out << " [";
        print_list(out, batches[b], 0, batches[b].size());
        out << ']';
      }
      if (shown < batches.size()) out << " ... (" << batches.size() - shown << " more)";
      out << '\n';
    }
  }
  if (o.seeds) {
    const SeedStreams streams(o.sampler.seed);
    out << "  seeds: permutation " << streams.permutation_seed(e.epoch) << "\n";
    for (int64_t r : ranks) {
      out << "  rank " << std::setw(2) << r << "  rank seed "
          << hex64(streams.rank_seed(r, e.epoch)) << "  sample seeds:";
      print_seed_list(out, streams, e.by_rank[static_cast<size_t>(r)], e.epoch);
      out << '\n';
    }
  }
  if (previous != nullptr && e.complete && previous->complete) {
    out << "  " << count_changed_owner(o.sampler.dataset_size, previous->by_rank, e.by_rank)
        << " of " << o.sampler.dataset_size << " samples changed rank since epoch "
        << previous->epoch << '\n';
  }
}

void print_summary_epoch(const InspectOptions& o, const EpochShards& e, std::ostream& out) {
  constexpr size_t kEnds = 3;
  out << "epoch " << e.epoch << '\n';
  for (int64_t r : shown_ranks(o)) {
    const auto& shard = e.by_rank[static_cast<size_t>(r)];
    const size_t k = std::min(kEnds, shard.size());
    out << "  rank " << r << "  num_samples=" << shard.size() << "  first=[";
    print_list(out, shard, 0, k);
    out << "]  last=[";
    print_list(out, shard, shard.size() - k, shard.size());
    out << "]  fingerprint=" << hex64(fingerprint(shard));
    if (o.seeds) out << "  rank_seed=" << hex64(SeedStreams(o.sampler.seed).rank_seed(r, e.epoch));
    out << '\n';
  }
}

void print_csv_epoch(const InspectOptions& o, const EpochShards& e, std::ostream& out) {
  const SeedStreams streams(o.sampler.seed);
  for (int64_t r : shown_ranks(o)) {
    const auto& shard = e.by_rank[static_cast<size_t>(r)];
    for (size_t p = 0; p < shard.size(); ++p) {
      out << e.epoch << ',' << r << ',' << p << ',' << shard[p];
      if (o.seeds) out << ',' << streams.sample_seed(shard[p], e.epoch);
      out << '\n';
    }
  }
}

nlohmann::ordered_json json_epoch(const InspectOptions& o, const EpochShards& e) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (int64_t r : shown_ranks(o)) {
    const auto& shard = e.by_rank[static_cast<size_t>(r)];
    nlohmann::ordered_json rank = {{"rank", r}, {"num_samples", shard.size()}, {"indices", shard}};
    if (o.batch_size > 0) rank["batches"] = batches_of(shard, o);
    if (o.seeds) {
      const SeedStreams streams(o.sampler.seed);
      rank["rank_seed"] = streams.rank_seed(r, e.epoch);
      std::vector<uint64_t> sample_seeds;
      for (int64_t i : shard) sample_seeds.push_back(streams.sample_seed(i, e.epoch));
      rank["sample_seeds"] = std::move(sample_seeds);
    }
    ranks.push_back(std::move(rank));
  }
  nlohmann::ordered_json epoch = {{"epoch", e.epoch}};
  if (o.resume) epoch["consumed_before"] = o.resume->consumed;
  if (o.seeds) epoch["permutation_seed"] = epoch_seed(o.sampler.seed, e.epoch);
  epoch["ranks"] = std::move(ranks);
  return epoch;
}

}  // namespace

Format parse_format(const std::string& text) {
  if (text == "table") return Format::kTable;
  if (text == "json") return Format::kJson;
  if (text == "csv") return Format::kCsv;
  if (text == "summary") return Format::kSummary;
  throw std::invalid_argument("--format=" + text + " must be one of table, json, csv, summary");
}

EpochRange parse_epoch_range(const std::string& text) {
  const auto colon = text.find(':');
  const auto bad = [&]() {
    return std::invalid_argument("--epochs=" + text + " must be A:B with integers 0 <= A <= B");
  };
  if (colon == std::string::npos) throw bad();
  EpochRange range;
  try {
    size_t used_a = 0, used_b = 0;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    range.first = std::stoll(a, &used_a);
    range.last = std::stoll(b, &used_b);
    if (used_a != a.size() || used_b != b.size()) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  if (range.first < 0 || range.first > range.last) throw bad();
  return range;
}

InspectOptions options_from_state(const SamplerState& state, int64_t world_size) {
  InspectOptions o;
  o.sampler = state.sampler_options(0, world_size > 0 ? world_size : state.world_size);
  o.epochs = {state.epoch, state.epoch};
  o.resume = state;
  return o;
}

uint64_t fingerprint(const std::vector<int64_t>& indices) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const int64_t v : indices) {
    const auto u = static_cast<uint64_t>(v);
    for (int byte = 0; byte < 8; ++byte) {
      h ^= (u >> (8 * byte)) & 0xFFu;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

int run(const InspectOptions& o, std::ostream& out, std::ostream& verdicts) {
  if (o.resume) {
    (void)DistributedSampler::restore(*o.resume, o.rank.value_or(0),
                                      o.sampler.num_replicas);  // validates
  } else {
    DistributedSamplerOptions check = o.sampler;
    check.rank = o.rank.value_or(0);
    DistributedSampler validate(check);  // throws with the bad value named
  }
  if (o.batch_size < 0) {
    throw std::invalid_argument("--batch-size=" + std::to_string(o.batch_size) + " must be >= 1");
  }
  const bool machine_readable = o.format == Format::kJson || o.format == Format::kCsv;
  std::ostream& verdict_out = machine_readable ? verdicts : out;

  nlohmann::ordered_json json_epochs = nlohmann::ordered_json::array();
  if (o.format == Format::kTable) print_table_header(o, out);
  if (o.format == Format::kCsv)
    out << (o.seeds ? "epoch,rank,position,index,sample_seed\n" : "epoch,rank,position,index\n");
  std::vector<PngRow> png_rows;

  int status = 0;
  EpochShards previous;
  bool have_previous = false;
  for (int64_t epoch = o.epochs.first; epoch <= o.epochs.last; ++epoch) {
    EpochShards e = compute_epoch(o, epoch);
    const EpochShards* prev = have_previous ? &previous : nullptr;
    switch (o.format) {
      case Format::kTable:
        print_table_epoch(o, e, prev, out);
        break;
      case Format::kSummary:
        print_summary_epoch(o, e, out);
        break;
      case Format::kCsv:
        print_csv_epoch(o, e, out);
        break;
      case Format::kJson:
        json_epochs.push_back(json_epoch(o, e));
        break;
    }
    if (o.verify) {
      if (o.format == Format::kTable) verdict_out << "  ";
      status |= verify(o, e, prev, verdict_out);
    }
    if (!o.png_path.empty()) png_rows.push_back({e.epoch, e.by_rank});
    previous = std::move(e);
    have_previous = true;
  }
  if (!o.png_path.empty()) {
    std::vector<int64_t> before;
    if (o.resume && o.resume->consumed > 0) {
      const auto perm =
          global_order(ShardLayout::make(o.sampler.dataset_size, 1, PartitionMode::kPad),
                       o.sampler.shuffle, o.sampler.seed, o.resume->epoch, o.sampler.randperm);
      before.assign(perm.begin(), perm.begin() + o.resume->consumed);
    }
    write_assignment_png(o.png_path, o.sampler.dataset_size, o.sampler.num_replicas, png_rows,
                         before);
    verdict_out << "wrote " << o.png_path << '\n';
  }
  if (o.format == Format::kJson) {
    nlohmann::ordered_json doc = {{"size", o.sampler.dataset_size},
                                  {"world_size", o.sampler.num_replicas},
                                  {"seed", o.sampler.seed},
                                  {"shuffle", o.sampler.shuffle},
                                  {"mode", to_string(o.sampler.mode)},
                                  {"epochs", std::move(json_epochs)}};
    if (o.batch_size > 0) {
      doc["batch_size"] = o.batch_size;
      doc["drop_last_batch"] = o.drop_last_batch;
    }
    out << doc.dump() << '\n';
  }
  return status;
}

}  // namespace volshard::inspect
