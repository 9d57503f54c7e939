"""Data-parallel training of the digits autoencoder (see train_digits.py), with
torch_convtranspose.ConvTranspose2d in its decoder, on two processes of one machine:
torch.distributed's gloo backend, DistributedDataParallel and a DistributedSampler.

    python examples/ddp.py --steps 100
"""

import argparse
import datetime
import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from train_digits import Autoencoder, digits_dataset

import torch_convtranspose

WORLD_SIZE = 2


def make_loader(data, rank, batch_size, seed):
    """This rank's share of each epoch's shuffled batches (call sampler.set_epoch first)."""
    sampler = DistributedSampler(data, num_replicas=WORLD_SIZE, rank=rank, shuffle=True,
                                 seed=seed, drop_last=True)
    return DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True), sampler


def worker(rank, port, args, result_path):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=60))  # fail, don't hang
    torch.manual_seed(args.seed)  # DDP also broadcasts rank 0's weights at the start
    model = DistributedDataParallel(torch_convtranspose.convert(Autoencoder()))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loader, sampler = make_loader(digits_dataset(), rank, args.batch_size, args.seed)

    losses, step, epoch = [], 0, 0
    while step < args.steps:
        sampler.set_epoch(epoch)
        for (x,) in loader:
            loss = nn.functional.mse_loss(model(x), x)
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            mean_loss = loss.detach().clone()  # the loss over both ranks' batches, for the log
            dist.all_reduce(mean_loss)
            losses.append(mean_loss.item() / WORLD_SIZE)
            step += 1
            if rank == 0 and (step % args.log_every == 0 or step == args.steps):
                print(f"step {step:4d}  epoch {epoch}  loss {losses[-1]:.6f}", flush=True)
            if step == args.steps:
                break
        epoch += 1

    params = nn.utils.parameters_to_vector(model.parameters()).detach()
    gathered = [torch.empty_like(params) for _ in range(WORLD_SIZE)]
    dist.all_gather(gathered, params)
    identical = all(torch.equal(p, gathered[0]) for p in gathered)
    if rank == 0:
        print(f"parameters identical on all {WORLD_SIZE} ranks: {identical}", flush=True)
        state = {k: v.clone() for k, v in model.module.state_dict().items()}
        torch.save({"losses": losses, "identical": identical, "state_dict": state}, result_path)
    dist.barrier()  # tear down together: destroying gloo while a peer is busy can abort
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-every", type=int, default=20)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "result.pt")
        mp.start_processes(worker, args=(free_port(), args, result_path), nprocs=WORLD_SIZE,
                           start_method="spawn")
        return torch.load(result_path)


if __name__ == "__main__":
    main()
