"""kit.bench.d2l: the PyTorch model the d2l benchmark times is what the d2l table's sentences say of it
(BatchNorm's momentum and unbiased running variance, PyTorch's own and d2l's initialisation)."""

import math

import pytest


def test_what_the_gap_sentence_says_of_pytorch_is_pytorchs_code():
    torch = pytest.importorskip("torch")
    from kit.bench.d2l import _torch_model

    bn = torch.nn.BatchNorm2d(3)
    assert (bn.momentum, bn.eps) == (0.1, 1e-5)
    x = torch.randn(4, 3, 2, 2)
    bn.train()
    bn(x)
    unbiased = x.transpose(0, 1).reshape(3, -1).var(dim=1, unbiased=True)
    assert torch.allclose(bn.running_var, 0.9 + 0.1 * unbiased, rtol=1e-5)
    own = _torch_model(torch.device("cpu"), d2l_init=False)
    d2l = _torch_model(torch.device("cpu"), d2l_init=True)
    for module, d2l_module in zip(own.modules(), d2l.modules()):
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            bound = 1 / math.sqrt(module.weight[0].numel())
            assert module.weight.abs().max() <= bound and module.bias.abs().max() <= bound  # U(±1/√fan-in)
            assert module.weight.abs().max() > 0.9 * bound
            assert abs(float(d2l_module.weight.detach().std()) - 0.01) < 0.002  # d2l's N(0, 0.01)
            assert d2l_module.bias.abs().max() <= bound and d2l_module.bias.abs().max() > 0  # left at PyTorch's own
