"""Train a small convolutional autoencoder on scikit-learn's bundled 8x8 digits, twice from the
same initial weights: once with torch.nn.ConvTranspose2d in the decoder and once with
torch_convtranspose.ConvTranspose2d, and print both losses per epoch side by side.

    python examples/train_digits.py --epochs 5 --threads 2
"""

import argparse
import copy

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torch_convtranspose


def digits_dataset() -> TensorDataset:
    """The 1797 digit images as one (N, 1, 8, 8) float tensor in [0, 1] (no download)."""
    images = torch.tensor(load_digits().images / 16.0, dtype=torch.float32)
    return TensorDataset(images.unsqueeze(1))


class Autoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.ReLU(),  # 16 x 4 x 4
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),  # 32 x 2 x 2
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 3, stride=2, padding=1, output_padding=1), nn.Sigmoid(),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def train(model, data, epochs, batch_size, lr, seed):
    """Adam on the reconstruction MSE; returns the mean training loss of each epoch."""
    shuffle = torch.Generator().manual_seed(seed)  # the same batches for every model
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, generator=shuffle)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(epochs):
        total = 0.0
        for (x,) in loader:
            loss = nn.functional.mse_loss(model(x), x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
        losses.append(total / len(data))
    return losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    torch.manual_seed(args.seed)
    data = digits_dataset()
    reference = Autoencoder()
    ours = torch_convtranspose.convert(copy.deepcopy(reference))  # same weights, our kernels
    print(ours)
    hyper = dict(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed)
    losses = {
        "torch": train(reference, data, **hyper),
        "torch_convtranspose": train(ours, data, **hyper),
    }

    print(f"{'epoch':>5}  {'torch.nn':>12}  {'torch_convtranspose':>19}  {'rel. diff':>9}")
    for epoch, (a, b) in enumerate(zip(*losses.values()), 1):
        print(f"{epoch:>5}  {a:>12.6f}  {b:>19.6f}  {abs(a - b) / a:>9.1e}")
    diff = max(abs(a - b) for a, b in zip(*losses.values()))
    print(f"max |difference| of the epoch losses: {diff:.2e}")
    return losses


if __name__ == "__main__":
    main()
