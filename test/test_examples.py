"""The examples in examples/ run, shortened, and compute what they claim: train_digits' losses
with this library's ConvTranspose2d match torch's, and ddp.py's two ranks end with identical
parameters equal to a single-process run on both ranks' batches together."""

import importlib
import math
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import problems as P
import pytest
import sklearn  # noqa: F401  (in requirements-dev.txt: missing fails here, never skips)
import torch

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def examples(tct):
    """Import examples/<name>.py (with the package under test) as a module; one thread."""
    threads = torch.get_num_threads()
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(EXAMPLES))
        torch.set_num_threads(threads)


def test_train_digits_ours_matches_torch(examples):
    losses = examples("train_digits").main(["--epochs", "3", "--threads", "1"])
    ref, ours = losses["torch"], losses["torch_convtranspose"]
    assert len(ref) == len(ours) == 3
    assert ours == pytest.approx(ref, rel=1e-4)
    assert all(b < a for a, b in zip(ours, ours[1:])), ours
    assert ours[-1] < 0.5 * ours[0]


def test_train_digits_runs_our_layers(examples, tct, capsys):
    """The example's second model really runs this library's layers (else the loss
    comparison above would compare torch with itself)."""
    examples("train_digits").main(["--epochs", "1", "--threads", "1"])
    printed = capsys.readouterr().out
    assert printed.count("impl=torch_convtranspose") == 2


_DDP_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    sys.path.insert(0, sys.argv[1])
    import ddp
    torch.save(ddp.main(sys.argv[3:]), sys.argv[2])
""")


def _run_ddp(argv, out, timeout=120):
    """ddp.main(argv) in a fresh process group, killed (with its ranks) if it overruns."""
    proc = subprocess.Popen([sys.executable, "-c", _DDP_SCRIPT, str(EXAMPLES), str(out), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=P.subprocess_env(), start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"ddp.py did not finish in {timeout} s:\n{log[-3000:]}")
    assert proc.returncode == 0, log[-3000:]
    return log, torch.load(out)


def test_ddp_matches_one_process_on_both_batches(examples, tmp_path):
    steps, batch, lr, seed = 40, 32, 0.5, 0
    argv = ["--steps", str(steps), "--batch-size", str(batch), "--lr", str(lr),
            "--seed", str(seed), "--log-every", "10"]
    log, result = _run_ddp(argv, tmp_path / "result.pt")
    assert "parameters identical on all 2 ranks: True" in log, log
    assert result["identical"]
    losses = result["losses"]
    assert len(losses) == steps and all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses

    # DDP averages the gradients of the ranks' mean losses over equal batches: one process
    # on both ranks' batches together (torch's own modules, one thread) takes the same steps.
    td, ddp = examples("train_digits"), examples("ddp")
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    model = td.Autoencoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    data = td.digits_dataset()
    loaders = [ddp.make_loader(data, rank, batch, seed) for rank in range(ddp.WORLD_SIZE)]
    ref_losses, epoch = [], 0
    while len(ref_losses) < steps:
        for _, sampler in loaders:
            sampler.set_epoch(epoch)
        for batches in zip(*(loader for loader, _ in loaders)):
            x = torch.cat([b for (b,) in batches])
            loss = torch.nn.functional.mse_loss(model(x), x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ref_losses.append(loss.item())
            if len(ref_losses) == steps:
                break
        epoch += 1
    assert epoch > 1  # the run crossed an epoch boundary (set_epoch reshuffled)
    assert losses == pytest.approx(ref_losses, rel=1e-4)
    for name, ref in model.state_dict().items():
        torch.testing.assert_close(result["state_dict"][name], ref, rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")
