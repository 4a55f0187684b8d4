"""simworld.training: SFT, masked-diffusion and GRPO recipes for world models. Not built
yet: see the open issues."""
