"""simworld.worldmodel: the learned transition function (serialization, tokenizer, AR and
masked-diffusion models, engines, checkpoints). Not built yet: see the open issues."""
