# "Autograd mechanics" notes, Backward Hooks execution (in-place modification with tensor hooks)
# https://pytorch.org/docs/stable/notes/autograd.html#behavior-of-tensor-hooks-when-tensor-is-modified-in-place
import torch

def fn(grad):
    print("hook saw", grad)
    return grad

t = torch.tensor(1., requires_grad=True).sin()
t.cos_()
t.register_hook(fn)
t.backward()

t = torch.tensor(1., requires_grad=True).sin()
t.register_hook(fn)
t.cos_()
t.backward()
