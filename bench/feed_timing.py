"""What the feed benchmarks' child processes share (bench/spleen_monai.py, bench/hippocampus_pipeline.py):
CPU and peak memory of a process and its worker processes, epochs of a loader timed the same way for
both sides, and volshard.Loader set up as both run it. Each child imports this file from bench/
(its first line puts bench/ on sys.path)."""
import resource
import time


def cpu():
    """CPU seconds of this process and its waited-for worker processes, user and system."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def peak_mb():
    """VmHWM of this process plus its largest worker process, MiB."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (s.ru_maxrss + c.ru_maxrss) / 1024


def timed_epochs(loader, epochs, set_epoch=None):
    """Every batch of `epochs` epochs drawn and dropped: {"wall", "cpu"} seconds. set_epoch(e), where
    given, runs before epoch e (volshard's Loader; torch's DataLoader reshuffles by itself)."""
    t0, c0 = time.perf_counter(), cpu()
    for e in range(epochs):
        if set_epoch is not None:
            set_epoch(e)
        for _ in loader:
            pass
    return {"wall": time.perf_counter() - t0, "cpu": cpu() - c0}


def volshard_epochs(items, pipeline, cached, epochs):
    """volshard.Loader(pipeline=...) on one rank, batch 2, 2 worker threads and 2 cache threads, cached
    (cache_rate 1) or from the files: {"setup", "wall", "cpu"} seconds. Call
    volshard.tune_allocator_for_volumes() first, as python/README.md's recipe does."""
    import volshard
    sampler = volshard.DistributedSampler(len(items), num_replicas=1, rank=0, seed=0)
    t0 = time.perf_counter()
    loader = volshard.Loader(items, sampler, pipeline=pipeline, batch_size=2, workers=2, cache_threads=2,
                             cache_rate=1.0 if cached else 0.0)
    out = {"setup": time.perf_counter() - t0}
    out.update(timed_epochs(loader, epochs, loader.set_epoch))
    loader.close()
    return out
