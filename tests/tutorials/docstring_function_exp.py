# Docstring example of torch.autograd.Function (the Exp function), plus a gradcheck of it
import torch
from torch.autograd import Function

class Exp(Function):
    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result

# Use it by calling the apply method:
input = torch.tensor([0.5, -1.0, 2.0], dtype=torch.double, requires_grad=True)
output = Exp.apply(input)
print(output)
output.sum().backward()
print(input.grad)
print(torch.autograd.gradcheck(Exp.apply, (input,)))
