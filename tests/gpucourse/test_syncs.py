"""gpucourse.syncs: every host read of a tensor's value is counted, with its line; nothing else is."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gpucourse import syncs


def reads_of(fn):
    with syncs.count_host_reads() as reads:
        fn()
    return [read.what for read in reads]


def as_host_number(tensor):  # a helper that hides the read one call away
    return tensor.item()


@pytest.mark.parametrize("read, kind", [
    (lambda t: t.item(), "item()"),
    (lambda t: float(t), "float()"),
    (lambda t: int(t), "int()"),
    (lambda t: bool(t > 0), "bool()"),
    (lambda t: t.tolist(), "tolist()"),
    (lambda t: t.numpy(), "numpy()"),
    (lambda t: repr(t), "repr()"),
    (lambda t: f"{t:.3f}", "an f-string"),
    (lambda t: as_host_number(t), "item()"),
    (lambda t: torch.allclose(t, t), "torch.allclose"),
    (lambda t: torch.equal(t, t), "torch.equal"),
    (lambda t: t.untyped_storage()[0], "untyped_storage()"),
])
def test_each_kind_of_read_is_counted_once(read, kind):
    t = torch.tensor(1.5)
    found = reads_of(lambda: read(t))
    assert found and found[0].startswith(kind), found
    assert len(found) == 1 or kind == "untyped_storage()", found  # the storage, then the byte read from it


def test_a_python_if_on_a_tensor_is_a_read():
    t = torch.tensor(2.0)

    def branch():
        if t > 1:
            return 1
        return 0

    assert reads_of(branch) == ["bool() (an `if` or `and` on a tensor)"]


def test_print_reads_once_however_many_elements(capsys):
    values = torch.arange(100.0)
    assert len(reads_of(lambda: print(values))) == 1


# Each of these synchronises on a GPU (torch.cuda.set_sync_debug_mode reports it), and each is seen on a CPU:
# at the dispatcher (ops inside library functions too), or as a copy into a tensor that plays the host.
@pytest.mark.parametrize("op, kind", [
    (lambda x, labels: torch.where(x > 0), "nonzero"),
    (lambda x, labels: F.one_hot(labels), "a value read"),  # reads the largest label to size the result
    (lambda x, labels: torch.bincount(labels), "bincount"),
    (lambda x, labels: torch.histc(x), "histc"),  # no range given: read from the data
    (lambda x, labels: x.clone().__setitem__(x > 0, 0.0), "index_put_"),  # x[mask] = 0
    (lambda x, labels: torch.empty(3).copy_(x), "a copy to the host"),  # a buffer made for the host
    (lambda x, labels: x.to(torch.zeros(1, dtype=torch.float64)), "a copy to the host"),
    (lambda x, labels: torch.as_tensor(x, device="cpu"), "a copy to the host"),
    (lambda x, labels: x.cpu(), "a copy to the host"),
    (lambda x, labels: x.to("cpu"), "a copy to the host"),
    (lambda x, labels: torch.ones(3).to(x), "a blocking copy from the host"),  # cudaMemcpy from pageable memory waits
    (lambda x, labels: torch.ones(3).to(x.device), "a blocking copy from the host"),
])
def test_what_synchronises_on_a_gpu_is_counted_on_a_cpu(op, kind):
    x, labels = torch.tensor([1.0, -1.0, 2.0]), torch.tensor([0, 2, 1])
    found = reads_of(lambda: op(x, labels))
    assert len(found) == 1 and kind in found[0], found


def test_tensors_made_for_the_host_are_read_for_free_and_device_ones_are_not():
    x = torch.tensor([1.0, -1.0, 2.0])

    def work():
        host = torch.zeros(2)  # on a GPU this lives on the CPU: reading it waits for nothing
        host[0] = 3.0
        host[1:].add_(1).item()
        on_device = torch.zeros(2, device=x.device)  # made where x is: a device tensor
        on_device[0] = x[0]
        F.one_hot(torch.tensor([0, 1]).to(x.device), num_classes=3)  # (the copy is counted; the CPU's range check is not)
        return on_device

    found = reads_of(work)
    assert found == ["a blocking copy from the host (to())"], found


REPEATS = torch.tensor([1, 2, 1])


@pytest.mark.parametrize("op", [
    lambda x: x[x > 0], lambda x: torch.nonzero(x), lambda x: x.nonzero(), lambda x: torch.masked_select(x, x > 0),
    lambda x: torch.unique(x), lambda x: x.repeat_interleave(REPEATS),
])
def test_ops_whose_size_depends_on_the_values_are_reads(op):
    x = torch.tensor([1.0, -1.0, 2.0])  # made outside the block: a device tensor (one made inside, without a device, is the host's)
    found = reads_of(lambda: op(x))
    assert len(found) == 1 and "depends on the values" in found[0], found


def test_device_work_is_not_a_read():
    x = torch.randn(4, 3)
    net = nn.Linear(3, 2)

    def work():
        y = net(x).relu().sum()
        y.backward()
        x[0], x[1:], x[torch.tensor([0, 2])]  # plain and integer-tensor indexing: the sizes are known
        torch.where(x > 0, x, 0.0).clamp(max=1.0).mean()
        x.to(torch.float64), x.to(x.device), x.to(x), torch.zeros_like(x), torch.ones(2, device=x.device), x.shape, x.size(0), x.dim(), len(x)
        torch.histc(x, bins=4, min=-1, max=1), x.repeat_interleave(2), x.new_zeros(3)

    assert reads_of(work) == []


def test_an_optimizers_step_count_is_not_counted():
    net = nn.Linear(3, 1)
    optimizer = torch.optim.Adam(net.parameters())

    def two_steps():
        for _ in range(2):
            net(torch.ones(2, 3)).sum().backward()
            optimizer.step()

    assert reads_of(two_steps) == []  # Adam reads its CPU step count with .item() every step: host memory, no sync


def test_a_read_names_the_line_outside_torch_that_made_it():
    t = torch.tensor(3.0)
    with syncs.count_host_reads() as reads:
        as_host_number(t)
    [read] = list(reads)
    assert "test_syncs.py" in read.where and "(as_host_number)" in read.where, read.where
    assert str(reads).startswith("1 host read:") and "item() at" in str(reads)
    assert reads.summary().startswith("1 host read(s), the first item()")


def test_nothing_is_counted_outside_the_block():
    t = torch.tensor(1.0)
    with syncs.count_host_reads() as reads:
        pass
    t.item()
    assert len(reads) == 0 and str(reads) == "0 host reads"


def test_the_counter_survives_an_exception_and_stops():
    t = torch.tensor(1.0)
    with pytest.raises(ValueError), syncs.count_host_reads() as reads:
        t.item()
        raise ValueError("inside")
    torch.tensor(2.0).item()
    assert len(reads) == 1
