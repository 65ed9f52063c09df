"""kit.nn: a small neural-network engine on kit arrays and workspaces.

>>> from kit.nn import Network, Dense, ReLU, Adam, mlp, resnet18, WorkspaceMode
>>> net = mlp(64, hidden=(128,), n_out=10, updater=Adam(1e-3))
>>> print(net.summary())
Network on ...: input (64,) -> output (10,)
  Dense: (64,) -> (128,), 8,320 params
  ReLU: (128,) -> (128,), 0 params
  Dense: (128,) -> (10,), 1,290 params
  9,610 parameters (0.04 MiB, one flat buffer)
  loss SoftmaxCrossEntropy, updater {'type': 'Adam', ...}, l2 0.0, workspaces: training SEPARATE, inference SEPARATE
"""

from kit.nn.activations import ReLU, Sigmoid, Softmax, Tanh
from kit.nn.batchnorm import BatchNorm
from kit.nn.conv import AvgPool2D, Conv2D, GlobalAvgPool, MaxPool2D
from kit.nn.layers import Dense, Dropout, Flatten, Layer, ParamSpec, Sequential
from kit.nn.losses import MSE, Loss, SoftmaxCrossEntropy
from kit.nn.mixed import LossScaleError, LossScaler
from kit.nn.network import ModelFileError, Network
from kit.nn.residual import Residual
from kit.nn.updaters import Adam, Nesterovs, Sgd, Updater
from kit.nn.workspace_mgr import ArrayType, LayerWorkspaceMgr, WorkspaceMode
from kit.nn.zoo import lenet, mlp, resnet18

__all__ = [
    "MSE",
    "Adam",
    "ArrayType",
    "AvgPool2D",
    "BatchNorm",
    "Conv2D",
    "Dense",
    "Dropout",
    "Flatten",
    "GlobalAvgPool",
    "Layer",
    "LayerWorkspaceMgr",
    "Loss",
    "LossScaleError",
    "LossScaler",
    "MaxPool2D",
    "ModelFileError",
    "Nesterovs",
    "Network",
    "ParamSpec",
    "ReLU",
    "Residual",
    "Sequential",
    "Sgd",
    "Sigmoid",
    "Softmax",
    "SoftmaxCrossEntropy",
    "Tanh",
    "Updater",
    "WorkspaceMode",
    "lenet",
    "mlp",
    "resnet18",
]
