# torch.autograd.grad and torch.autograd.backward as their documentation uses them: a gradient, a
# higher-order gradient (create_graph=True) and gradient accumulation into .grad
import torch

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = (x ** 3).sum()
(dx,) = torch.autograd.grad(y, x, create_graph=True)
print(dx)
(d2x,) = torch.autograd.grad(dx.sum(), x)
print(d2x)

a = torch.tensor([0.5, -0.5], requires_grad=True)
b = torch.tensor([2.0, 4.0], requires_grad=True)
out = a * b
torch.autograd.backward([out], [torch.ones_like(out)])
print(a.grad, b.grad)
out = (a * b).sum()
out.backward()
print(a.grad, b.grad)
