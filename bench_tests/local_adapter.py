"""A one-rank training adapter for in-process tests of the training loop: plain autograd, no
process group."""
from harness.rank.frameworks.base import Trainer


class LocalAdapter(Trainer):
    """A one-process stand-in: plain autograd, no collectives."""

    name = "local"

    def setup(self, rank, device):
        pass

    def wrap(self, model, optimizer, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()
        return loss.detach()

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def average(self, tensor):
        return tensor

    def barrier(self):
        pass

    def shutdown(self):
        pass
