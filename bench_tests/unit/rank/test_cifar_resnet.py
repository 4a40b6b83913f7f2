"""The CIFAR ResNet of seeds 002/003 as He et al. define it (harness.rank.cifar_resnet)."""
import pytest
import torch

from harness.rank.cifar_resnet import cifar_resnet
from harness.rank.models import build_model


@pytest.mark.parametrize("name, layers, parameters", [
    ("resnet44", 44, 658_586),  # "0.66M" in He et al.'s Table 6
    ("resnet20", 20, 269_722),  # "0.27M"
])
def test_a_cifar_resnet_has_the_papers_layers_and_parameters(name, layers, parameters):
    model = build_model(name, num_classes=10)
    weighted = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(weighted) == layers
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_a_stage_halves_the_map_and_pads_the_new_channels_with_zeros():
    model = cifar_resnet(20, num_classes=10)
    first_of_stage_two = model.layers[3]
    x = torch.randn(1, 16, 8, 8)
    shortcut = first_of_stage_two.shortcut(x)
    assert shortcut.shape == (1, 32, 4, 4)
    assert torch.equal(shortcut[:, 8:24], x[:, :, ::2, ::2])
    assert not shortcut[:, :8].any() and not shortcut[:, 24:].any()


@pytest.mark.parametrize("depth", [21, 45, 2])
def test_a_depth_not_of_the_form_6n_plus_2_is_refused(depth):
    with pytest.raises(ValueError, match="6n\\+2"):
        cifar_resnet(depth)


def test_no_pretrained_weights_are_pretended():
    with pytest.raises(ValueError, match="random weights"):
        cifar_resnet(44, weights="IMAGENET1K_V1")
