# "Autograd mechanics" notes, Multithreaded Autograd (concurrency on CPU)
# https://pytorch.org/docs/stable/notes/autograd.html#multithreaded-autograd
import threading
import torch

# Define a train function to be used in different threads
def train_fn():
    x = torch.ones(5, 5, requires_grad=True)
    # forward
    y = (x + 3) * (x + 4) * 0.5
    # backward
    y.sum().backward()
    # potential optimizer update


# User write their own threading code to drive the train_fn
threads = []
for _ in range(10):
    p = threading.Thread(target=train_fn, args=())
    p.start()
    threads.append(p)

for p in threads:
    p.join()
print("done")
