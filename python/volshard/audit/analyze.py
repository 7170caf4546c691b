"""From the records of one or more runs (record.py's JSON lines) to findings.

Every finding names a fixed ``kind`` (KINDS), a ``level`` ("error" fails the
audit, "note" informs), the loader (file:line where it was made, and the name
the script gave it), the ranks and epochs, a few example indices, what is wrong
and what fixes it. An epoch here is one pass over a loader (its n-th
``iter()``), counted from 0 per loader; the sampler's own epoch is shown beside
it where it has one.

The checks claim only what the records prove: shard checks run on epochs every
rank finished, gaps only where the sampler's index space is the dataset's,
random-state checks only on generators that the fetches drew from, so that a
clean script gives no finding."""

import collections
import glob
import json
import os
import re

# kind -> (default level, what it means). The JSON's kinds are these, for users' CI.
KINDS = {
    "shard_overlap": ("error", "an index read by two ranks in one epoch where the sampler is not meant to pad"),
    "shard_gap": ("error", "indices that no rank read in an epoch"),
    "padded_duplicates": ("note", "the sampler's padding repeats samples in an epoch (an error for a loader whose "
                                  "batches are scored)"),
    "no_reshuffle": ("error", "a shuffling loader yields the same order every epoch"),
    "same_order_across_ranks": ("error", "two ranks read the same indices in the same order"),
    "worker_rng_shared": ("error", "two workers start an epoch from the same state of a generator they draw from"),
    "rank_rng_shared": ("note", "two ranks start an epoch from the same state of a generator they draw from"),
    "augmentation_repeats_across_epochs": ("error", "a worker (or the main process) starts two epochs from the same "
                                                    "state of a generator it draws from"),
    "rerun_differs": ("error", "a rerun gave other indices or other samples"),
    "resume_mismatch": ("error", "a resumed epoch repeats or skips samples, or reads another order"),
}

_SCORED_WORDS = {"val", "valid", "validation", "validate", "eval", "evaluate", "evaluation", "test", "testing",
                 "score", "scoring", "metric", "metrics"}
_EXAMPLES = 5


# ------------------------------------------------------------------ the model


class Iteration:
    """One pass of one loader on one rank (run, key, rank, epoch)."""

    def __init__(self, run, key, rank, epoch, record, line):
        self.run, self.key, self.rank, self.epoch = run, key, rank, epoch
        self.line = line  # order of events in the rank's main file
        self.kind = record.get("kind", "torch")
        self.sampler = record.get("sampler") or {}
        self.iter_site = record.get("iter_site")
        self.iter_name = record.get("iter_name")
        self.resumed = record.get("resumed")
        self.states = record.get("states") or {}
        self.batches = {}   # k -> (indices, worker)
        self.grads = {}     # k -> grad enabled when the loop took batch k
        self.end = None     # batches consumed, when the epoch ended
        self.fetches = collections.defaultdict(list)  # worker -> fetch records (seq order)
        self.resume_of = None  # set by the resume analysis

    @property
    def complete(self):
        return self.end is not None

    @property
    def consumed(self):
        return self.end if self.end is not None else len(self.grads)

    def batch_list(self):
        out = []
        for k in range(self.consumed):
            if k not in self.batches:
                break
            out.append(self.batches[k])
        return out

    def samples(self):
        return [i for indices, _ in self.batch_list() for i in indices]

    def fingerprints(self):
        """Per consumed batch, the samples' fingerprints (None where not recorded)."""
        seqs = collections.defaultdict(int)
        out = []
        for indices, worker in self.batch_list():
            fetches = self.fetches.get(worker, [])
            j = seqs[worker]
            seqs[worker] += 1
            out.append(fetches[j]["fp"] if j < len(fetches) and fetches[j].get("fp") else None)
        return out

    def contexts(self):
        """worker -> (start state of each generator seen, generators drawn, first index it loaded)."""
        out = {}
        for worker, fetches in self.fetches.items():
            start, drawn, replaced, first = {}, set(), set(), None
            for f in fetches:
                for name, h in f.get("new", {}).items():
                    start.setdefault(name, h)
                drawn.update(f.get("drawn", []))
                replaced.update(f.get("replaced", []))
                if first is None and f.get("indices"):
                    first = f["indices"][0]
            out[worker] = (start, drawn - replaced, first)
        return out


class Run:
    def __init__(self, number):
        self.number = number
        self.loaders = {}        # key -> description (the first rank's)
        self.loader_order = []
        self.iters = {}          # (key, rank, epoch) -> Iteration
        self.saves = collections.defaultdict(list)  # rank -> [(line, record)]
        self.loads = collections.defaultdict(list)
        self.substitutions = []  # (rank, record)
        self.errors = {}         # rank -> record
        self.done = {}           # rank -> record
        self.stops = {}

    def ranks(self, key):
        return sorted({r for (k, r, _) in self.iters if k == key})

    def epochs(self, key):
        return sorted({e for (k, _, e) in self.iters if k == key})

    def at(self, key, epoch):
        return {r: it for (k, r, e), it in self.iters.items() if k == key and e == epoch}


def load_run(directory, number=1):
    """Reads a run's record files (rank{R}.{pid}.jsonl)."""
    run = Run(number)
    files = sorted(glob.glob(os.path.join(directory, "rank*.jsonl")))
    fetches = []
    for path in files:
        m = re.match(r"rank(\d+)\.", os.path.basename(path))
        rank = int(m.group(1))
        with open(path) as f:
            for line_no, text in enumerate(f):
                try:
                    r = json.loads(text)
                except ValueError:
                    continue  # a line cut by a kill
                t = r.get("t")
                if t == "loader":
                    if r["key"] not in run.loaders:
                        run.loaders[r["key"]] = r
                        run.loader_order.append(r["key"])
                elif t == "iter":
                    run.iters[(r["key"], rank, r["epoch"])] = Iteration(number, r["key"], rank, r["epoch"], r,
                                                                        line_no)
                elif t == "batch":
                    it = run.iters.get((r["key"], rank, r["epoch"]))
                    if it is not None:
                        it.batches[r["k"]] = (r["indices"], r["worker"])
                elif t == "next":
                    it = run.iters.get((r["key"], rank, r["epoch"]))
                    if it is not None:
                        it.grads[r["k"]] = r["grad"]
                elif t == "end":
                    it = run.iters.get((r["key"], rank, r["epoch"]))
                    if it is not None:
                        it.end = r["consumed"]
                elif t == "fetch":
                    fetches.append((rank, r))
                elif t == "save":
                    run.saves[rank].append((line_no, r))
                elif t == "load":
                    run.loads[rank].append((line_no, r))
                elif t == "subst":
                    run.substitutions.append((rank, r))
                elif t == "error":
                    run.errors.setdefault(rank, r)
                elif t == "done":
                    run.done[rank] = r
                elif t == "stop":
                    run.stops[rank] = r
    for rank, r in fetches:
        it = run.iters.get((r["key"], rank, r["epoch"]))
        if it is not None:
            it.fetches[r["worker"]].append(r)
    for it in run.iters.values():
        for worker in it.fetches:
            it.fetches[worker].sort(key=lambda f: f["seq"])
    return run


# --------------------------------------------------------------- descriptions


def short_path(path):
    """A path as the report shows it: relative to the working folder when inside it."""
    if path.startswith("<"):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def short_site(site):
    if not site:
        return "?"
    path, _, line = site.rpartition(":")
    return f"{short_path(path)}:{line}"


def loader_label(run, key):
    d = run.loaders.get(key, {})
    name = d.get("name")
    if not name:
        names = {it.iter_name for (k, _, _), it in run.iters.items() if k == key and it.iter_name}
        name = sorted(names)[0] if names else "loader"
    chain = key.split(" < ")
    site = short_site(d.get("site") or chain[0])
    twins = [k for k in run.loaders if k != key and k.split(" < ")[0] == chain[0]]
    if twins and len(chain) > 1:  # made by one helper from two places: say which
        site += f" via {short_site(chain[1])}"
    return f"{name} ({site})"


def _words(name):
    if not name:
        return set()
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def scored(run, key, override=None):
    """Whether the loader's batches are scored, and why: every batch taken with
    gradients off (torch.no_grad or inference_mode), or a name that says
    validation (val, valid, eval, test, ...) where it is made or iterated."""
    if override is not None:
        return bool(override), ("said so" if override else None)
    d = run.loaders.get(key, {})
    names = {d.get("name")} | {it.iter_name for (k, _, _), it in run.iters.items() if k == key}
    for n in sorted(x for x in names if x):
        if _words(n) & _SCORED_WORDS:
            return True, f"named {n}"
    grads = [g for (k, _, _), it in run.iters.items() if k == key for g in it.grads.values()]
    if grads and not any(grads):
        return True, "iterated with gradients off"
    return False, None


def _sampler_text(sampler):
    cls = (sampler.get("class") or "?").rsplit(".", 1)[-1]
    parts = []
    if "shuffle" in sampler:
        parts.append(f"shuffle={sampler['shuffle']}")
    if sampler.get("partition") == "distributed":
        if "seed" in sampler:
            parts.append(f"seed={sampler['seed']}")
        if sampler.get("drop_last"):
            parts.append("drop_last=True")
    return f"{cls}({', '.join(parts)})"


def _examples(values):
    out = sorted(values, key=lambda v: (str(type(v)), v))[:_EXAMPLES]
    return out


def _finding(kind, run, key, ranks, epochs, examples, message, fix, level=None, **extra):
    d = run.loaders.get(key, {})
    f = {"kind": kind, "level": level or KINDS[kind][0], "loader": short_site(d.get("site") or key.split(" < ")[0]),
         "loader_name": loader_label(run, key).split(" (")[0], "loader_key": key, "ranks": sorted(set(ranks)),
         "epochs": sorted(set(epochs)), "examples": list(examples), "message": message, "fix": fix}
    f.update(extra)
    return f


# ------------------------------------------------------------------- shards


def _analyzable(run, key, epoch, resumed):
    """The epoch's iterations when every rank that iterated it finished it and
    none of them is a resumed part of an epoch; else None."""
    its = run.at(key, epoch)
    if not its or any(not it.complete or (it.run, it.key, it.rank, it.epoch) in resumed for it in its.values()):
        return None
    return its


def _expected_extra(sampler):
    """(padding reads, dropped indices) a distributed sampler means to have per epoch."""
    n, total = sampler.get("dataset_size"), sampler.get("total_size")
    if n is None or total is None:
        return None, None
    return max(0, total - n), max(0, n - total)


def _batch_drops(desc, sampler, ranks):
    """Indices the loader's drop_last=True leaves out of each rank's last batch."""
    bs = desc.get("batch_size")
    if not desc.get("drop_last") or not bs:
        return 0
    per_rank = sampler.get("num_samples") if sampler.get("partition") == "distributed" \
        else sampler.get("dataset_size")
    return (per_rank % bs) * len(ranks) if per_rank is not None else 0


def shard_findings(run, resumed, scored_override=None):
    findings = []
    for key in run.loader_order:
        desc = run.loaders[key]
        if desc.get("iterable"):
            continue
        is_scored, why_scored = scored(run, key, scored_override)
        reshuffle_prev = None
        for epoch in run.epochs(key):
            its = _analyzable(run, key, epoch, resumed)
            if its is None:
                reshuffle_prev = None
                continue
            ranks = sorted(its)
            sampler = its[ranks[0]].sampler
            partition = sampler.get("partition", "other")
            samples = {r: its[r].samples() for r in ranks}
            ints = all(isinstance(i, int) and not isinstance(i, bool) for s in samples.values() for i in s)
            # Same order on two ranks (training loaders: a metric does not care).
            if len(ranks) > 1 and not is_scored:
                groups = collections.defaultdict(list)
                for r in ranks:
                    if len(samples[r]) >= 2:
                        groups[tuple(samples[r])].append(r)
                same = [g for g in groups.values() if len(g) > 1]
                if same:
                    rs = sorted(r for g in same for r in g)
                    findings.append(_finding(
                        "same_order_across_ranks", run, key, rs, [epoch], samples[same[0][0]][:_EXAMPLES],
                        f"ranks {', '.join(map(str, rs))} read the same {len(samples[same[0][0]])} indices in the "
                        f"same order in epoch {epoch}: every step trains on copies of one batch",
                        "give the loader a DistributedSampler(dataset) (torch's or MONAI's) with the same seed on "
                        "every rank, shuffle=False on the DataLoader, and sampler.set_epoch(epoch) each epoch"))
            if partition in ("distributed", "whole") or (partition == "other" and len(ranks) > 1):
                findings += _coverage(run, key, epoch, ranks, samples, sampler, desc, ints, is_scored, why_scored)
            # The same order as the epoch before, on every rank.
            if reshuffle_prev is not None and sampler.get("shuffle"):
                prev_epoch, prev = reshuffle_prev
                if set(prev) == set(its) and all(prev[r].samples() == samples[r] for r in ranks):
                    longest = max(len(s) for s in samples.values())
                    se0, se1 = prev[ranks[0]].sampler.get("epoch"), sampler.get("epoch")
                    if longest >= 2 and (se0 == se1 if se0 is not None and se1 is not None else longest >= 8):
                        stays = f" stays at epoch {se1}" if se1 is not None else " restarts from one state"
                        findings.append(_finding(
                            "no_reshuffle", run, key, ranks, [prev_epoch, epoch], samples[ranks[0]][:_EXAMPLES],
                            f"its {_sampler_text(sampler)} yields the same order in epochs {prev_epoch} and {epoch} "
                            f"on every rank: the sampler{stays}",
                            "call sampler.set_epoch(epoch) before each epoch's loop (torch's and MONAI's "
                            "DistributedSampler seed their shuffle with seed + epoch)"
                            if se1 is not None else
                            "seed the sampler's generator once, not before every epoch"))
            reshuffle_prev = (epoch, its)
    return findings


def _coverage(run, key, epoch, ranks, samples, sampler, desc, ints, is_scored, why_scored):
    out = []
    partition = sampler.get("partition", "other")
    if partition == "replacement":
        return out
    counts = collections.Counter(i for r in ranks for i in samples[r])
    owners = collections.defaultdict(set)
    for r in ranks:
        for i in samples[r]:
            owners[i].add(r)
    cross = [i for i, rs in owners.items() if len(rs) > 1]
    extra = sum(counts.values()) - len(counts)
    if partition == "other":
        # A custom sampler may mean its ranks to overlap; only whole shards read twice prove it is not
        # splitting the data (the same set of indices on two ranks).
        sets = collections.Counter(frozenset(samples[r]) for r in ranks if len(set(samples[r])) > 1)
        replicated = {i for shard, c in sets.items() if c > 1 for i in shard}
        cross = [i for i in cross if i in replicated]
        if not cross:
            return out
    n = sampler.get("dataset_size", desc.get("dataset_size"))
    seeds = {its_seed for its_seed in (run.at(key, epoch)[r].sampler.get("seed") for r in ranks)}
    replicas = {run.at(key, epoch)[r].sampler.get("num_replicas") for r in ranks}
    cause = ""
    if partition == "distributed" and len(seeds) > 1:
        cause = (f"the ranks' samplers have different seeds ({', '.join(str(s) for s in sorted(seeds, key=str))}): "
                 f"each rank takes its stride of its own permutation")
        fix = "give DistributedSampler the same seed on every rank (the default 0, or one shared value)"
    elif partition == "distributed" and replicas and None not in replicas and max(replicas) != len(ranks):
        cause = f"the sampler splits for num_replicas={max(replicas)} but {len(ranks)} ranks read it"
        fix = "leave num_replicas and rank to torch.distributed (or pass the world size and this rank)"
    elif partition == "distributed":
        fix = "give every rank the same DistributedSampler settings"
    elif partition == "other":
        cause = f"its {_sampler_text(sampler)} gives two ranks the same indices"
        fix = "give each rank its own part: num_replicas and rank in the sampler, or a DistributedSampler"
    else:
        cause = "it has no DistributedSampler, so every rank reads the whole dataset"
        fix = ("DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False, ...) and "
               "sampler.set_epoch(epoch) each epoch")
    pads, drops = _expected_extra(sampler) if partition == "distributed" else (0, 0)
    if pads is None:
        pads, drops = 0, 0
    if extra > pads and cross:
        full = ints and n is not None and all(set(samples[r]) >= set(range(n)) for r in ranks)
        level = "note" if (is_scored and full) else "error"
        what = (f"in epoch {epoch}, {len(cross)} indices are read by more than one rank "
                f"({sum(counts.values())} reads of {len(counts)} distinct indices over {len(ranks)} ranks)")
        if level == "note":
            what += f"; this loader is scored ({why_scored}) and every rank scores the whole set: the metric is " \
                    f"right, at {len(ranks)} times the work"
        out.append(_finding("shard_overlap", run, key, [r for i in cross for r in owners[i]], [epoch],
                            _examples(cross), what + (f": {cause}" if cause else ""), fix, level=level))
    elif extra > 0 and partition == "distributed":
        twice = [i for i, c in counts.items() if c > 1]
        if is_scored:
            msg = (f"its {_sampler_text(sampler)} pads epoch {epoch} to a multiple of {len(ranks)} ranks, so "
                   f"{extra} sample(s) are read twice, and this loader is scored ({why_scored}): a metric over the "
                   f"ranks counts them twice")
            fix_pad = ("monai.data.DistributedSampler(dataset, shuffle=False, even_divisible=False) (each sample "
                       "once, uneven shards), or volshard.ValidationLoader, or drop the padded samples' scores "
                       "before reducing")
            level = "error"
        else:
            msg = (f"its {_sampler_text(sampler)} pads epoch {epoch} to a multiple of {len(ranks)} ranks, so "
                   f"{extra} sample(s) are read twice (their gradients weigh twice in that epoch)")
            fix_pad = "nothing, usually; DistributedSampler(drop_last=True) drops instead of padding"
            level = "note"
        out.append(_finding("padded_duplicates", run, key, [r for i in twice for r in owners[i]], [epoch],
                            _examples(twice), msg, fix_pad, level=level))
    if ints and n is not None and partition in ("distributed", "whole"):
        missing = [i for i in range(n) if i not in counts]
        allowed = (drops or 0) + _batch_drops(desc, sampler, ranks)
        if len(missing) > allowed:
            where = ""
            if partition == "distributed" and replicas and None not in replicas and max(replicas) > len(ranks):
                where = f"only rank(s) {', '.join(map(str, ranks))} of num_replicas={max(replicas)} read it"
                fix_gap = "iterate the loader on every rank, or give the ranks that do a sampler for that many"
            else:
                where, fix_gap = cause, fix
            out.append(_finding("shard_gap", run, key, ranks, [epoch], missing[:_EXAMPLES],
                                f"in epoch {epoch}, {len(missing)} of {n} indices are read by no rank"
                                + (f": {where}" if where else ""), fix_gap))
    return out


# ------------------------------------------------------------ random states


def _generator_fix(name, desc):
    monai_r = name.endswith(".R")
    workers = desc.get("num_workers", 0)
    if monai_r and not desc.get("class", "").startswith("monai."):
        return ("use monai.data.DataLoader (its worker_init_fn reseeds each worker's MONAI transforms from the "
                "worker's seed), or pass worker_init_fn=monai.data.utils.worker_init_fn")
    if name in ("random", "numpy", "torch"):
        return ("seed it in worker_init_fn from torch.utils.data.get_worker_info().seed (distinct per worker and "
                "epoch), not from a constant" if workers else
                "seed it once at the start of the script, not before every epoch")
    return ("seed it per worker in worker_init_fn from torch.utils.data.get_worker_info().seed (new each epoch), "
            "or draw from numpy's or torch's global generator, which torch reseeds in each worker")


def rng_findings(run):
    findings = []
    for key in run.loader_order:
        desc = run.loaders[key]
        # Workers of one rank and epoch.
        shared = {}
        for (k, rank, epoch), it in sorted(run.iters.items()):
            if k != key:
                continue
            ctx = it.contexts()
            workers = [w for w in ctx if w >= 0]
            if len(workers) < 2:
                continue
            groups = collections.defaultdict(list)
            for w in workers:
                start, drawn, first = ctx[w]
                for g in drawn:
                    if g in start:
                        groups[(g, start[g])].append(w)
            for (g, _), ws in groups.items():
                if len(ws) > 1:
                    entry = shared.setdefault(g, {"ranks": set(), "epochs": set(), "examples": [], "workers": set()})
                    entry["ranks"].add(rank)
                    entry["epochs"].add(epoch)
                    entry["workers"].update(ws)
                    entry["examples"] += [ctx[w][2] for w in sorted(ws) if ctx[w][2] is not None]
        for g, e in sorted(shared.items()):
            findings.append(_finding(
                "worker_rng_shared", run, key, e["ranks"], e["epochs"], e["examples"][:_EXAMPLES],
                f"workers {', '.join(map(str, sorted(e['workers'])))} start each epoch from the same state of {g} "
                f"and draw from it: they apply the same random augmentation",
                _generator_fix(g, desc)))
        # One rank across epochs: the same context starting two epochs from one state.
        repeats = {}
        for rank in run.ranks(key):
            seen = collections.defaultdict(list)  # (g, state) -> [(epoch, worker, first index)]
            for epoch in run.epochs(key):
                it = run.iters.get((key, rank, epoch))
                if it is None:
                    continue
                for w, (start, drawn, first) in it.contexts().items():
                    for g in drawn:
                        if g in start:
                            seen[(g, start[g])].append((epoch, w, first))
            for (g, _), uses in seen.items():
                if len({u[0] for u in uses}) > 1:
                    entry = repeats.setdefault(g, {"ranks": set(), "epochs": set(), "examples": [], "who": set()})
                    entry["ranks"].add(rank)
                    entry["epochs"].update(u[0] for u in uses)
                    entry["who"].update(u[1] for u in uses)
                    entry["examples"] += [u[2] for u in uses if u[2] is not None]
        for g, e in sorted(repeats.items()):
            who = sorted(e["who"])
            who_text = "the main process" if who == [-1] else \
                "workers " + ", ".join(map(str, [w for w in who if w >= 0]))
            why = ("non-persistent workers copy it afresh from the main process at each epoch, where nothing "
                   "advances it" if any(w >= 0 for w in who) else "it is reseeded to the same state before each epoch")
            findings.append(_finding(
                "augmentation_repeats_across_epochs", run, key, e["ranks"], e["epochs"], e["examples"][:_EXAMPLES],
                f"{who_text} start epochs {', '.join(map(str, sorted(e['epochs'])))} from the same state of {g} "
                f"and draw from it: the same random draws repeat every epoch ({why})",
                _generator_fix(g, desc)))
        # Ranks: the same context of one epoch on two ranks.
        by_rank = {}
        for epoch in run.epochs(key):
            its = run.at(key, epoch)
            groups = collections.defaultdict(dict)
            for rank, it in its.items():
                for w, (start, drawn, first) in it.contexts().items():
                    for g in drawn:
                        if g in start:
                            groups[(g, w, start[g])][rank] = first
            for (g, w, _), firsts in groups.items():
                if len(firsts) > 1:
                    entry = by_rank.setdefault(g, {"ranks": set(), "epochs": set(), "who": set(), "examples": []})
                    entry["ranks"].update(firsts)
                    entry["epochs"].add(epoch)
                    entry["who"].add(w)
                    entry["examples"] += [firsts[r] for r in sorted(firsts) if firsts[r] is not None]
        for g, e in sorted(by_rank.items()):
            who = sorted(e["who"])
            who_text = "the main process" if who == [-1] else \
                "worker " + ", ".join(map(str, [w for w in who if w >= 0]))
            findings.append(_finding(
                "rank_rng_shared", run, key, e["ranks"], e["epochs"], e["examples"][:_EXAMPLES],
                f"ranks {', '.join(map(str, sorted(e['ranks'])))} start {who_text} from the same state of {g} in "
                f"epochs {', '.join(map(str, sorted(e['epochs'])))}: every rank draws the same augmentation (on "
                f"other samples)",
                "if not meant, seed with the rank (set_determinism(seed + rank), torch.manual_seed(seed + rank))"))
    return findings


# ------------------------------------------------------------------ resumes


def _find_save(runs, run_index, rank, digest, line):
    """The latest save of this state before `line` in the run, else in an earlier run."""
    run = runs[run_index]
    for ln, s in reversed(run.saves.get(rank, [])):
        if ln < line and s["state"] == digest and s.get("key") is not None:
            return run_index, s
    for j in range(run_index - 1, -1, -1):
        for _, s in reversed(runs[j].saves.get(rank, [])):
            if s["state"] == digest and s.get("key") is not None:
                return j, s
    return None, None


def find_resumes(runs):
    """[(run index, I2, I1, position, last, exact)] for every resumed pass: one
    begun after load_state_dict on its sampler, batch sampler or loader (I1: the
    pass whose state_dict() gave that state, at the samples the loop had taken
    then: exact), or one of a DistributedSampler that starts mid-epoch
    (set_epoch plus a start index; I1: the pass of the same sampler epoch that
    stopped early in this run, at the samples it had taken). ``last`` is the
    size of the last batch taken before the save: a loop may save before or
    after training on it, so the resume may start at position or position -
    last."""
    out = []
    for ri, run in enumerate(runs):
        for (key, rank, epoch), it in sorted(run.iters.items(), key=lambda kv: (kv[0][1], kv[1].line)):
            if it.resumed is not None:
                sj, save = _find_save(runs, ri, rank, it.resumed, it.line)
                if save is not None:
                    origin = runs[sj].iters.get((save["key"], rank, save["epoch"]))
                    if origin is not None:
                        out.append((ri, it, origin, save["position"], save.get("last", 0), True))
                        continue
            s = it.sampler
            short = (it.complete and s.get("partition") == "distributed" and s.get("num_samples") is not None
                     and len(it.samples()) < s["num_samples"] - _batch_drops(run.loaders.get(key, {}), s, [rank]))
            if it.resumed is None and not short:
                continue
            candidates = [o for (k, r, e), o in run.iters.items()
                          if r == rank and o.line < it.line and not o.complete
                          and o.sampler.get("class") == s.get("class")
                          and o.sampler.get("dataset_size") == s.get("dataset_size")
                          and o.sampler.get("epoch") == s.get("epoch")]
            if candidates:
                origin = max(candidates, key=lambda o: o.line)
                batches = origin.batch_list()
                out.append((ri, it, origin, len(origin.samples()), len(batches[-1][0]) if batches else 0, False))
    return out


def _rank_problems(origin, position, actual, exact):
    """What is wrong with one rank's resume from `position` of origin's pass: [(text, examples)]."""
    problems = []
    prefix = origin.samples()[:position]
    if exact and origin.complete:
        expected = origin.samples()[position:]
        if actual != expected:
            first = next((k for k, (a, b) in enumerate(zip(actual, expected)) if a != b),
                         min(len(actual), len(expected)))
            before, after = set(prefix), set(actual)
            repeated = [i for i in actual if i in before]
            skipped = [i for i in expected if i not in after]
            bits = []
            if repeated:
                bits.append(f"repeats {len(repeated)} sample(s) read before the save")
            if skipped:
                bits.append(f"skips {len(skipped)}")
            problems.append((" and ".join(bits or ["reads another order"]) + f" (first difference at its sample "
                             f"{first})", repeated or skipped or actual[first:first + 1]))
    elif exact and set(prefix) & set(actual):
        before = set(prefix)
        repeated = [i for i in actual if i in before]
        problems.append((f"repeats {len(repeated)} sample(s) read before the save", repeated))
    if not exact and prefix and actual and actual[0] in prefix:
        q = prefix.index(actual[0])
        if actual[:len(prefix) - q] != prefix[q:]:
            problems.append(("resumes in another order than it stopped", actual[:_EXAMPLES]))
    return problems


def _combined_problems(run, key, members, chosen):
    """Over the ranks: what was read before the save and after the restore
    covers the epoch as the uninterrupted epoch would (DistributedSampler-like
    samplers, every rank resumed)."""
    sampler = members[0][0].sampler
    n = sampler.get("dataset_size")
    ranks = run.ranks(key)
    if sampler.get("partition") != "distributed" or n is None or len(members) != len(ranks):
        return []
    pads, drops = _expected_extra(sampler)
    if pads is None:
        return []
    combined = collections.Counter()
    for (it, origin, _, _, _), position in zip(members, chosen):
        combined.update(origin.samples()[:position] + it.samples())
    problems = []
    missing = [i for i in range(n) if i not in combined]
    if len(missing) > drops + _batch_drops(run.loaders.get(key, {}), sampler, ranks):
        problems.append((f"the ranks skip {len(missing)} sample(s) of the epoch: read neither before the save nor "
                         f"after the restore", missing))
    extra = sum(combined.values()) - len(combined)
    if all(m[4] for m in members) and extra > pads:
        problems.append((f"the ranks read {extra - pads} sample(s) twice across the save and the restore",
                         [i for i, c in combined.items() if c > 1]))
    return problems


def resume_findings(runs, resumes):
    findings = []
    groups = collections.defaultdict(list)
    for ri, it, origin, position, last, exact in resumes:
        groups[(ri, it.key, it.epoch)].append((it, origin, position, last, exact))
    for (ri, key, epoch), members in sorted(groups.items()):
        run = runs[ri]
        # Per rank, the resume point that agrees with what followed: the samples taken at the save, or
        # one batch fewer (saved before training on the batch just taken).
        chosen, per_rank = [], []
        for it, origin, position, last, exact in members:
            options = [position] + ([position - last] if last else [])
            best = None
            for p in options:
                found = _rank_problems(origin, p, it.samples(), exact)
                if best is None or not found:
                    best = (p, found)
                if not found:
                    break
            chosen.append(best[0])
            per_rank += [(it.rank, f"rank {it.rank} {text}", ex) for text, ex in best[1]]
        combined = _combined_problems(run, key, members, chosen)
        if combined and not per_rank:
            alternative = [m[2] - m[3] if m[3] else m[2] for m in members]
            if not _combined_problems(run, key, members, alternative):
                combined = []
        problems = per_rank + [(None, text, ex) for text, ex in combined]
        if not problems:
            continue
        origin = members[0][1]
        examples, texts = [], []
        for _, text, ex in problems:
            examples += [e for e in ex if e not in examples]
            if text not in texts:
                texts.append(text)
        findings.append(_finding(
            "resume_mismatch", run, key, [p[0] for p in problems if p[0] is not None] or run.ranks(key), [epoch],
            examples[:_EXAMPLES],
            f"epoch {epoch} resumes epoch {origin.epoch} of {loader_label(run, origin.key)} at sample "
            f"{', '.join(map(str, sorted({m[2] for m in members})))} (the samples the loop had taken when the state "
            f"was saved) and " + "; ".join(texts),
            "save the position the training loop has consumed (batches taken x batch size), not what the sampler "
            "has yielded: workers prefetch prefetch_factor x num_workers batches ahead; restore the sampler's "
            "epoch with it (set_epoch), then skip exactly that many of the epoch's indices"))
    return findings


# -------------------------------------------------------------------- reruns


def _cross_run_resumes(runs, resumes):
    """Runs that restored a state an earlier run saved: not reruns of it."""
    out = set()
    for ri, it, origin, _, _, _ in resumes:
        if origin.run != it.run:
            out.add(ri)
    return out


def rerun_findings(runs, excluded):
    findings = []
    if len(runs) < 2:
        return findings
    base = runs[0]
    for ri in range(1, len(runs)):
        if ri in excluded:
            continue
        other = runs[ri]
        for key in base.loader_order:
            diff = _first_difference(base, other, key)
            if diff is None:
                continue
            epoch, rank, batch, what, examples, gens = diff
            gen_text = ""
            if gens:
                gen_text = f"; the generators it draws from that start this epoch from another state in run " \
                           f"{ri + 1}: {', '.join(sorted(gens))}"
            findings.append(_finding(
                "rerun_differs", base, key, [rank], [epoch], examples,
                f"run {ri + 1} differs from run 1 first at epoch {epoch}, rank {rank}, batch {batch}: {what}"
                + gen_text,
                "seed every generator the loader draws from, the same way in every run: torch.manual_seed, "
                "random.seed and numpy.random.seed, or MONAI's set_determinism(seed) before the transforms are "
                "composed (a Compose made after it seeds its transforms from it; others need "
                "transforms.set_random_state(seed))",
                rerun=ri + 1, batch=batch))
    return findings


def _first_difference(base, other, key):
    if key not in other.loaders:
        return (0, 0, 0, f"run {other.number} never iterates this loader", [], set())
    for epoch in base.epochs(key):
        a, b = base.at(key, epoch), other.at(key, epoch)
        for rank in sorted(set(a) | set(b)):
            if rank not in b:
                return (epoch, rank, 0, f"run {other.number} has no epoch {epoch} on rank {rank}", [], set())
            if rank not in a:
                continue
            ia, ib = a[rank], b[rank]
            ba, bb = ia.batch_list(), ib.batch_list()
            fa, fb = ia.fingerprints(), ib.fingerprints()
            for k in range(max(len(ba), len(bb))):
                if k >= len(ba) or k >= len(bb):
                    return (epoch, rank, k, f"{len(ba)} batches in run 1, {len(bb)} in run {other.number}", [],
                            set())
                if ba[k][0] != bb[k][0]:
                    return (epoch, rank, k, f"other indices ({ba[k][0][:_EXAMPLES]} in run 1, "
                                            f"{bb[k][0][:_EXAMPLES]} in run {other.number})",
                            [i for i in bb[k][0] if i not in ba[k][0]][:_EXAMPLES] or bb[k][0][:_EXAMPLES], set())
                if fa[k] is not None and fb[k] is not None and fa[k] != fb[k]:
                    changed = [i for i, x, y in zip(ba[k][0], fa[k], fb[k]) if x != y]
                    gens = _changed_generators(ia, ib)
                    return (epoch, rank, k, f"the same indices, but {len(changed)} of the {len(ba[k][0])} samples "
                                            f"differ", changed[:_EXAMPLES], gens)
    return None


def _changed_generators(ia, ib):
    ca, cb = ia.contexts(), ib.contexts()
    names = set()
    for w in set(ca) & set(cb):
        sa, da, _ = ca[w]
        sb, db, _ = cb[w]
        for g in da | db:
            if g in sa and g in sb and sa[g] != sb[g]:
                names.add(g)
    return names


def analyze(runs, scored_override=None):
    """Findings over the runs (the first is the reference; the others reruns)."""
    resumes = find_resumes(runs)
    resumed = {(r[1].run, r[1].key, r[1].rank, r[1].epoch) for r in resumes}
    base = runs[0]
    findings = shard_findings(base, resumed, scored_override) + rng_findings(base)
    findings += resume_findings(runs, [r for r in resumes if r[0] == 0 or r[2].run != r[1].run])
    findings += rerun_findings(runs, _cross_run_resumes(runs, resumes))
    findings = merge(findings)
    order = list(KINDS)
    findings.sort(key=lambda f: (f["level"] != "error", order.index(f["kind"]), f["loader"]))
    return findings, resumes


def merge(findings):
    """One finding per kind, level and loader: the first epoch's, its ranks,
    epochs and examples joined with the others'."""
    merged = collections.OrderedDict()
    for f in findings:
        k = (f["kind"], f["level"], f["loader_key"], f.get("rerun"))
        if k not in merged:
            merged[k] = dict(f, also=[])
            continue
        m = merged[k]
        new_epochs = [e for e in f["epochs"] if e not in m["epochs"]]
        m["ranks"] = sorted(set(m["ranks"]) | set(f["ranks"]))
        m["epochs"] = sorted(set(m["epochs"]) | set(f["epochs"]))
        m["examples"] = (m["examples"] + [e for e in f["examples"] if e not in m["examples"]])[:_EXAMPLES]
        m["also"] += new_epochs
    out = []
    for m in merged.values():
        also = m.pop("also")
        if also:
            m["message"] += f" (likewise in epoch{'s' if len(also) > 1 else ''} {', '.join(map(str, also))})"
        out.append(m)
    return out
