"""gpucourse.syncs: every host read of a tensor's value is counted, with its line; nothing else is."""

import pytest
import torch
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
    assert len(found) == 1 and found[0].startswith(kind), found


def test_a_python_if_on_a_tensor_is_a_read():
    t = torch.tensor(2.0)

    def branch():
        if t > 1:
            return 1
        return 0

    assert reads_of(branch) == ["bool() (an `if` or `and` on a tensor)"]


def test_print_reads_once_however_many_elements(capsys):
    assert len(reads_of(lambda: print(torch.arange(100.0)))) == 1


@pytest.mark.parametrize("op", [
    lambda x: x[x > 0], lambda x: torch.nonzero(x), lambda x: x.nonzero(), lambda x: torch.masked_select(x, x > 0),
    lambda x: torch.unique(x), lambda x: x.repeat_interleave(torch.tensor([1, 2, 1])),
])
def test_ops_whose_size_depends_on_the_values_are_reads(op):
    found = reads_of(lambda: op(torch.tensor([1.0, -1.0, 2.0])))
    assert len(found) == 1 and "depends on the values" in found[0], found


def test_device_work_is_not_a_read():
    x = torch.randn(4, 3)
    net = nn.Linear(3, 2)

    def work():
        y = net(x).relu().sum()
        y.backward()
        x[0], x[1:], x[torch.tensor([0, 2])]  # plain and integer-tensor indexing: the sizes are known
        torch.where(x > 0, x, 0.0).clamp(max=1.0).mean()
        x.to(torch.float64), x.to("cpu"), x.cpu(), x.shape, x.size(0), x.dim(), len(x)

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
    with syncs.count_host_reads() as reads:
        as_host_number(torch.tensor(3.0))
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
    with pytest.raises(ValueError), syncs.count_host_reads() as reads:
        torch.tensor(1.0).item()
        raise ValueError("inside")
    torch.tensor(2.0).item()
    assert len(reads) == 1
