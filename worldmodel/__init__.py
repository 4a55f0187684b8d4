"""simworld.worldmodel: the learned transition function.

Built: the one serialization (`context`, `render`, `views`, `patch`), retrieval of similar
recorded steps (`retrieval`: the example block, and the memory a checkpoint carries), the
byte-level BPE tokenizer, the autoregressive model (from scratch, a local HF directory, or
the GGUF SmolLM2-135M-Instruct), the masked-diffusion model (`mdlm`: a prefix encoded once,
the target denoised in K parallel steps; `mdlm_sample.MDLMEngine` serves it), checkpoints
of either kind, and the inference engines (transformers with its own decode path, any
OpenAI-compatible endpoint, vLLM untested), and `sample_mean.SampleMean`, a wrapper that
answers each predicted float with the mean of K sampled predictions. Importing this
package does not import torch.

    from simworld.worldmodel import load_world_model
    wm = load_world_model("path/to/checkpoint")
    predictions = wm.predict([wm.context(episode, 0)])
"""

from simworld.worldmodel.world_model import (
    Prediction,
    TextWorldModel,
    WorldModel,
    default_checkpoint,
    load_world_model,
)

__all__ = ["Prediction", "TextWorldModel", "WorldModel", "default_checkpoint", "load_world_model"]
