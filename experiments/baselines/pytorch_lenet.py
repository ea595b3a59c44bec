#!/usr/bin/python3
"""PyTorch speed/accuracy baselines for ParaLab: LeNet on Fashion-MNIST, three ways.

    --model book                      the book's from-scratch trainer, kept literal (default)
    --model module                    the same LeNet as an nn.Module, data and gather on the device
    --model module --cuda-graph       ... with the whole step captured once as a CUDA graph
                                      (--device cuda only)

All three train the same model from the same initial weights with the same update, so their
losses agree to rounding (experiments/baselines/test_baselines.py checks it); they differ in how
the step is driven, and in what is timed.

The book's trainer ("Dive into Deep Learning", chapter "Multiple GPUs", the "implementation from
scratch" section), reproduced as literally as possible:

  * parameters W1 (20,1,3,3), b1 (20), W2 (50,20,5,5), b2 (50), W3 (800,128),
    b3 (128), W4 (128,10), b4 (10); weights torch.randn(...) * 0.01 drawn in
    that order after torch.manual_seed(seed), biases zero;
  * model conv2d -> relu -> avg_pool2d(2,2) -> conv2d -> relu -> avg_pool2d(2,2)
    -> flatten -> X@W3+b3 -> relu -> @W4+b4, written with torch.nn.functional;
  * loss nn.CrossEntropyLoss(reduction='none'), l.sum().backward();
  * the book's sgd: p -= lr * p.grad / batch_size; p.grad.zero_(), where
    batch_size is the size of the actual minibatch (the book passes
    X.shape[0]), so the last, partial minibatch is averaged correctly.

The module trainer: the same layers as nn.Conv2d / nn.AvgPool2d / nn.Linear in an nn.Module,
given the book's initial tensors (drawn as above; nn.Linear stores its weight as (out, in), so it
holds W3.T and W4.T and computes the same X@W3+b3).  The step gathers its minibatch on the device
with index_select from the device-resident data and index vector, then runs forward, the summed
loss, backward and the same update p -= lr * grad / n (same expression, so the same rounding).
Loss and correct predictions are accumulated on the device and read back once per epoch.

With --cuda-graph that step is captured once as a CUDA graph (torch.cuda.graph): its input is a
static index vector of --batch-size entries (the gather is inside the graph, as in ParaLab's
captured step), its output the updated parameters and the device-side loss/accuracy sums.  Before
capture it runs 3 warm-up steps on a side stream, as torch's CUDA-graph documentation requires;
those steps are set-up, and the parameters are restored to their initial values afterwards, so
the training is the same as without the graph.  A minibatch of another size (the last, partial
one of an epoch: 96 of the 60,000 images at batch 256) cannot replay the graph and runs eagerly.

Every mode sets torch.backends.cuda.matmul.allow_tf32 = False and
torch.backends.cudnn.allow_tf32 = False (ParaLab computes in FP32; cuDNN's default would use TF32
on Ampere and later) and records both flags.

Data: the Fashion-MNIST IDX .gz files are read directly with gzip + numpy (no
torchvision, no DataLoader) from the first directory that holds all four of
them among --data-dir, $FASHION_MNIST_DIR, ./data/fashion-mnist and
/usr/share/datasets/fashion-mnist.  Pixels are scaled by 1/255 to float32,
shape (N,1,28,28); the whole set is kept in memory (on the chosen device) as
tensors.  Each epoch draws a fresh random permutation from a torch.Generator
seeded with --seed and takes minibatches by indexing; the last partial
minibatch is KEPT (like the book's DataLoader(shuffle=True), drop_last=False).

Timing.  The first --warmup-iterations training steps of the run (counted over
the whole run, not per epoch) are excluded in every mode.
  * book: every step (forward + backward + sgd; the gather by indexing is done
    before the clock starts) is timed with time.perf_counter, with
    torch.cuda.synchronize() on both sides on --device cuda; the book's loop
    also reads its loss back after every step.  samples_per_s = samples in
    timed steps / sum of their step times.
  * module (with or without --cuda-graph): the step includes the device
    gather; the device is not stopped between steps.  The timed steps of an
    epoch form one region, synchronised at its start and end;
    samples_per_s = samples in timed steps / sum of the regions' wall times
    (perf_counter).  Step times for the percentiles come from CUDA events
    recorded between consecutive steps on cuda (the device's time from one
    step boundary to the next), from perf_counter between consecutive steps
    on cpu.
Reported: median / p10 / p90 step time in ms, samples_per_s, and how they were
measured ("timing"."method").  Per epoch: train loss (mean per example) and
train accuracy accumulated from the forward pass of each step (before its
update, as the book's train loop does), test loss and accuracy (evaluated in
batches of 1024 under torch.no_grad), "seconds" = wall time of the epoch's
training loop (without evaluation) and "eval_seconds".

Output: one JSON object on stdout, or written atomically to --json PATH: which
mode ran ("baseline", "mode", "cuda_graph"), torch / CUDA / cuDNN versions, the
device's name, the TF32 flags, the resolved configuration, timing and epochs.
Progress lines go to stderr unless --quiet.  Exit status: 0 done, 1 missing
data or a configuration that cannot run (--cuda-graph on cpu or with
--model book), 2 a bad command line or no CUDA device for --device cuda.

Run it with Debian's python (which sees python3-torch), or on a GPU host with a
CUDA build of torch:

    /usr/bin/python3 experiments/baselines/pytorch_lenet.py --threads 2
    /usr/bin/python3 experiments/baselines/pytorch_lenet.py --epochs 1 \\
        --max-iterations-per-epoch 40 --threads 1 --json /tmp/lenet.json
    python3 experiments/baselines/pytorch_lenet.py --device cuda --model module --cuda-graph
"""

import argparse
import gzip
import json
import os
import sys
import tempfile
import time

PROG = "pytorch_lenet.py"

# Version of the JSON this writes.  1: the unversioned output of the book-only trainer; 2 adds
# schema_version, argv, mode, cuda_graph, torch_cuda_version, cudnn_version, cudnn_benchmark,
# tf32 and timing.method / timed_samples / timed_seconds.
SCHEMA_VERSION = 2

TRAIN_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
TEST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DEFAULT_DIRS = ("./data/fashion-mnist", "/usr/share/datasets/fashion-mnist")

# Steps run on a side stream before the capture (torch's documentation: "warm up" so that lazy
# initialisation, cuDNN's choices and the allocator's first allocations happen outside it).
CAPTURE_WARMUP_STEPS = 3


class UsageError(Exception):
    """A problem with the command line or the environment; exit status 2."""


class DataError(Exception):
    """Missing or malformed data; exit status 1."""


class ConfigError(Exception):
    """A combination of options that cannot run; exit status 1."""


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
    p = Parser(prog=PROG, description="LeNet on Fashion-MNIST in PyTorch, as the book writes it "
               "(D2L, Multiple GPUs) or as an nn.Module whose step may be one CUDA graph: "
               "speed/accuracy baselines for ParaLab.")
    p.add_argument("--model", choices=("book", "module"), default="book",
                   help="book: the book's functional from-scratch trainer (default); "
                   "module: the same LeNet as an nn.Module, gather on the device, no per-step "
                   "host synchronisation")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the module's whole step (gather, forward, backward, SGD) once "
                   "as a CUDA graph and replay it (needs --model module --device cuda)")
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
    if args.cuda_graph and args.device != "cuda":
        raise ConfigError("--cuda-graph needs --device cuda (CUDA graphs do not exist on %s)"
                          % args.device)
    if args.cuda_graph and args.model != "module":
        raise ConfigError("--cuda-graph graphs the nn.Module trainer: add --model module "
                          "(the book's trainer stays as the book writes it)")
    if args.json is not None:
        parent = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(parent):
            raise UsageError("--json: directory %s does not exist" % parent)
    args.argv = list(argv)
    return args


def baseline_name(args):
    if args.model == "book":
        return "pytorch-book-lenet"
    return "pytorch-module-lenet-cuda-graph" if args.cuda_graph else "pytorch-module-lenet"


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

def book_tensors(torch, seed):
    """The book's initial W1, b1, W2, b2, W3, b3, W4, b4 on the CPU, drawn in its order."""
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
    return [W1, b1, W2, b2, W3, b3, W4, b4]


def init_params(torch, seed, device):
    return [p.to(device).requires_grad_() for p in book_tensors(torch, seed)]


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


def evaluate(torch, forward, loss_fn, x, y, batch=1024):
    """Returns (mean loss, accuracy) of forward over (x, y), in batches under no_grad."""
    n = x.shape[0]
    if n == 0:
        return None, None
    loss_sum = 0.0
    correct = 0
    with torch.no_grad():
        for start in range(0, n, batch):
            X = x[start:start + batch]
            Y = y[start:start + batch]
            y_hat = forward(X)
            loss_sum += float(loss_fn(y_hat, Y).sum())
            correct += int((y_hat.argmax(dim=1) == Y).sum())
    return loss_sum / n, correct / n


# ----------------------------------------------------------------------------
# The same LeNet as an nn.Module, and its step (eager or one CUDA graph)

def make_lenet_module(torch, seed, device):
    """The book's LeNet as an nn.Module holding the book's initial tensors for this seed."""
    from torch import nn
    import torch.nn.functional as F

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 20, kernel_size=3)
            self.conv2 = nn.Conv2d(20, 50, kernel_size=5)
            self.pool = nn.AvgPool2d(kernel_size=2, stride=2)
            self.fc1 = nn.Linear(800, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):                       # x is (N,1,28,28)
            x = self.pool(F.relu(self.conv1(x)))    # (N,20,13,13)
            x = self.pool(F.relu(self.conv2(x)))    # (N,50,4,4)
            x = F.relu(self.fc1(x.flatten(1)))      # (N,128)
            return self.fc2(x)                      # (N,10) logits

    # Built first: nn's default initialisation draws from the global generator, and the book's
    # draws below must start from manual_seed(seed).
    model = LeNet()
    W1, b1, W2, b2, W3, b3, W4, b4 = book_tensors(torch, seed)
    with torch.no_grad():
        model.conv1.weight.copy_(W1)
        model.conv1.bias.copy_(b1)
        model.conv2.weight.copy_(W2)
        model.conv2.bias.copy_(b2)
        # nn.Linear keeps (out, in) and computes x @ weight.T + bias: weight = W3.T gives X@W3+b3.
        model.fc1.weight.copy_(W3.t())
        model.fc1.bias.copy_(b3)
        model.fc2.weight.copy_(W4.t())
        model.fc2.bias.copy_(b4)
    return model.to(device)


class ModuleStep:
    """One training step of the module LeNet on a minibatch named by an index vector.

    The data (train_x (N,1,28,28), train_y (N,)) stays on the device; a step gathers its
    minibatch there, runs forward, the summed cross-entropy, backward and the book's update
    p -= lr * grad / n, and adds the minibatch's loss sum and correct count to device-side
    accumulators (read back by take_epoch_metrics).  After capture(), steps of exactly
    batch_size examples replay one CUDA graph; other sizes run eagerly.
    """

    def __init__(self, torch, model, loss_fn, train_x, train_y, lr, batch_size):
        self.torch = torch
        self.model = model
        self.params = list(model.parameters())
        self.loss_fn = loss_fn
        self.train_x = train_x
        self.train_y = train_y
        self.lr = lr
        self.batch_size = batch_size
        device = train_x.device
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.int64, device=device)
        self.static_idx = None  # (batch_size,) int64: the graph's input
        self.graph = None
        self.replays = 0
        self.eager_steps = 0

    def _forward(self, idx):
        torch = self.torch
        x = torch.index_select(self.train_x, 0, idx)   # (n,1,28,28)
        y = torch.index_select(self.train_y, 0, idx)   # (n,)
        y_hat = self.model(x)                          # (n,10)
        return y_hat, y, self.loss_fn(y_hat, y).sum()

    def _update(self, grads, n, y_hat, y, loss):
        torch = self.torch
        with torch.no_grad():
            # The book's expression, so the same roundings: (lr * g) / n, then subtract; each
            # operation one multi-tensor kernel over every parameter (torch._foreach_*, as
            # torch.optim.SGD runs on CUDA), not one kernel per parameter: 3 kernels, not 24.
            steps = torch._foreach_mul(list(grads), self.lr)
            torch._foreach_div_(steps, n)
            torch._foreach_sub_(self.params, steps)
            self.loss_sum += loss.detach()
            self.correct += (y_hat.argmax(dim=1) == y).sum()

    def _graph_body(self):
        """The captured step, on static_idx.  Every .grad is None when it starts, so backward
        assigns the gradients instead of accumulating them: a replay needs no zeroing."""
        for p in self.params:
            p.grad = None
        y_hat, y, loss = self._forward(self.static_idx)
        loss.backward()
        self._update([p.grad for p in self.params], self.batch_size, y_hat, y, loss)

    def eager(self, idx):
        # autograd.grad leaves .grad alone: after capture it is the graph's own memory.
        y_hat, y, loss = self._forward(idx)
        grads = self.torch.autograd.grad(loss, self.params)
        self._update(grads, idx.shape[0], y_hat, y, loss)
        self.eager_steps += 1

    def capture(self):
        """Capture the step of batch_size examples as one CUDA graph (torch.cuda.graph).

        The warm-up steps train on the first batch_size examples; parameters and accumulators are
        put back afterwards, so the run trains exactly as without the graph.
        """
        torch = self.torch
        device = self.train_x.device
        self.static_idx = torch.arange(self.batch_size, dtype=torch.int64, device=device)
        saved = [p.detach().clone() for p in self.params]
        side = torch.cuda.Stream(device=device)
        # The side stream must see the initial parameters and static_idx written above.
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUP_STEPS):
                self._graph_body()
        # ... and the capture (and everything after) must see the warm-up's results.
        torch.cuda.current_stream(device).wait_stream(side)
        for p in self.params:
            p.grad = None  # freed before capture, as torch's docs do with zero_grad(set_to_none)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._graph_body()
        # Capturing records kernels without running them: the parameters are the warm-up's.
        with torch.no_grad():
            for p, s in zip(self.params, saved):
                p.copy_(s)
            self.loss_sum.zero_()
            self.correct.zero_()
        torch.cuda.synchronize(device)

    def step(self, idx):
        """idx is (n,) int64 on the device; queues the step without waiting for it."""
        if self.graph is not None and idx.shape[0] == self.batch_size:
            self.static_idx.copy_(idx)
            self.graph.replay()
            self.replays += 1
        else:
            self.eager(idx)

    def take_epoch_metrics(self):
        """(loss sum, correct count) since the last call: the epoch's one host read-back."""
        loss_sum, correct = float(self.loss_sum), int(self.correct)
        self.loss_sum.zero_()
        self.correct.zero_()
        return loss_sum, correct


class RegionClock:
    """Times a run of consecutive steps without stopping the device between them.

    begin() synchronises and starts the wall clock; mark() after each step records a boundary
    (a CUDA event on cuda, perf_counter on cpu, where every op has finished when it returns);
    end() synchronises and returns (per-step seconds, wall seconds of the region).
    """

    def __init__(self, torch, cuda):
        self.torch = torch
        self.cuda = cuda
        self.events = []  # reused from one region to the next
        self.count = 0
        self.steps = []
        self.start = None
        self.last = None

    def _event(self, k):
        if k == len(self.events):
            self.events.append(self.torch.cuda.Event(enable_timing=True))
        return self.events[k]

    def begin(self):
        if self.cuda:
            self.torch.cuda.synchronize()
        self.start = time.perf_counter()
        self.count = 0
        self.steps = []
        if self.cuda:
            self._event(0).record()
        self.last = self.start

    def mark(self):
        self.count += 1
        if self.cuda:
            self._event(self.count).record()
        else:
            now = time.perf_counter()
            self.steps.append(now - self.last)
            self.last = now

    def end(self):
        if self.cuda:
            self.torch.cuda.synchronize()  # also completes the events read below
        wall = time.perf_counter() - self.start
        if self.cuda:
            self.steps = [self.events[k].elapsed_time(self.events[k + 1]) / 1000.0
                          for k in range(self.count)]
        self.start = None
        return self.steps, wall


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


def train_book(torch, args, data, device, cuda, sync, on_epoch):
    """The book's loop: per-step synchronised timing, metrics read back every step."""
    import torch.nn.functional as F
    from torch import nn

    train_x, train_y, test_x, test_y = data
    params = init_params(torch, args.seed, device)
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    n_train, bs = train_x.shape[0], args.batch_size
    batches = iterations_per_epoch(n_train, args)
    step_times, timed_samples, iteration = [], 0, 0
    for epoch in range(1, args.epochs + 1):
        sync()
        epoch_start = time.perf_counter()
        perm = torch.randperm(n_train, generator=shuffle_gen).to(device)
        loss_sum = 0.0
        correct = 0
        seen = 0
        for b in range(batches):
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
        on_epoch(epoch, loss_sum, correct, seen, train_seconds,
                 lambda X: lenet(F, X, params), loss_fn)
    timing = {"method": "per step: time.perf_counter around forward+backward+sgd, "
              "synchronised on both sides on cuda; gather excluded; "
              "samples_per_s = timed samples / sum of step times"}
    return step_times, sum(step_times), timed_samples, timing, None


def train_module(torch, args, data, device, cuda, sync, on_epoch):
    """The nn.Module loop: device gather, no per-step host synchronisation, optional graph."""
    from torch import nn

    train_x, train_y, test_x, test_y = data
    model = make_lenet_module(torch, args.seed, device)
    loss_fn = nn.CrossEntropyLoss(reduction="none")
    step = ModuleStep(torch, model, loss_fn, train_x, train_y, args.lr, args.batch_size)
    graph = None
    if args.cuda_graph:
        graph = {"captured": False, "capture_warmup_steps": CAPTURE_WARMUP_STEPS}
        if train_x.shape[0] >= args.batch_size:
            t0 = time.perf_counter()
            step.capture()
            graph.update(captured=True, capture_seconds=time.perf_counter() - t0)
            log(args, "captured the step (batch %d) as one CUDA graph in %.2fs"
                % (args.batch_size, graph["capture_seconds"]))
        else:
            log(args, "warning: fewer training examples (%d) than --batch-size %d: no full "
                "minibatch, nothing to capture; every step runs eagerly"
                % (train_x.shape[0], args.batch_size))
    shuffle_gen = torch.Generator().manual_seed(args.seed)
    n_train, bs = train_x.shape[0], args.batch_size
    batches = iterations_per_epoch(n_train, args)
    clock = RegionClock(torch, cuda)
    step_times, timed_seconds, timed_samples, iteration = [], 0.0, 0, 0
    for epoch in range(1, args.epochs + 1):
        sync()
        epoch_start = time.perf_counter()
        perm = torch.randperm(n_train, generator=shuffle_gen).to(device)
        seen = 0
        timing_region = False
        for b in range(batches):
            idx = perm[b * bs:(b + 1) * bs]
            if not timing_region and iteration >= args.warmup_iterations:
                clock.begin()
                timing_region = True
            step.step(idx)
            iteration += 1
            n = idx.shape[0]
            seen += n
            if timing_region:
                clock.mark()
                timed_samples += n
        if timing_region:
            times, wall = clock.end()
            step_times.extend(times)
            timed_seconds += wall
        sync()
        train_seconds = time.perf_counter() - epoch_start
        loss_sum, correct = step.take_epoch_metrics()
        on_epoch(epoch, loss_sum, correct, seen, train_seconds, model, loss_fn)
    if graph is not None:
        graph.update(replays=step.replays, eager_steps=step.eager_steps)
    timing = {"method": "per epoch, one region over its timed steps (gather included), "
              "synchronised only at its start and end; samples_per_s = timed samples / "
              "regions' wall time; step percentiles from "
              + ("CUDA events between consecutive steps" if cuda
                 else "time.perf_counter between consecutive steps")}
    return step_times, timed_seconds, timed_samples, timing, graph


def iterations_per_epoch(n_train, args):
    batches = (n_train + args.batch_size - 1) // args.batch_size
    if args.max_iterations_per_epoch is not None:
        batches = min(batches, args.max_iterations_per_epoch)
    return batches


def run(args):
    import numpy as np
    import torch

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
    # FP32 everywhere, as ParaLab computes (cuDNN's default is TF32 on Ampere and later).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

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
    log(args, "data: %s (%d train, %d test) loaded in %.2fs; torch %s, %d threads, %s, %s"
        % (data_dir, n_train, n_test, time.perf_counter() - t0, torch.__version__,
           torch.get_num_threads(), device, baseline_name(args)))

    epochs = []

    def on_epoch(epoch, loss_sum, correct, seen, train_seconds, forward, loss_fn):
        eval_start = time.perf_counter()
        test_loss, test_acc = evaluate(torch, forward, loss_fn, test_x, test_y)
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

    train = train_book if args.model == "book" else train_module
    step_times, timed_seconds, timed_samples, timing, graph = train(
        torch, args, (train_x, train_y, test_x, test_y), device, cuda, sync, on_epoch)

    ordered = sorted(step_times)
    ms = lambda v: None if v is None else v * 1000.0
    timing.update({
        "median_iteration_ms": ms(percentile(ordered, 0.5)),
        "p10_iteration_ms": ms(percentile(ordered, 0.1)),
        "p90_iteration_ms": ms(percentile(ordered, 0.9)),
        "samples_per_s": (timed_samples / timed_seconds) if timed_seconds > 0 else None,
        "timed_iterations": len(step_times),
        "timed_samples": timed_samples,
        "timed_seconds": timed_seconds,
    })
    if not step_times:
        log(args, "warning: no timed iterations (all steps were warm-up)")
    else:
        log(args, "timing: %d steps, median %.3f ms (p10 %.3f, p90 %.3f), %.1f images/s"
            % (len(step_times), timing["median_iteration_ms"], timing["p10_iteration_ms"],
               timing["p90_iteration_ms"], timing["samples_per_s"]))

    cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "schema_version": SCHEMA_VERSION,
        "baseline": baseline_name(args),
        "argv": [PROG] + args.argv,
        "mode": {"model": args.model, "cuda_graph": args.cuda_graph},
        "torch_version": torch.__version__,
        "torch_cuda_version": torch.version.cuda,
        "cudnn_version": cudnn_version,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,  # False: cuDNN's heuristics choose
        "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                 "cudnn": torch.backends.cudnn.allow_tf32},
        "threads": torch.get_num_threads(),
        "device": args.device,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "config": {
            "epochs": args.epochs,
            "batch_size": args.batch_size,
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
            "iterations_per_epoch": iterations_per_epoch(n_train, args),
            "drop_last": False,
            "data_dir": os.path.abspath(data_dir),
        },
        "cuda_graph": graph,
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
    except (DataError, ConfigError) as e:
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
