#!/usr/bin/python3
"""PyTorch speed/accuracy baseline: the book's from-scratch LeNet on Fashion-MNIST.

This is the reference trainer that ParaLab's C++ strategies are compared
against.  It reproduces, as literally as possible, the single-device training
code of "Dive into Deep Learning", chapter "Multiple GPUs" (the
"implementation from scratch" section):

  * parameters W1 (20,1,3,3), b1 (20), W2 (50,20,5,5), b2 (50), W3 (800,128),
    b3 (128), W4 (128,10), b4 (10); weights torch.randn(...) * 0.01 drawn in
    that order after torch.manual_seed(seed), biases zero;
  * model conv2d -> relu -> avg_pool2d(2,2) -> conv2d -> relu -> avg_pool2d(2,2)
    -> flatten -> X@W3+b3 -> relu -> @W4+b4, written with torch.nn.functional;
  * loss nn.CrossEntropyLoss(reduction='none'), l.sum().backward();
  * the book's sgd: p -= lr * p.grad / batch_size; p.grad.zero_(), where
    batch_size is the size of the actual minibatch (the book passes
    X.shape[0]), so the last, partial minibatch is averaged correctly.

Data: the Fashion-MNIST IDX .gz files are read directly with gzip + numpy (no
torchvision, no DataLoader) from the first directory that holds all four of
them among --data-dir, $FASHION_MNIST_DIR, ./data/fashion-mnist and
/usr/share/datasets/fashion-mnist.  Pixels are scaled by 1/255 to float32,
shape (N,1,28,28); the whole set is kept in memory (on the chosen device) as
tensors.  Each epoch draws a fresh random permutation from a torch.Generator
seeded with --seed and takes minibatches by indexing; the last partial
minibatch is KEPT (like the book's DataLoader(shuffle=True), drop_last=False).

Timing: every training step (forward + backward + sgd; the minibatch gather by
indexing is done before the clock starts) is timed with time.perf_counter
(with torch.cuda.synchronize() on both sides on --device cuda).  The first
--warmup-iterations steps of the run (counted over the whole run, not per
epoch) are excluded.  Reported: median / p10 / p90 step time in ms and
training throughput = samples in timed steps / sum of their step times.
Per epoch: train loss (mean per example) and train accuracy accumulated from
the forward pass of each step (before its update, as the book's train loop
does), test loss and accuracy (evaluated in batches of 1024 under
torch.no_grad), "seconds" = wall time of the epoch's training loop (without
evaluation) and "eval_seconds".

Output: one JSON object on stdout, or written atomically to --json PATH.
Progress lines go to stderr unless --quiet.

Run it with Debian's python (which sees python3-torch):

    /usr/bin/python3 experiments/baselines/pytorch_lenet.py --threads 2
    /usr/bin/python3 experiments/baselines/pytorch_lenet.py --epochs 1 \\
        --max-iterations-per-epoch 40 --threads 1 --json /tmp/lenet.json
"""

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

PROG = "pytorch_lenet.py"

TRAIN_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DEFAULT_DIRS = ("./data/fashion-mnist", "/usr/share/datasets/fashion-mnist")


class UsageError(Exception):
    """A problem with the command line or the environment; exit status 2."""


class DataError(Exception):
    """Missing or malformed data; exit status 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return value


def nonnegative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a non-negative integer, got %r" % text)
    if value < 0:
        raise argparse.ArgumentTypeError("expected a non-negative integer, got %r" % text)
    return value


def positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive number, got %r" % text)
    if not (value > 0.0 and value < float("inf")):
        raise argparse.ArgumentTypeError("expected a positive number, got %r" % text)
    return value


def parse_args(argv):
    p = Parser(prog=PROG, description="The book's from-scratch LeNet trainer "
               "(D2L, Multiple GPUs) on Fashion-MNIST: speed/accuracy baseline.")
    p.add_argument("--epochs", type=positive_int, default=10)
    p.add_argument("--batch-size", type=positive_int, default=256)
    p.add_argument("--lr", type=positive_float, default=0.2)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch.set_num_threads(N), set_num_interop_threads(1); "
                   "default: leave PyTorch's defaults")
    p.add_argument("--max-iterations-per-epoch", type=positive_int, default=None,
                   help="stop each epoch after N minibatches (quick timing)")
    p.add_argument("--warmup-iterations", type=nonnegative_int, default=5,
                   help="first N training steps of the run, excluded from timing")
    p.add_argument("--train-limit", type=positive_int, default=None,
                   help="use only the first N training examples")
    p.add_argument("--test-limit", type=positive_int, default=None,
                   help="use only the first N test examples")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--json", metavar="PATH", default=None,
                   help="write the result here (atomically) instead of stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    args = p.parse_args(argv)
    if args.json is not None:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise UsageError("--json: directory %s does not exist" % parent)
    return args


# ----------------------------------------------------------------------------
# Data

def candidate_dirs(data_dir):
    dirs = []
    if data_dir is not None:
        dirs.append(data_dir)
    env = os.environ.get("FASHION_MNIST_DIR")
    if env:
        dirs.append(env)
    dirs.extend(DEFAULT_DIRS)
    return dirs


def find_data_dir(data_dir):
    dirs = candidate_dirs(data_dir)
    for d in dirs:
        if all(os.path.isfile(os.path.join(d, f)) for f in TRAIN_FILES + TEST_FILES):
            return d
    raise DataError("Fashion-MNIST files (%s) not found; looked in: %s"
                    % (", ".join(TRAIN_FILES + TEST_FILES), ", ".join(dirs)))


def read_idx(path, np, expected_magic, limit):
    """Read an IDX .gz file; returns a uint8 array of shape (N, ...)."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataError("cannot read %s: %s" % (path, e))
    ndim = expected_magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError("%s: truncated IDX header" % path)
    magic = int.from_bytes(raw[0:4], "big")
    if magic != expected_magic:
        raise DataError("%s: bad IDX magic 0x%08x (expected 0x%08x)"
                        % (path, magic, expected_magic))
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    count = 1
    for dim in dims:
        count *= dim
    if len(raw) != header + count:
        raise DataError("%s: size %d does not match IDX dims %s"
                        % (path, len(raw), dims))
    arr = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)
    if limit is not None:
        arr = arr[:limit]
    return arr


def load_split(directory, files, limit, torch, np, device):
    images_path, labels_path = (os.path.join(directory, f) for f in files)
    images = read_idx(images_path, np, 0x00000803, limit)
    labels = read_idx(labels_path, np, 0x00000801, limit)
    if images.shape[0] != labels.shape[0]:
        raise DataError("%s and %s disagree on the number of examples (%d vs %d)"
                        % (images_path, labels_path, images.shape[0], labels.shape[0]))
    if images.shape[1:] != (28, 28):
        raise DataError("%s: images are %s, expected 28x28"
                        % (images_path, "x".join(map(str, images.shape[1:]))))
    if labels.size and int(labels.max()) > 9:
        raise DataError("%s: label %d out of range 0..9" % (labels_path, int(labels.max())))
    x = torch.from_numpy(images.astype(np.float32) / np.float32(255.0))
    x = x.reshape(-1, 1, 28, 28).to(device)
    y = torch.from_numpy(labels.astype(np.int64)).to(device)
    return x, y


# ----------------------------------------------------------------------------
# The book's model, loss and optimizer

def init_params(torch, seed, device):
    torch.manual_seed(seed)
    scale = 0.01
    W1 = torch.randn(size=(20, 1, 3, 3)) * scale
    b1 = torch.zeros(20)
    W2 = torch.randn(size=(50, 20, 5, 5)) * scale
    b2 = torch.zeros(50)
    W3 = torch.randn(size=(800, 128)) * scale
    b3 = torch.zeros(128)
    W4 = torch.randn(size=(128, 10)) * scale
    b4 = torch.zeros(10)
    params = [W1, b1, W2, b2, W3, b3, W4, b4]
    return [p.to(device).requires_grad_() for p in params]


def lenet(F, X, params):
    h1_conv = F.conv2d(input=X, weight=params[0], bias=params[1])
    h1_activation = F.relu(h1_conv)
    h1 = F.avg_pool2d(input=h1_activation, kernel_size=(2, 2), stride=(2, 2))
    h2_conv = F.conv2d(input=h1, weight=params[2], bias=params[3])
    h2_activation = F.relu(h2_conv)
    h2 = F.avg_pool2d(input=h2_activation, kernel_size=(2, 2), stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3_linear = h2 @ params[4] + params[5]
    h3 = F.relu(h3_linear)
    y_hat = h3 @ params[6] + params[7]
    return y_hat


def sgd(torch, params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def evaluate(torch, F, loss_fn, params, x, y, batch=1024):
    """Returns (mean loss, accuracy) over (x, y), in batches under no_grad."""
    n = x.shape[0]
    if n == 0:
        return None, None
    loss_sum = 0.0
    correct = 0
    with torch.no_grad():
        for start in range(0, n, batch):
            X = x[start:start + batch]
            Y = y[start:start + batch]
            y_hat = lenet(F, X, params)
            loss_sum += float(loss_fn(y_hat, Y).sum())
            correct += int((y_hat.argmax(dim=1) == Y).sum())
    return loss_sum / n, correct / n


# ----------------------------------------------------------------------------

def percentile(sorted_values, q):
    """Linear-interpolation percentile (numpy's default) of a sorted list."""
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def log(args, message):
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def write_json_atomic(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + "-",
                               dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def run(args):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn

    if args.threads is not None:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError as e:  # only settable before parallel work starts
            log(args, "warning: set_num_interop_threads(1) failed: %s" % e)

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda requested but torch.cuda.is_available() is False")
    device = torch.device(args.device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    data_dir = find_data_dir(args.data_dir)
    t0 = time.perf_counter()
    train_x, train_y = load_split(data_dir, TRAIN_FILES, args.train_limit, torch, np, device)
    test_x, test_y = load_split(data_dir, TEST_FILES, args.test_limit, torch, np, device)
    n_train, n_test = train_x.shape[0], test_x.shape[0]
    if n_train == 0:
        raise DataError("no training examples in %s" % data_dir)
    log(args, "data: %s (%d train, %d test) loaded in %.2fs; torch %s, %d threads, %s"
        % (data_dir, n_train, n_test, time.perf_counter() - t0, torch.__version__,
           torch.get_num_threads(), device))

    params = init_params(torch, args.seed, device)
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    bs = args.batch_size
    batches_per_epoch = (n_train + bs - 1) // bs
    if args.max_iterations_per_epoch is not None:
        batches_per_epoch = min(batches_per_epoch, args.max_iterations_per_epoch)

    step_times = []   # seconds, timed steps only
    timed_samples = 0
    iteration = 0
    epochs = []
    for epoch in range(1, args.epochs + 1):
        sync()
        epoch_start = time.perf_counter()
        perm = torch.randperm(n_train, generator=shuffle_gen).to(device)
        loss_sum = 0.0
        correct = 0
        seen = 0
        for b in range(batches_per_epoch):
            idx = perm[b * bs:(b + 1) * bs]
            X = train_x[idx]
            Y = train_y[idx]
            n = X.shape[0]
            sync()
            start = time.perf_counter()
            y_hat = lenet(F, X, params)
            l = loss_fn(y_hat, Y)
            l.sum().backward()
            sgd(torch, params, args.lr, n)
            sync()
            elapsed = time.perf_counter() - start
            iteration += 1
            if iteration > args.warmup_iterations:
                step_times.append(elapsed)
                timed_samples += n
            # Book-style running metrics, from this step's (pre-update) forward.
            with torch.no_grad():
                loss_sum += float(l.sum())
                correct += int((y_hat.argmax(dim=1) == Y).sum())
            seen += n
        sync()
        train_seconds = time.perf_counter() - epoch_start
        eval_start = time.perf_counter()
        test_loss, test_acc = evaluate(torch, F, loss_fn, params, test_x, test_y)
        eval_seconds = time.perf_counter() - eval_start
        record = {
            "epoch": epoch,
            "train_loss": loss_sum / seen,
            "train_acc": correct / seen,
            "test_acc": test_acc,
            "test_loss": test_loss,
            "seconds": train_seconds,
            "eval_seconds": eval_seconds,
            "train_samples": seen,
        }
        epochs.append(record)
        log(args, "epoch %d: train loss %.4f acc %.4f | test loss %s acc %s | %.2fs (+%.2fs eval)"
            % (epoch, record["train_loss"], record["train_acc"],
               "n/a" if test_loss is None else "%.4f" % test_loss,
               "n/a" if test_acc is None else "%.4f" % test_acc,
               train_seconds, eval_seconds))

    ordered = sorted(step_times)
    total_time = sum(step_times)
    ms = lambda v: None if v is None else v * 1000.0
    timing = {
        "median_iteration_ms": ms(percentile(ordered, 0.5)),
        "p10_iteration_ms": ms(percentile(ordered, 0.1)),
        "p90_iteration_ms": ms(percentile(ordered, 0.9)),
        "samples_per_s": (timed_samples / total_time) if total_time > 0 else None,
        "timed_iterations": len(step_times),
    }
    if not step_times:
        log(args, "warning: no timed iterations (all %d steps were warm-up)" % iteration)
    else:
        log(args, "timing: %d steps, median %.3f ms (p10 %.3f, p90 %.3f), %.1f images/s"
            % (len(step_times), timing["median_iteration_ms"], timing["p10_iteration_ms"],
               timing["p90_iteration_ms"], timing["samples_per_s"]))

    return {
        "baseline": "pytorch-book-lenet",
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "config": {
            "epochs": args.epochs,
            "batch_size": bs,
            "lr": args.lr,
            "seed": args.seed,
            "threads_requested": args.threads,
            "interop_threads": torch.get_num_interop_threads(),
            "max_iterations_per_epoch": args.max_iterations_per_epoch,
            "warmup_iterations": args.warmup_iterations,
            "train_limit": args.train_limit,
            "test_limit": args.test_limit,
            "train_examples": n_train,
            "test_examples": n_test,
            "iterations_per_epoch": batches_per_epoch,
            "drop_last": False,
            "data_dir": os.path.abspath(data_dir),
        },
        "timing": timing,
        "epochs": epochs,
    }


def main(argv=None):
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        result = run(args)
        text = json.dumps(result, indent=2) + "\n"
        if args.json is not None:
            write_json_atomic(args.json, text)
            log(args, "wrote %s" % args.json)
        else:
            sys.stdout.write(text)
            sys.stdout.flush()
    except UsageError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 2
    except DataError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    except ImportError as e:
        print("%s: error: %s (run with /usr/bin/python3 and python3-torch, "
              "python3-numpy installed)" % (PROG, e), file=sys.stderr)
        return 1
    except OSError as e:
        print("%s: error: %s" % (PROG, e), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
