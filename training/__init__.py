"""simworld.training: recipes that train world models. Built: SFT of the autoregressive
model (`simworld train sft`, `simworld.training.sft_run`). Not built yet: masked-diffusion
training and GRPO with sim-to-real rewards (see the open issues)."""
