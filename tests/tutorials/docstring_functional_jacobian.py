# Docstring examples of torch.autograd.functional.jacobian and hessian
import torch
from torch.autograd.functional import jacobian, hessian

def exp_reducer(x):
    return x.exp().sum(dim=1)
inputs = torch.rand(2, 2)
print(jacobian(exp_reducer, inputs))

print(jacobian(exp_reducer, inputs, create_graph=True))

def exp_adder(x, y):
    return 2 * x.exp() + 3 * y
inputs = (torch.rand(2), torch.rand(2))
print(jacobian(exp_adder, inputs))

def pow_reducer(x):
    return x.pow(3).sum()
inputs = torch.rand(2, 2)
print(hessian(pow_reducer, inputs))
