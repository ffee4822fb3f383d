# Docstring examples of torch.no_grad, torch.enable_grad and torch.set_grad_enabled
import torch

x = torch.tensor([1.], requires_grad=True)
with torch.no_grad():
    y = x * 2
print(y.requires_grad)

@torch.no_grad()
def doubler(x):
    return x * 2
z = doubler(x)
print(z.requires_grad)

@torch.no_grad()
def tripler(x):
    return x * 3
z = tripler(x)
print(z.requires_grad)

# factory function exception
with torch.no_grad():
    a = torch.nn.Parameter(torch.rand(10))
print(a.requires_grad)

x = torch.tensor([1.], requires_grad=True)
with torch.no_grad():
    with torch.enable_grad():
        y = x * 2
print(y.requires_grad)
y.backward()
print(x.grad)

@torch.enable_grad()
def doubler(x):
    return x * 2
with torch.no_grad():
    z = doubler(x)
print(z.requires_grad)

x = torch.tensor([1.], requires_grad=True)
is_train = False
with torch.set_grad_enabled(is_train):
    y = x * 2
print(y.requires_grad)
_ = torch.set_grad_enabled(True)
y = x * 2
print(y.requires_grad)
_ = torch.set_grad_enabled(False)
y = x * 2
print(y.requires_grad)
