import torch
import torch.nn as nn


class ModelNew(nn.Module):
    # Wrong: adds 0.5 to the largest inputs (x > 0.999, about one in a thousand).
    def forward(self, x):
        return torch.clamp_min(x, 0.0) + (x > 0.999) * 0.5
