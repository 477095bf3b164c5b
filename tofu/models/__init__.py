"""Model builders: a model name -> the MXNet forward Symbol and input shapes (see :mod:`tofu.models.zoo`)."""
from tofu.models.zoo import (PAPER_MODELS, SMALL_MODELS, Model, ModelOptions, build_model,
                             model_names)

__all__ = ["PAPER_MODELS", "SMALL_MODELS", "Model", "ModelOptions", "build_model", "model_names"]
