"""``symgrad.optim``: PyTorch's ``torch.optim`` optimizers (SGD, Adam, AdamW, RMSprop), same update formulas.

>>> import symgrad as torch
>>> model = torch.nn.Linear(2, 1)
>>> opt = torch.optim.Adam(model.parameters(), lr=1e-2)
>>> loss = model(torch.ones(4, 2)).pow(2).mean()
>>> opt.zero_grad(); loss.backward(); opt.step()
"""

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop"]
