"""A run that saves its sampler's state mid-epoch, stops as a crash would, and
resumes from that state with a fresh sampler and loader, then trains on.

The sampler is the usual resumable DistributedSampler: state_dict() holds the
epoch and where to start; load_state_dict() makes its next pass skip that many
of the epoch's indices. --wrong saves the count of indices it has yielded; with
2 workers prefetching 2 batches each, that is 4 batches more than the loop has
taken, so the resumed epoch skips 16 samples per rank (resume_mismatch). Right:
the loop tells the sampler what it has consumed."""
import argparse

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

BATCH = 4


class ResumableSampler(DistributedSampler):
    def __init__(self, dataset, **kwargs):
        super().__init__(dataset, **kwargs)
        self.start = 0
        self.yielded = 0

    def __iter__(self):
        indices = list(super().__iter__())[self.start:]
        self.yielded, self.start = self.start, 0
        for i in indices:
            self.yielded += 1
            yield i

    def state_dict(self, consumed=None):
        return {"epoch": self.epoch, "start": self.yielded if consumed is None else consumed}

    def load_state_dict(self, state):
        self.set_epoch(state["epoch"])
        self.start = state["start"]


def make_loader(dataset):
    sampler = ResumableSampler(dataset, shuffle=True, seed=0)
    return sampler, DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--wrong", action="store_true")
    args = p.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    dataset = TensorDataset(torch.arange(64, dtype=torch.float32).unsqueeze(1))
    sampler, train_loader = make_loader(dataset)
    sampler.set_epoch(0)
    for step, (x,) in enumerate(train_loader):
        x.sum()  # the training step
        if step == 2:  # a checkpoint after 3 steps, then the crash
            state = sampler.state_dict() if args.wrong else sampler.state_dict(consumed=(step + 1) * BATCH)
            break
    del train_loader
    sampler, train_loader = make_loader(dataset)  # the restarted job
    sampler.load_state_dict(state)
    for epoch in range(state["epoch"], 3):
        if epoch != state["epoch"]:
            sampler.set_epoch(epoch)
        for (x,) in train_loader:
            x.sum()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
