"""Model builders: a model name -> the MXNet forward Symbol and input shapes (see :mod:`tofu.models.zoo`)."""
from tofu.models.zoo import (GPT_MODELS, PAPER_EXTRA_MODELS, PAPER_MODELS, SMALL_MODELS, Model, ModelOptions,
                             build_model, model_names)

__all__ = ["GPT_MODELS", "PAPER_EXTRA_MODELS", "PAPER_MODELS", "SMALL_MODELS", "Model", "ModelOptions", "build_model",
           "model_names"]
