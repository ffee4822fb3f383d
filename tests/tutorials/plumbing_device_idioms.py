# Device and dtype idioms found at the top of most PyTorch programs
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(device)
print(torch.cuda.is_available(), torch.cuda.device_count())
torch.manual_seed(0)

x = torch.randn(4, 3, device=device, dtype=torch.float64, requires_grad=True)
w = torch.randint(0, 5, (3,), device=device).to(device)
print(x.device, x.dtype, x.type(), w.dtype, w.type())
y = (x.to(device) * w.to(x.dtype)).sum()
y.backward()
print(x.grad.cpu())
print(x.data.requires_grad, x.is_cuda, x.get_device())
with torch.no_grad():
    x.data -= 0.1 * x.grad
    x.grad.zero_()
print(x.grad)

t = torch.zeros(2, 3, dtype=torch.uint8, device="cpu") + 250
print(t + 10, (t > 100).all(), t.sum())
v, i = torch.sort(torch.tensor([3.0, 1.0, 2.0]), descending=True)
print(v, i)
top = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]]).topk(2, dim=1)
print(top.values, top.indices)
print(torch.arange(6).reshape(2, 3).repeat(2, 1))
print(torch.tensor([1.0, 2.0]).sum(axis=0), torch.isclose(torch.tensor([1.0]), torch.tensor([1.0 + 1e-9])))
