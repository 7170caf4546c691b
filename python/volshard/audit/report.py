"""The audit's outputs: the JSON document (what was recorded, per loader, rank
and epoch, and the findings), the readable report beside it, and the
picture's sections."""

import collections

from . import analyze as an

# What no run of the launcher can see; the report prints it, the docs say it.
UNSEEN = [
    ("other loaders", "loaders that are not a torch.utils.data.DataLoader or a volshard.Loader (a hand-written "
                      "batch loop, DALI, a webdataset pipeline read without a DataLoader)"),
    ("an IterableDataset's indices", "the indices of an IterableDataset: it has none (its samples' fingerprints "
                                     "and random states are recorded)"),
    ("hidden generators", "generators a dataset reaches through a closure, a module global or more than 8 "
                          "attributes deep, and randomness drawn outside the loader (in the training step, on "
                          "the GPU)"),
    ("the training step", "what the loop does with a batch: a batch it skips (if step < start: continue) still "
                          "counts as read"),
    ("other machines", "ranks on other machines, and a script's behaviour with the GPUs it would have had"),
    ("resumes from elsewhere", "a resume from a checkpoint that none of the audit's runs saved"),
]


def _loader_doc(run, key, resumed, scored_override):
    desc = run.loaders[key]
    is_scored, why = an.scored(run, key, scored_override)
    epochs = []
    for e in run.epochs(key):
        its = run.at(key, e)
        owners = collections.defaultdict(set)
        for r, it in its.items():
            for i in it.samples():
                owners[i].add(r)
        ranks = []
        for r in sorted(its):
            it = its[r]
            batches, fps = it.batch_list(), it.fingerprints()
            uniq = set(it.samples())
            ranks.append({
                "rank": r, "samples": len(it.samples()), "unique": len(uniq),
                "overlaps": sum(1 for i in uniq if len(owners[i]) > 1), "complete": it.complete,
                "resumed": (it.run, key, r, e) in resumed, "sampler_epoch": it.sampler.get("epoch"),
                "grad": (all(it.grads.values()) if it.grads else None),
                "start_states": it.states,
                "batches": [{"indices": b[0], "worker": b[1], "fingerprints": fps[k]} for k, b in enumerate(batches)],
                "workers": {str(w): {"start_states": start, "drawn": sorted(drawn)}
                            for w, (start, drawn, _) in sorted(it.contexts().items())},
            })
        epochs.append({"epoch": e, "ranks": ranks})
    return {"key": key, "site": an.short_site(desc.get("site")), "name": an.loader_label(run, key).split(" (")[0],
            "class": desc.get("class"), "dataset": desc.get("dataset"), "dataset_size": desc.get("dataset_size"),
            "iterable": desc.get("iterable"), "sampler": desc.get("sampler"), "batch_size": desc.get("batch_size"),
            "drop_last": desc.get("drop_last"), "num_workers": desc.get("num_workers"),
            "persistent_workers": desc.get("persistent_workers"), "scored": is_scored, "scored_because": why,
            "epochs": epochs}


def substitutions(runs):
    """[{what, detail, where, ranks}] over the first run's ranks: one per call and script line (the detail
    is the lowest rank's)."""
    out = collections.OrderedDict()
    for rank, s in sorted(runs[0].substitutions, key=lambda rs: rs[0]):
        k = (s["what"], s.get("where"))
        if k not in out:
            out[k] = {"what": s["what"], "detail": s.get("detail"),
                      "where": an.short_site(s["where"]) if s.get("where") else None, "ranks": []}
        out[k]["ranks"].append(rank)
    return list(out.values())


def document(meta, runs, findings, resumes, scored_override=None):
    base = runs[0]
    resumed = {(r[1].run, r[1].key, r[1].rank, r[1].epoch) for r in resumes}
    errors = sum(1 for f in findings if f["level"] == "error")
    doc = {"version": 1}
    doc.update(meta)
    doc.update({
        "substitutions": substitutions(runs),
        "loaders": [_loader_doc(base, key, resumed, scored_override) for key in base.loader_order],
        "resumes": [{"run": it.run, "loader": an.short_site(base.loaders.get(it.key, {}).get("site", it.key)),
                     "rank": it.rank, "epoch": it.epoch, "from_run": origin.run, "from_epoch": origin.epoch,
                     "position": position, "saved_state_matched": exact}
                    for _, it, origin, position, _, exact in resumes],
        "findings": findings,
        "errors": errors,
        "notes": len(findings) - errors,
        "exit_status": 1 if errors else 0,
        "unseen": [long for _, long in UNSEEN],
    })
    return doc


def summary(doc):
    """The findings' line: "findings: 1 error, 0 notes" (and that the plan holds, when there is none)."""
    e, n = doc["errors"], doc["notes"]
    return f"findings: {e} error{'s' if e != 1 else ''}, {n} note{'s' if n != 1 else ''}" + \
        ("" if doc["findings"] else " - the data plan holds")


def _cell(rank_doc):
    text = f"{rank_doc['samples']}/{rank_doc['unique']}/{rank_doc['overlaps']}"
    if rank_doc["resumed"]:
        text += " resumed"
    elif not rank_doc["complete"]:
        text += " partial"
    return text


def _sampler_line(loader):
    s = loader.get("sampler") or {}
    cls = (s.get("class") or "?").rsplit(".", 1)[-1]
    bits = [f"{k}={s[k]}" for k in ("shuffle", "seed", "drop_last", "mode") if k in s]
    return f"{cls}({', '.join(bits)})"


_STRIP_MAX = 96
_RANK_MARKS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _strip(loader, size):
    """The picture in text, for up to 96 samples: per epoch, who read each index."""
    if size is None or not 1 <= size <= _STRIP_MAX or loader.get("iterable"):
        return []
    out = ["  who read each index (one column per index from 0; the rank, * two reads or more, . none):"]
    for e in loader["epochs"]:
        owners = [[] for _ in range(size)]
        for r in e["ranks"]:
            for b in r["batches"]:
                for i in b["indices"]:
                    if isinstance(i, int) and 0 <= i < size:
                        owners[i].append(r["rank"])
        marks = "".join("." if not o else "*" if len(o) > 1 else
                        (_RANK_MARKS[o[0]] if o[0] < len(_RANK_MARKS) else "+") for o in owners)
        out.append(f"  epoch {e['epoch']}".ljust(10) + marks)
    return out


def text(doc):
    lines = []
    args = " ".join(doc.get("args", []))
    lines.append(f"volshard audit: {doc.get('script')}{' ' + args if args else ''}")
    lines.append(f"  {doc.get('world_size')} ranks, up to {doc.get('epochs')} epochs of each loader, "
                 f"{doc.get('runs')} run(s) compared" + (f"; {doc['note']}" if doc.get("note") else ""))
    for s in doc.get("substitutions", []):
        lines.append(f"  substituted: {s['detail'] or s['what']} (first at {s['where']}, ranks "
                     f"{','.join(map(str, s['ranks']))})")
    if doc.get("cuda_hidden"):
        lines.append("  CUDA hidden from the ranks (the audit runs on the CPU; --gpus keeps the GPUs)")
    for loader in doc["loaders"]:
        lines.append("")
        workers = loader.get("num_workers") or 0
        size = loader.get("dataset_size")
        lines.append(f"{loader['name']} ({loader['site']}): {(loader.get('class') or '').rsplit('.', 1)[-1]} over "
                     f"{(loader.get('dataset') or '').rsplit('.', 1)[-1]}"
                     + (f" of {size}" if size is not None else "") + f", {_sampler_line(loader)}, "
                     f"batch {loader.get('batch_size')}, {workers} worker{'s' if workers != 1 else ''}"
                     + (", persistent" if loader.get("persistent_workers") else "")
                     + (f"; scored ({loader['scored_because']})" if loader.get("scored") else ""))
        epochs = [e["epoch"] for e in loader["epochs"]]
        ranks = sorted({r["rank"] for e in loader["epochs"] for r in e["ranks"]})
        cells = {(r["rank"], e["epoch"]): _cell(r) for e in loader["epochs"] for r in e["ranks"]}
        width = max([len(c) for c in cells.values()] + [9])
        lines.append(("  " + " " * 8 + "".join(f"epoch {e}".ljust(width + 2) for e in epochs)).rstrip())
        for r in ranks:
            lines.append(("  " + f"rank {r}".ljust(8) + "".join(cells.get((r, e), "-").ljust(width + 2)
                                                              for e in epochs)).rstrip())
        lines.append("  (samples/unique/overlaps: reads, distinct indices, indices another rank also read)")
        if not any(r["complete"] for e in loader["epochs"] for r in e["ranks"]):
            lines.append("  no epoch of this loader ended: its shards and order were not judged (a larger --epochs, "
                         "or a script that reads a whole epoch)")
        lines += _strip(loader, size)
    lines.append("")
    findings = doc["findings"]
    lines.append(summary(doc))
    for f in findings:
        head = f"{f['level'].upper():5} {f['kind']}  {f['loader_name']} ({f['loader']})  ranks " \
               f"{','.join(map(str, f['ranks']))}  epochs {','.join(map(str, f['epochs']))}"
        if f["examples"]:
            head += f"  e.g. {', '.join(map(str, f['examples']))}"
        lines.append(head)
        lines.append(f"      {f['message']}")
        lines.append(f"      fix: {f['fix']}")
    if doc.get("show_unseen", True):
        lines.append("")
        lines.append("not seen by the audit: " + ", ".join(short for short, _ in UNSEEN) + " (docs/audit.md)")
    return "\n".join(lines) + "\n"


def picture_sections(runs, resumes):
    base = runs[0]
    by_iter = {(it.run, it.key, it.rank, it.epoch): (origin, position)
               for _, it, origin, position, _, _ in resumes if it.run == base.number}
    sections = []
    for key in base.loader_order:
        desc = base.loaders[key]
        if desc.get("iterable"):
            continue
        size = (desc.get("sampler") or {}).get("dataset_size", desc.get("dataset_size"))
        rows = []
        for e in base.epochs(key):
            its = base.at(key, e)
            shards = {r: it.samples() for r, it in its.items()}
            before = []
            resumed = False
            for r, it in its.items():
                hit = by_iter.get((it.run, key, r, e))
                if hit:
                    resumed = True
                    origin, position = hit
                    before += origin.samples()[:position]
            label = f"epoch {e}" + (" r" if resumed else "")
            rows.append({"label": label, "shards": shards, "before": before})
        sections.append({"title": an.loader_label(base, key), "size": size, "rows": rows})
    return sections
